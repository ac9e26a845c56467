"""The CUDA C sources of pearl-cuda (package data) and their loading through cupy.

Every kernel lives in a ``*.cu`` file of this folder; :data:`SOURCES` lists
them, the test suite compile-checks each with ``nvcc --ptx -arch=sm_90``, and
:func:`load` compiles them with NVRTC through ``cupy.RawModule`` on first use
(cupy caches the binaries on disk).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["FUNCTIONS", "KERNEL_DIR", "SOURCES", "Kernels", "grid_include_options", "grid_source", "load", "source"]

KERNEL_DIR = Path(__file__).resolve().parent
#: Every CUDA C source shipped (each one compiles on its own with nvcc).
SOURCES = ("sumtree.cu", "sumtree_grid.cu")
#: Functions of sumtree.cu the loader fetches (as ``pearl_<name>``); sumtree_grid.cu adds ``pearl_update_grid``.
FUNCTIONS = ("sample", "get", "update_claim", "update_leaves", "update_level", "update_block", "rebuild_level")
#: NVRTC options (cupy adds the architecture of the current device).
OPTIONS = ("-std=c++17",)


def source(name: str) -> str:
    return (KERNEL_DIR / name).read_text(encoding="utf-8")


def grid_include_options(cuda_path: str | None, cupy_dir: str | None) -> tuple[str, ...]:
    """``-I`` options NVRTC needs for ``<cooperative_groups.h>`` (which pulls in ``<cuda/std/...>``).

    The toolkit's include folder and its ``cccl`` subfolder (CUDA 13 moved
    libcu++ there) when ``cuda_path`` has them, else cupy's bundled libcu++.
    """
    opts: list[str] = []
    have_std = False
    if cuda_path:
        for inc in (Path(cuda_path) / "include", Path(cuda_path) / "targets" / "x86_64-linux" / "include"):
            if (inc / "cooperative_groups.h").is_file():
                opts.append(f"-I{inc}")
                if (inc / "cccl" / "cuda" / "std").is_dir():
                    opts.append(f"-I{inc / 'cccl'}")
                    have_std = True
                have_std = have_std or (inc / "cuda" / "std").is_dir()
                break
    if not have_std and cupy_dir:
        bundled = Path(cupy_dir) / "_core" / "include" / "cupy" / "_cccl" / "libcudacxx"
        if bundled.is_dir():
            opts.append(f"-I{bundled}")
    return tuple(opts)


def grid_source() -> str:
    """``sumtree_grid.cu`` with its ``#include "sumtree.cu"`` inlined (NVRTC needs no include path)."""
    return source("sumtree_grid.cu").replace('#include "sumtree.cu"', source("sumtree.cu"))


@dataclass(frozen=True)
class Kernels:
    """Compiled functions for one device (``cupy.RawKernel`` objects)."""

    sample: Any
    get: Any
    update_claim: Any
    update_leaves: Any
    update_level: Any
    update_block: Any
    rebuild_level: Any
    update_grid: Any | None  # None when cooperative launch is unavailable
    grid_problem: str | None
    sm_count: int


@functools.lru_cache(maxsize=None)
def load(device_id: int = 0) -> Kernels:
    """Compile (or fetch from cupy's cache) the kernels for ``device_id``.

    Raises whatever cupy raises when the main module fails to compile; a
    failure of the cooperative module only disables ``update_grid``.
    """
    import cupy as cp

    with cp.cuda.Device(device_id):
        mod = cp.RawModule(code=source("sumtree.cu"), options=OPTIONS)
        fn = {name: mod.get_function(f"pearl_{name}") for name in FUNCTIONS}
        attrs = cp.cuda.runtime.getDeviceProperties(device_id)
        sm_count = int(attrs.get("multiProcessorCount", 1))
        grid, problem = None, None
        if not int(attrs.get("cooperativeLaunch", 0)):
            problem = "the device does not support cooperative launch"
        else:
            try:
                import os

                cuda_path = cp.cuda.get_cuda_path() if hasattr(cp.cuda, "get_cuda_path") else None
                inc = grid_include_options(cuda_path or os.environ.get("CUDA_PATH"), os.path.dirname(cp.__file__))
                gmod = cp.RawModule(code=grid_source(), options=OPTIONS + inc, enable_cooperative_groups=True)
                grid = gmod.get_function("pearl_update_grid")  # compiles and links now: failures land here
            except Exception as exc:  # noqa: BLE001 - any compile/link failure just disables the strategy
                grid, problem = None, f"{type(exc).__name__}: {exc}"
    return Kernels(fn["sample"], fn["get"], fn["update_claim"], fn["update_leaves"], fn["update_level"],
                   fn["update_block"], fn["rebuild_level"], grid, problem, sm_count)
