"""Kernel launch counters: which of this plugin's kernels ran, how often, in which processes.

Every launch through :class:`~pearl_fpga.runtime.DpctlRuntime` is counted by
kernel name in this process (:func:`counts`). A run's learner and replay
manager live in worker processes, so the counts can also be shared: when the
environment variable ``PEARL_FPGA_COUNTERS`` names a directory, each process
keeps its counts in a small file there (``<pid>.counts``, a memory-mapped
int64 array, one slot per name in :data:`KERNELS`); :func:`read_dir` sums
them. The files are written through a shared mapping, so they are complete
even when a worker ends with ``os._exit``.

Typical use (what the end-to-end tests do)::

    PEARL_FPGA_COUNTERS=/tmp/fpga-counts python runtime.py --max-env-steps 1000
    python -c "from pearl_fpga.counters import read_dir; print(read_dir('/tmp/fpga-counts'))"
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np

__all__ = ["ENV", "KERNELS", "PRIMITIVE", "by_primitive", "counts", "read_dir", "record"]

ENV = "PEARL_FPGA_COUNTERS"

#: Every kernel of ``kernels/*.cl``, in a fixed order (the slots of a counts file).
KERNELS = ("rm_level_init", "rm_sample_level", "rm_update_level", "rm_get_leaf",
           "fw_linear", "dqn_loss", "bw_linear", "wa_linear", "grad_reduce", "sqnorm_partial", "clip_coef",
           "adam_step", "sgd_step", "polyak", "ds_scatter", "ds_gather", "ds_gather_bool_f32",
           "ds_batch_to_host")
#: Not a kernel: one count per sampled batch read back to the host (the batch left the device).
BATCH_TO_HOST = "ds_batch_to_host"

#: The primitive each kernel belongs to.
PRIMITIVE = {**{k: "replay manager" for k in KERNELS[:4]}, **{k: "learner" for k in KERNELS[4:14]},
             "ds_scatter": "Data Storage", "ds_gather": "Data Storage", "ds_gather_bool_f32": "Data Storage",
             "ds_batch_to_host": "batch to host"}

_local: Counter = Counter()
_shared: dict[str, np.memmap] = {}


def _file() -> np.memmap | None:
    where = os.environ.get(ENV)
    if not where:
        return None
    key = f"{where}:{os.getpid()}"
    mm = _shared.get(key)
    if mm is None:
        Path(where).mkdir(parents=True, exist_ok=True)
        mm = _shared[key] = np.memmap(Path(where) / f"{os.getpid()}.counts", dtype=np.int64, mode="w+",
                                      shape=(len(KERNELS),))
    return mm


def record(name: str) -> None:
    """Count one launch of kernel ``name`` (in this process, and in the shared file if enabled).

    A build variant's suffix (``fw_linear_uf4``: the learner stage built with unroll 4) counts as the kernel.
    """
    base, sep, tail = name.rpartition("_uf")
    name = base if sep and tail.isdigit() else name
    _local[name] += 1
    mm = _file()
    if mm is not None and name in KERNELS:
        mm[KERNELS.index(name)] += 1


def counts() -> dict[str, int]:
    """Launches per kernel name in this process."""
    return dict(_local)


def read_dir(path: str | os.PathLike) -> dict[str, int]:
    """Launches per kernel name, summed over every process that counted into ``path``."""
    total = np.zeros(len(KERNELS), dtype=np.int64)
    for f in sorted(Path(path).glob("*.counts")):
        total += np.fromfile(f, dtype=np.int64, count=len(KERNELS))
    return {k: int(v) for k, v in zip(KERNELS, total)}


def by_primitive(kernel_counts: dict[str, int]) -> dict[str, int]:
    """Launches per primitive (``"replay manager"``, ``"learner"``, ``"Data Storage"``), and how many
    sampled batches were read back to the host (``"batch to host"``)."""
    out: Counter = Counter()
    for k, v in kernel_counts.items():
        out[PRIMITIVE.get(k, "other")] += v
    return {p: out.get(p, 0) for p in ("replay manager", "learner", "Data Storage", "batch to host")}
