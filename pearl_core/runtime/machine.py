"""The machine check: refuse, before any worker starts, a run this machine cannot hold.

The config and plan dataclasses (:mod:`pearl_core.runtime.config`) refuse
values that are wrong anywhere; :func:`check_machine` refuses values that are
wrong *here*: a replay that does not fit in the memory available now, far more
environments than cores, a batch the replay can never hold, a log directory
that cannot be created. A runtime calls it once at the start of its
constructor, so a refused plan starts nothing, allocates nothing and writes
nothing::

    check_machine(config, plan)      # SpecError naming the limit, expected vs found, the fix

Host memory a run needs (an estimate from the environment's transition row, in
bytes; a part placed on a device other than ``"cpu"`` lives in that device's
memory and is not counted)::

    row      = sum of the transition fields' bytes (obs, action, reward, next_obs, done)
    storage  = capacity * row                                   Data Storage (storage_device "cpu"); with
               frame storage, the most its frame pool may hold (frames.frame_storage_bytes: its bound)
    tree     = 2 * tree_bytes(capacity, fanout)                 sum tree (prioritized, rm_device "cpu")
    rings    = n_actors * queue_size * (insert_batch + envs_per_actor) * (row + 16)   actor slots
    batches  = (max_in_flight + 3) * batch_size * (row + 12)    learner slots, sampled batch, its copy

(with frame storage too, the actor slots and the batches carry whole stacks: ``row``
is the plain row there). The memory it may use is the memory available now
(:func:`~pearl_core.validation.memory_available_bytes`), or less under an address-space
limit (``ulimit -v``): what that limit leaves this process
(:func:`~pearl_core.validation.address_space_limit`); the refusal names the one that binds.
"""

from __future__ import annotations

import os
from typing import Any

from pearl_core.errors import SpecError
from pearl_core.runtime.config import RunConfig, RuntimePlan
from pearl_core.runtime.framesprobe import resolve_frame_storage
from pearl_core.sumtree import tree_bytes
from pearl_core.validation import address_space_limit, cpu_count, gib, memory_available_bytes

__all__ = ["ENVS_PER_CORE", "check_machine", "host_memory_bytes", "row_bytes"]

#: Environments (``n_actors * envs_per_actor``) allowed per core of this machine.
ENVS_PER_CORE = 64


def row_bytes(env_id: str, frame_storage: str = "off", **env_options: Any) -> int:
    """Host bytes of one stored transition of ``env_id`` (its observation and action layout; with
    ``frame_storage`` ``"on"``, or ``"auto"`` for stacked frames, as :class:`~pearl_core.replay.frames.FrameStorage`
    keeps it)."""
    return _row_and_storage(env_id, frame_storage, None, **env_options)[0]


def _row_and_storage(env_id: str, frame_storage: str, capacity: int | None, **env_options: Any
                     ) -> tuple[int, int | None]:
    """:func:`row_bytes`, and with frame storage at ``capacity`` the Data Storage's bytes (``None`` otherwise:
    they are capacity * row)."""
    from pearl_core.envs import env_spaces
    from pearl_core.replay.frames import frame_storage_bytes, frame_storage_fits, storage_row_bytes
    from pearl_core.replay.storage import StorageSpec

    spec = StorageSpec.from_spaces(*env_spaces(env_id, **env_options))
    frames = frame_storage == "on" or (frame_storage == "auto" and frame_storage_fits(spec))
    if frames and capacity is not None:  # the actor slots and batches still carry whole stacks: the plain row
        return storage_row_bytes(spec, False), frame_storage_bytes(spec, capacity)
    return storage_row_bytes(spec, frames), None


def host_memory_bytes(config: RunConfig, plan: RuntimePlan, row: int, storage: int | None = None) -> dict[str, int]:
    """The host-memory estimate of the module docstring, per part (bytes); ``storage``: the Data Storage's
    bytes when they are not ``capacity * row`` (frame storage)."""
    capacity, fanout = config.replay.capacity, config.replay.fanout
    return {
        "Data Storage": (capacity * row if storage is None else storage) if plan.storage_device == "cpu" else 0,
        "sum tree": 2 * tree_bytes(capacity, fanout)
        if config.replay.kind == "prioritized" and plan.rm_device == "cpu" else 0,
        "actor slots": plan.n_actors * plan.queue_size * (plan.insert_batch + plan.envs_per_actor) * (row + 16),
        "batch buffers": (plan.max_in_flight + 3) * config.batch_size * (row + 12),
    }


def check_machine(config: RunConfig, plan: RuntimePlan, *, row: int | None = None,
                  memory_bytes: int | None = None, cores: int | None = None) -> None:
    """Refuse a run this machine cannot hold; return ``None`` when it can.

    Args:
        config, plan: the run (already valid values: their constructors checked them).
        row: bytes of one transition (default: from ``config.env_id``'s spaces).
        memory_bytes: host memory available (default: what is available now).
        cores: cores this process may use (default: its affinity mask).

    Raises:
        SpecError: ``batch_size > replay.capacity``; ``n_actors * envs_per_actor
            > ENVS_PER_CORE * cores``; the host memory estimate beyond the
            available memory; a ``log_dir`` that cannot be created. The message
            names the limit, expected vs found, and the fix. Nothing is
            started, allocated or written.
    """
    if not isinstance(config, RunConfig) or not isinstance(plan, RuntimePlan):
        raise SpecError(f"check_machine needs a RunConfig and a RuntimePlan; found {type(config).__name__} and "
                        f"{type(plan).__name__}.")
    capacity, batch = config.replay.capacity, config.batch_size
    if batch > capacity:
        raise SpecError(f"RunConfig.batch_size = {batch:,} is larger than the replay's capacity = {capacity:,}; "
                        f"expected batch_size <= capacity (a batch is drawn from what the replay holds). Fix: a "
                        f"smaller batch_size or ReplayConfig(capacity >= {batch:,}).")
    cores = cpu_count() if cores is None else cores
    envs = plan.n_actors * plan.envs_per_actor
    if envs > ENVS_PER_CORE * cores:
        raise SpecError(f"RuntimePlan: n_actors * envs_per_actor = {plan.n_actors:,} * {plan.envs_per_actor:,} = "
                        f"{envs:,} environments is far beyond this machine's {cores} core(s); expected at most "
                        f"{ENVS_PER_CORE} per core ({ENVS_PER_CORE * cores:,}). Fix: about one actor per core "
                        f"(n_actors={max(1, cores - 1)}) and fewer envs_per_actor.")
    _check_log_dir(config.log_dir)
    storage = None
    if row is None:
        frames = resolve_frame_storage(config) if plan.storage_device == "cpu" else "off"
        row, storage = _row_and_storage(config.env_id, frames, capacity, **config.env_options)
    available = memory_available_bytes() if memory_bytes is None else memory_bytes
    space, limit = address_space_limit(), None
    if space is not None and (available is None or space[1] < available):
        limit, available = space  # ulimit -v leaves less than the memory available: it binds
    if available is None:
        return
    parts = host_memory_bytes(config, plan, row, storage)
    need = sum(parts.values())
    if need > available:
        named = {"Data Storage": "Data Storage (frame storage, counted at its frame pool's bound)"
                 if storage is not None else "Data Storage"}
        detail = ", ".join(f"{named.get(name, name)} {_size(n)}" for name, n in parts.items() if n)
        per_slot = (parts["Data Storage"] + parts["sum tree"]) / capacity
        rest = need - parts["Data Storage"] - parts["sum tree"]
        fits = int((available - rest) / per_slot) if per_slot and available > rest else 0
        free = "fit in what the limit leaves" if limit is not None else "fill the memory free now"
        hint = (f"a smaller replay capacity (about {fits:,} would {free})" if fits >= batch else
                "fewer actors, a smaller queue_size/insert_batch or batch_size")
        if limit is not None:
            have = (f"this process's address-space limit (ulimit -v = {gib(limit)}, {gib(limit - available)} of "
                    f"it mapped already) leaves {gib(available)}")
            more = "or raise ulimit -v (e.g. `ulimit -v unlimited` before the run starts)"
        else:
            have, more = f"{gib(available)} is available", "or run where more memory is free"
        raise SpecError(f"this run needs about {gib(need)} of host memory ({detail}; {row:,} bytes per transition "
                        f"of {config.env_id!r}) but {have}; expected at most the memory it may use. Fix: {hint}, "
                        f"{more}.")


def _size(nbytes: int) -> str:
    if nbytes >= 2**30:
        return gib(nbytes)
    return f"{nbytes / 2**20:,.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:,.1f} KiB"


def _check_log_dir(log_dir: str) -> None:
    where = f"RunConfig.log_dir = {log_dir!r}"
    if "\0" in log_dir:
        raise SpecError(f"{where} is invalid; expected a path without a NUL byte. Fix: e.g. log_dir='runs/demo'.")
    path = os.path.abspath(log_dir)
    while not os.path.exists(path):  # the nearest existing ancestor decides whether it can be created
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    if os.path.exists(path) and not os.path.isdir(path):
        raise SpecError(f"{where}: {path!r} is a file, not a directory; expected a directory (or a path where one "
                        "can be created). Fix: choose another log_dir.")
    if os.path.isdir(path) and not os.access(path, os.W_OK | os.X_OK):
        raise SpecError(f"{where}: the directory {path!r} is not writable here; expected a writable place for the "
                        "logs and checkpoints. Fix: choose a log_dir you can write to.")
