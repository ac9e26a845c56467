"""Profiled cost cells for present devices, cached on disk.

:func:`profiler_for` returns the ``profiler`` hook of :func:`~pearl_core.composer.costs.fill_matrix`.
For each spec device that a backend *available here* detects, it measures the
device and caches the row on disk: the spec's host through
:func:`~pearl_core.composer.hostprofile.profile_host` when its backend measures single
primitives (``measure_primitive``: the composer chooses the threads and variants, the
backend measures what it is asked), any other device (or a host whose backend does not)
through the backend's ``profile_cells``. Devices the spec describes but this machine lacks
get ``None``, so the analytic models answer for them (a what-if plan).

A spec device is *present* when an available backend of its kind detects a
device of the same name, or the one named by the spec device's
``options.detected_as`` (so a hand-written spec can call the detected ``cpu0``
``"epyc"``).

The cache (default ``$PEARL_CACHE_DIR``, else ``$XDG_CACHE_HOME/pearl``, else
``~/.cache/pearl``; subfolder ``profiles/``) holds one JSON file per row, keyed
by a hash of: backend name and version (its ``version`` attribute, else its
plugin distribution's version), the backend's
:meth:`~pearl_core.backend.Backend.settings` (a changed build flag or
environment setting is measured again), pearl-core's version, the device as the
spec describes it and as detection reports it, the workload, the source file of
the trainer's module (an edited trainer is measured again) and the iteration
count. Files are written atomically (:func:`pearl_core.fileio.atomic_write`), so a
crash never leaves a half-written entry; an unreadable entry is ignored and
measured again.

A backend whose ``profile_cells`` or ``settings`` raises (or returns something
other than the device's row) does not stop planning: the profiler re-raises
the error marked with :func:`~pearl_core.composer.costs.blame`, and
:func:`~pearl_core.composer.costs.fill_matrix` gives that device an empty row
whose note names the backend. A workload whose sum tree is wider than the
profiling backend's ``max_fanout`` is measured with the backend's widest
fanout (the learner cell is valid) and its replay-manager cells are left
empty (:func:`~pearl_core.composer.costs.limit_fanout`).

The measurement helpers below (:func:`median_time`, :func:`profile_replay_ops`,
:func:`profile_learner`, :func:`profile_actor_step`) run the *real* replay
classes and the *real* trainer of the workload on synthetic data, exactly as the
runtime builds them (:mod:`pearl_core.runtime.wiring`); backends call them with
their own tree factory and device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from pearl_core.composer.backends import detected_devices
from pearl_core.composer.cachepath import cache_dir
from pearl_core.composer.analytic import cpu_row
from pearl_core.composer.budget import BUDGET_NOTE, DEVICE_WEIGHTS, OverBudget, probe_deadline_s
from pearl_core.composer.costs import Profiler, analytic_row, blame, exceeds_fanout, limit_fanout, profiled_row
from pearl_core.composer.matrix import DeviceRow
from pearl_core.composer.profilekey import (  # noqa: F401 - re-exported: the cache key's historical home
    CACHE_FORMAT, _backend_version, _cache_key, _source_digest, backend_settings)
from pearl_core.composer.spec import DeviceSpec, HardwareSpec
from pearl_core.composer.timing import (MIN_TIMED, ProfileBudget, active_budget, median_time, record_samples,
                                       run_config_for)
from pearl_core.composer.workload import Workload
from pearl_core.envs import env_spaces, make_env
from pearl_core.errors import SpecError
from pearl_core.fileio import atomic_write
from pearl_core.plugin_guard import call_deadline

if TYPE_CHECKING:
    from pearl_core.backend import Backend, DeviceInfo
    from pearl_core.plugins import PluginRegistry
    from pearl_core.replay.base import ReplayManager

__all__ = [
    "CACHE_FORMAT", "FILL_BYTES", "MIN_TIMED", "backend_settings", "cache_dir", "fill_rows", "measure_run",
    "measured_iteration_s", "measurement_session", "median_time", "metrics_every_for", "present_device",
    "profile_actor_step", "profile_learner", "profile_message_hop", "profile_replay_ops", "profile_runtime",
    "profile_worker_loop", "profiler_for", "run_config_for",
]

_default_cache_dir = cache_dir  # profiler_for's ``cache_dir`` argument shadows the function


def present_device(device: DeviceSpec, registry: "PluginRegistry | None" = None
                   ) -> "tuple[str, Backend, DeviceInfo] | None":
    """``(backend name, backend, detected device)`` if ``device`` is on this machine, else ``None``."""
    wanted = {device.name}
    alias = device.options.get("detected_as")
    if isinstance(alias, str):
        wanted.add(alias)
    for name, obj, info in detected_devices(registry):
        if getattr(obj, "device_kind", None) == device.kind and info.name in wanted:
            return name, obj, info
    return None


def profiler_for(spec: HardwareSpec, *, registry: "PluginRegistry | None" = None, iterations: int = 1000,
                 warmup: int = 50, cache_dir: str | os.PathLike[str] | None = None, use_cache: bool = True,
                 progress: Callable[[str], None] | None = None, budget: "ProfileBudget | float | None" = None
                 ) -> Profiler:
    """The profiling hook for ``spec``: measured rows for present devices, ``None`` for the others.

    Args:
        spec: the hardware being planned (only its devices' names and kinds matter here).
        registry: plugin registry; default the installed one.
        iterations: timed iterations per cell (the paper's ~1K by default).
        warmup: untimed iterations first.
        cache_dir: cache folder (default: see :func:`cache_dir`).
        use_cache: read cached rows (a fresh measurement is always written).
        progress: called with one line per device being measured (e.g. ``print``).
        budget: seconds all measurements may take (:mod:`pearl_core.composer.budget`); default the enclosing
            :func:`~pearl_core.composer.timing.profile_budget`'s, else 45 s. A row cut by its budget is
            cached with it and measured again for a larger budget.
    """
    if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < 1:
        raise SpecError(f"profiling iterations = {iterations!r} is invalid; expected an int >= 1.")
    folder = _default_cache_dir(cache_dir)
    overall = budget if isinstance(budget, ProfileBudget) else (
        active_budget() if budget is None else ProfileBudget(budget))
    waiting: dict[str, dict[str, float]] = {}  # per workload: the devices still to measure, by weight

    def lookup(device: DeviceSpec, workload: Workload) -> tuple[Any, ...] | None:
        found = present_device(device, registry)
        if found is None:
            return None
        bname, backend, info = found
        try:
            settings = backend_settings(bname, backend)
        except Exception as exc:  # re-raised, marked: fill_matrix empties this row only
            blame(exc, bname, "settings")
            raise
        measures = callable(getattr(backend, "measure_primitive", None))
        host = device.name == spec.host and measures
        # An accelerator is measured primitive by primitive too; a second device of the host's kind is modelled.
        accel = measures and not host and device.kind != spec.host_device.kind
        key, inputs = _cache_key(bname, backend, device, info, workload, iterations, settings, host)
        path = folder / f"{key[:40]}.json"
        row = None
        if use_cache and path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                cut = data.get("budget_cut")  # a row the budget cut serves budgets no larger than its own
                if data.get("key") == key and (cut is None or overall.total_s <= float(cut)):
                    row = DeviceRow.from_dict(data["row"])
            except (OSError, ValueError, KeyError, TypeError, SpecError):
                pass  # a damaged entry is measured again and overwritten
        return bname, backend, host, accel, key, inputs, path, row

    def allotment(device: DeviceSpec, workload: Workload, host: bool, accel: bool) -> ProfileBudget:
        """The device's part of what is left of the budget, by weight among the devices still to measure."""
        wkey = json.dumps(workload.to_dict(), sort_keys=True, default=str)
        if wkey not in waiting:
            waiting[wkey] = {}
            for d in spec.devices:
                try:
                    got = lookup(d, workload)
                except Exception:  # noqa: BLE001 - its own call raises again, marked
                    got = None
                if got is not None and got[-1] is None:
                    waiting[wkey][d.name] = DEVICE_WEIGHTS["host" if got[2] else "accelerator" if got[3] else
                                                           "other"]
        left = waiting[wkey]
        weight = left.pop(device.name, DEVICE_WEIGHTS["other"])
        return ProfileBudget(max(overall.share(weight, weight + sum(left.values())), 1e-9), overall.clock)

    def profile(device: DeviceSpec, workload: Workload) -> DeviceRow | None:
        found = lookup(device, workload)
        if found is None:
            return None
        bname, backend, host, accel, key, inputs, path, row = found
        if row is not None:
            return row
        part = allotment(device, workload, host, accel)
        row = _measure(bname, backend, device, workload, host, accel, part)
        if row is None:
            return None
        cut = overall.total_s if any(BUDGET_NOTE in n for n in row.notes) else None
        try:
            atomic_write(path, json.dumps({"key": key, "inputs": inputs, "row": row.to_dict(), "budget_cut": cut},
                                          sort_keys=True, indent=1, default=str), make_parents=True)
        except OSError:
            pass  # an unwritable cache costs a re-measurement next time, nothing else
        return row

    def _measure(bname: str, backend: "Backend", device: DeviceSpec, workload: Workload,
                 host: bool, accel: bool, part: ProfileBudget) -> DeviceRow | None:
        """The host or accelerator policy, or the deprecated ``profile_cells`` (at the backend's widest fanout
        when the workload's is wider), checked."""
        limit = exceeds_fanout(backend, workload)
        measured = workload if limit is None else dataclasses.replace(workload, fanout=limit)
        if progress is not None:
            progress(f"profiling {device.name} ({bname} backend, {iterations} iterations per cell, "
                     f"{part.total_s:.1f} s of the profiling budget) ...")
        method = "measure_primitive" if host or accel else "profile_cells"
        try:
            row: DeviceRow | None
            with measurement_session():  # one filled replay and one learner step per thread count for all cells
                if host:
                    from pearl_core.composer.hostprofile import profile_host

                    row = profile_host(bname, backend, device, measured, iterations=iterations, warmup=warmup,
                                       budget=part)
                elif accel:
                    from pearl_core.composer.deviceprofile import profile_device

                    row = profile_device(bname, backend, device, measured, iterations=iterations, warmup=warmup,
                                         budget=part)
                else:
                    with call_deadline(probe_deadline_s(part.total_s)):
                        row = profiled_row(backend, device, measured, iterations=iterations, warmup=warmup)
            if row is not None and (not isinstance(row, DeviceRow) or row.device != device.name):
                raise SpecError(f"backend {bname!r}.{method} returned {row!r:.200} for {device.name!r}; "
                                f"expected a DeviceRow with device={device.name!r}. Fix: return "
                                f"DeviceRow({device.name!r}, ...) or None from {method}.")
        except OverBudget as exc:  # the host's own probes did not fit: its analytic row, saying why
            row = analytic_row(backend, device, workload) or cpu_row(device, workload, is_host=host)
            return dataclasses.replace(row, notes=(*row.notes, f"all cells {BUDGET_NOTE}: {exc}"))
        except Exception as exc:  # re-raised, marked: fill_matrix empties this row only
            blame(exc, bname, method)
            raise
        if row is None or limit is None:
            return row
        row = limit_fanout(row, workload, bname, backend)
        return dataclasses.replace(row, notes=(*row.notes, f"measured with fanout {limit} (the widest backend "
                                                            f"{bname!r} supports) instead of {workload.fanout}"))

    return profile


# -- measurement helpers, shared by backends ---------------------------------------------------------


_SESSION: "dict[str, Any] | None" = None


@contextlib.contextmanager
def measurement_session() -> Iterator[None]:
    """Within the block, measurements of one workload share what does not change between them.

    The filled replay (:func:`filled_replay`) is built once per workload and
    replay settings and reused by the replay, learner and worker-loop cells, and
    a learner step measured once (:func:`profile_learner`, same threads and
    trainer settings) is not measured again (the envs-per-actor choice and the
    CPU row both need the one-thread step), nor an actor's step at the same
    envs per actor (:func:`profile_actor_step`). Envs per actor does not change
    the replay or the learner, so it is not part of their keys. Everything is dropped when the block
    ends (a filled Atari replay holds hundreds of MiB). Nested blocks share the
    outer one's.
    """
    global _SESSION
    if _SESSION is not None:
        yield
        return
    _SESSION = {}
    try:
        yield
    finally:
        _SESSION = None


def _session_key(wl: Workload, *extra: Any) -> str:
    data = {k: v for k, v in wl.to_dict().items() if k != "envs_per_actor"}
    return json.dumps([data, *extra], sort_keys=True, default=str)


def _synthetic_rows(obs_space: Any, act_space: Any, n: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """``n`` rows ``(obs, action, reward, next_obs, done)`` of random values in the spaces.

    Observations that are stacks of frames (the Atari preset's) come as an
    episode does: each row's stack is the previous one shifted by one new frame,
    and ``next_obs`` is the next row's ``obs``, so a frame store keeps about one
    frame per row, as in a run (independent random stacks would cost it every
    frame of both stacks per row: many times the memory and the time).
    """
    from pearl_core.replay.frames import frame_storage_fits
    from pearl_core.replay.storage import StorageSpec

    sspec = StorageSpec.from_spaces(obs_space, act_space)
    if frame_storage_fits(sspec):
        k = sspec.obs_shape[0]
        frames = np.stack([obs_space.sample()[0] for _ in range(min(n + k, 256))]).astype(sspec.obs_dtype)
        frames = np.resize(frames, (n + k, *sspec.obs_shape[1:]))
        stacks = np.lib.stride_tricks.sliding_window_view(frames, k, axis=0)  # (n + 1, H, W, k)
        stacks = np.ascontiguousarray(np.moveaxis(stacks, -1, 1))  # (n + 1, k, H, W)
        obs, nxt = stacks[:n], stacks[1:n + 1]
    else:
        obs = np.stack([obs_space.sample() for _ in range(min(n, 256))]).astype(sspec.obs_dtype)
        obs = np.resize(obs, (n, *sspec.obs_shape))
        nxt = np.roll(obs, -1, axis=0)
    acts = np.stack([np.asarray(act_space.sample()) for _ in range(min(n, 256))]).astype(sspec.action_dtype)
    acts = np.resize(acts, (n, *sspec.action_shape))
    rew = rng.standard_normal(n).astype(np.float32)
    done = rng.random(n) < 0.01
    return obs, acts, rew, nxt, done


def filled_replay(wl: Workload, plan_kwargs: dict[str, Any] | None = None, *, fill: int | None = None,
                  seed: int = 0) -> "tuple[ReplayManager, tuple[Any, Any]]":
    """The workload's replay manager, built as the runtime builds it, filled with synthetic rows.

    ``plan_kwargs`` go to the :class:`~pearl_core.runtime.config.RuntimePlan`
    (``rm_backend``, ``rm_threads``). ``fill`` rows (default: the whole capacity,
    at most 200k, and at most :data:`FILL_BYTES` of stored rows) get random priorities.
    Inside a :func:`measurement_session` the replay is built once per workload,
    ``plan_kwargs``, ``fill`` and seed; ``plan_kwargs=None`` (the learner's cells: any
    filled replay is a batch source) takes any replay of the workload already built.
    """
    if _SESSION is not None:
        from pearl_core.runtime.config import RuntimePlan

        anyone = _session_key(wl, "any", fill, seed)
        rp = RuntimePlan(**(plan_kwargs or {}))  # equal replays, equal keys (None is the default plan's)
        key = _session_key(wl, [rp.rm_backend, rp.rm_device, rp.rm_threads, rp.storage_device], fill, seed)
        found = _SESSION.get(anyone) if plan_kwargs is None else None
        found = found or _SESSION.get(key)
        if found is None:
            found = _SESSION[key] = _fill_replay(wl, plan_kwargs, fill, seed)
            _SESSION.setdefault(anyone, found)
        return found
    return _fill_replay(wl, plan_kwargs, fill, seed)


#: Stored bytes a default fill stops at (four times a 32 MiB last-level cache, so the gather of a batch
#: misses it as in a full replay): an Atari replay of 100k transitions holds ~700 MiB of frames, and
#: filling all of it costs many seconds without changing a cell.
FILL_BYTES = 128 * 2**20


def fill_rows(wl: Workload) -> int:
    """The rows a default fill writes: the capacity, at most 200k and at most :data:`FILL_BYTES` of stored rows."""
    row = wl.stored_bytes or wl.experience_bytes or 1
    return max(1, min(wl.capacity, 200_000, max(FILL_BYTES // row, 4 * wl.batch_size)))


def _fill_replay(wl: Workload, plan_kwargs: dict[str, Any] | None, fill: int | None, seed: int
                 ) -> "tuple[ReplayManager, tuple[Any, Any]]":
    from pearl_core.replay.storage import StorageSpec
    from pearl_core.runtime.config import RuntimePlan
    from pearl_core.runtime.wiring import build_replay

    obs_space, act_space = env_spaces(wl.env_id, **wl.env_options)
    config = run_config_for(wl, seed=seed)
    replay = build_replay(config, RuntimePlan(**(plan_kwargs or {})), StorageSpec.from_spaces(obs_space, act_space))
    rng = np.random.default_rng(seed)
    n = fill_rows(wl) if fill is None else min(fill, wl.capacity)
    chunk = 4096
    rows = _synthetic_rows(obs_space, act_space, min(n, chunk), rng)
    done = 0
    while done < n:
        k = min(chunk, n - done)
        idx = replay.add(*(a[:k] for a in rows))
        replay.update_priorities(idx, rng.exponential(1.0, k))
        done += k
    return replay, (obs_space, act_space)


def profile_replay_ops(wl: Workload, plan_kwargs: dict[str, Any] | None = None, *, iterations: int = 1000,
                       warmup: int = 50, seed: int = 0, budget_s: float | None = None) -> dict[str, float]:
    """Median seconds of the replay manager's three operations, as the runtime calls them.

    ``sample``: ``replay.sample(BS)`` (tree descent, IS weights and the gather of
    ``BS`` experiences from the Data Storage); ``update``:
    ``replay.update_priorities`` on ``BS`` sampled indices; ``insert``:
    ``replay.add`` of ``BS_i`` new experiences (at the running max priority).
    ``budget_s``: the three operations' time budget together (a third each, :func:`median_time`).
    """
    replay, (obs_space, act_space) = filled_replay(wl, plan_kwargs, seed=seed)
    rng = np.random.default_rng(seed + 1)
    bs, bsi = wl.batch_size, int(wl.insert_batch or wl.n_actors)
    sampled = replay.sample(bs)
    td = rng.standard_normal(bs)
    new_rows = _synthetic_rows(obs_space, act_space, bsi, rng)
    third = None if budget_s is None else budget_s / 3
    return {
        "sample": median_time(lambda: replay.sample(bs), iterations, warmup, budget_s=third),
        "update": median_time(lambda: replay.update_priorities(sampled.indices, td), iterations, warmup,
                              budget_s=third),
        "insert": median_time(lambda: replay.add(*new_rows), iterations, warmup, budget_s=third),
    }


@contextlib.contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` (unchanged for ``None``) for the block, then restored."""
    import torch

    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _trainer_and_replay(wl: Workload, seed: int, trainer_kwargs: dict[str, Any] | None = None,
                        plan_kwargs: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """The workload's real trainer and a filled replay, both built as the runtime builds them."""
    from pearl_core.runtime.wiring import build_trainer

    replay, (obs_space, act_space) = filled_replay(wl, plan_kwargs, seed=seed)
    config = run_config_for(wl, seed=seed)
    if trainer_kwargs:
        config = dataclasses.replace(config, trainer_kwargs={**config.trainer_kwargs, **trainer_kwargs})
    return build_trainer(config, obs_space, act_space, check=False), replay


def profile_learner(wl: Workload, *, threads: int | None = None, iterations: int = 300, warmup: int = 20,
                    seed: int = 0, trainer_kwargs: dict[str, Any] | None = None,
                    budget_s: float | None = None) -> float:
    """Median seconds of one ``update_policy`` of the workload's real trainer.

    Each timed step trains on a batch freshly sampled (untimed) from a filled
    replay, as in a run: a batch that is already in cache would flatter the
    learner. ``threads`` sets torch's intra-op threads for the measurement
    (restored afterwards); ``trainer_kwargs`` override hyper-parameters (e.g. ``device``);
    ``budget_s`` bounds the measurement's time (:func:`median_time`). Inside a
    :func:`measurement_session` a step measured once (same workload, threads,
    trainer settings, seed) is returned again instead of measured again.
    """
    memo = None if _SESSION is None else _session_key(wl, "learner", threads, trainer_kwargs, seed)
    if memo is not None and memo in _SESSION:  # type: ignore[operator]
        return _SESSION[memo]  # type: ignore[index]
    seconds = _profile_learner(wl, threads, iterations, warmup, seed, trainer_kwargs, budget_s)
    if memo is not None and _SESSION is not None:
        _SESSION[memo] = seconds
    return seconds


def _profile_learner(wl: Workload, threads: int | None, iterations: int, warmup: int, seed: int,
                     trainer_kwargs: dict[str, Any] | None, budget_s: float | None) -> float:
    trainer, replay = _trainer_and_replay(wl, seed, trainer_kwargs)
    state: dict[str, Any] = {}

    def setup() -> None:
        state["sb"] = replay.sample(wl.batch_size)

    with _torch_threads(threads):
        if threads is not None:
            trainer.use_threads(threads)  # as the runtime gives them (Trainer.use_threads)
        return median_time(lambda: trainer.update_policy(state["sb"].batch, state["sb"].weights), iterations,
                           warmup, setup=setup, budget_s=budget_s)

def profile_worker_loop(wl: Workload, plan_kwargs: dict[str, Any] | None = None, *, threads: int = 1,
                        iterations: int = 300, warmup: int = 20, seed: int = 0,
                        budget_s: float | None = None) -> dict[str, float]:
    """The RM and the learner *together*, as the setting-2 worker runs them, one step after the other.

    Each iteration: ``replay.sample(BS)``, ``trainer.update_policy``,
    ``replay.update_priorities``, ``replay.add`` of ``BS_i`` rows. Returns the
    median seconds of each part (``sample``, ``learner``, ``update``,
    ``insert``): the paper's co-located cells, measured with the contention of
    sharing one process's caches included (each part is slower here than
    alone). ``budget_s`` ends the loop early as :func:`median_time` does.
    """
    trainer, replay = _trainer_and_replay(wl, seed, plan_kwargs=plan_kwargs)
    rows = _synthetic_rows(*env_spaces(wl.env_id, **wl.env_options), int(wl.insert_batch or wl.n_actors),
                           np.random.default_rng(seed))
    parts: dict[str, list[float]] = {"sample": [], "learner": [], "update": [], "insert": []}
    clock = time.perf_counter
    start = clock()
    with _torch_threads(threads):
        for i in range(warmup + iterations):
            if budget_s is not None and len(parts["sample"]) >= MIN_TIMED and clock() - start > budget_s:
                break
            t0 = clock()
            sb = replay.sample(wl.batch_size)
            t1 = clock()
            res = trainer.update_policy(sb.batch, sb.weights)
            t2 = clock()
            replay.update_priorities(sb.indices, res.td_errors)
            t3 = clock()
            replay.add(*rows)
            t4 = clock()
            if i >= warmup:
                for k, v in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                    parts[k].append(v)
    record_samples(len(parts["sample"]))
    return {k: statistics.median(v) for k, v in parts.items()}


def profile_actor_step(wl: Workload, *, iterations: int = 500, seed: int = 0, budget_s: float | None = None) -> float:
    """Median seconds for an actor to produce one experience: its policy's action plus one env step.

    An actor steps ``wl.envs_per_actor`` environments together, as the runtime's
    actors do (:mod:`pearl_core.runtime.acting`): one batched policy forward for
    all of them, then each one's ``step``; the time of such a vector step is
    divided by the number of environments. The trainer acts as late in a run
    (``env_steps`` past any exploration schedule), so the policy network is
    evaluated at (nearly) every step. ``budget_s`` bounds the timing (:func:`median_time`); inside a
    :func:`measurement_session` an actor measured once (same workload and seed) is not measured again.
    """
    memo = None if _SESSION is None else json.dumps(["actor", wl.to_dict(), seed], sort_keys=True, default=str)
    if memo is not None and memo in _SESSION:  # type: ignore[operator]
        return _SESSION[memo]  # type: ignore[index]
    seconds = _profile_actor_step(wl, iterations, seed, budget_s)
    if memo is not None and _SESSION is not None:
        _SESSION[memo] = seconds
    return seconds


def _profile_actor_step(wl: Workload, iterations: int, seed: int, budget_s: float | None) -> float:
    from pearl_core.runtime.wiring import build_trainer

    k = int(wl.envs_per_actor)
    envs = [make_env(wl.env_id, seed=seed + i, **wl.env_options) for i in range(k)]
    config = run_config_for(wl, seed=seed)
    try:
        trainer = build_trainer(config, envs[0].observation_space, envs[0].action_space, check=False)
        # past any exploration schedule, as for most of a run: the policy network acts (a fresh
        # trainer's epsilon of 1 would skip it and flatter the actor)
        trainer.env_steps = 1 << 40
        obs = [e.reset(seed=seed + i)[0] for i, e in enumerate(envs)]

        def step() -> None:
            actions = trainer.get_action(np.stack([np.asarray(o) for o in obs]), explore=True)
            for i, env in enumerate(envs):
                nxt, _, term, trunc, _ = env.step(actions[i])
                obs[i] = env.reset()[0] if (term or trunc) else nxt

        with _torch_threads(1):
            return median_time(step, max(1, iterations // k), warmup=max(2, 20 // k), budget_s=budget_s) / k
    finally:
        for env in envs:
            env.close()


# The runtime's own runs (calibration, `pearl validate`) live in runs.py; imported here so that their
# historical home keeps working (backends, benchmarks and tests import them from this module).
from pearl_core.composer.runs import (  # noqa: E402 - after the helpers runs.py calls back into
    measure_run, measured_iteration_s, metrics_every_for, profile_message_hop, profile_runtime)
