"""The CPU backend: a native n-ary sum tree (C++, pybind11, threads) and a native DQN learner step."""

from __future__ import annotations

import math
import os
import platform
from typing import TYPE_CHECKING, Any, Callable

from pearl_core.errors import InvalidOptionError
from pearl_core.sdk import Availability, Backend, DeviceInfo, SumTree

if TYPE_CHECKING:
    from pearl_core.sdk import DeviceRow, DeviceSpec, Workload


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


#: ``profile_cells`` with at least this many iterations per cell also runs the host variants for real.
CALIBRATE_MIN_ITERATIONS = 200
#: Seconds each host variant's calibration run lasts at most, and the rounds at most.
#: ``$PEARL_CALIBRATE_WINDOW_S`` and ``$PEARL_CALIBRATE_ROUNDS`` override them (:func:`calibration_setup`).
CALIBRATE_WINDOW_S = 3.0
CALIBRATE_ROUNDS = 3
#: A calibration run ends sooner once it made this many updates: a CartPole DQN run measured the same seconds
#: per update over 1,300 updates (1 s) as over 4,200 (3 s) on the 2-core VM (benchmarks/results/compose_times_2026-12-04.md).
CALIBRATE_MAX_UPDATES = 1000
#: No further calibration round starts once the runs have taken this long (round 1 always completes).
CALIBRATE_BUDGET_S = 12.0
#: Seconds one profiled cell (a replay operation, the learner at one thread count, the worker loop, an actor
#: step) times at most, past its first calls (:func:`pearl_core.composer.profiling.median_time`): a 35 ms
#: Atari learner step is then ~30 calls, not 333, and a CartPole cell still makes its full count.
CELL_BUDGET_S = 1.0


def calibration_setup() -> tuple[float, int]:
    """``(window_s, rounds)`` of the host variants' calibration runs.

    :data:`CALIBRATE_WINDOW_S` and :data:`CALIBRATE_ROUNDS` unless ``$PEARL_CALIBRATE_WINDOW_S`` (seconds, > 0)
    or ``$PEARL_CALIBRATE_ROUNDS`` (a whole number >= 1) is set: longer or more runs predict a noisy machine
    better, shorter ones compose sooner (the test suite sets short ones: it checks the mechanism, not the
    figures). Both are part of :meth:`CpuBackend.settings`, so a profile cached with other values is
    measured again.

    Raises:
        InvalidOptionError: a value that is not a positive number (window) or a whole number >= 1 (rounds).
    """
    window_text = os.environ.get("PEARL_CALIBRATE_WINDOW_S", "").strip()
    rounds_text = os.environ.get("PEARL_CALIBRATE_ROUNDS", "").strip()
    window, rounds = CALIBRATE_WINDOW_S, CALIBRATE_ROUNDS
    if window_text:
        try:
            window = float(window_text)
        except ValueError:
            window = math.nan
        if not (math.isfinite(window) and window > 0):
            raise InvalidOptionError(f"PEARL_CALIBRATE_WINDOW_S={window_text!r}: expected seconds > 0 (e.g. 3). "
                                     "Fix: set a positive number or unset it for the default "
                                     f"{CALIBRATE_WINDOW_S:g} s.")
    if rounds_text:
        if not rounds_text.isdigit() or int(rounds_text) < 1:
            raise InvalidOptionError(f"PEARL_CALIBRATE_ROUNDS={rounds_text!r}: expected a whole number >= 1 "
                                     f"(e.g. 3). Fix: set one or unset it for the default {CALIBRATE_ROUNDS}.")
        rounds = int(rounds_text)
    return window, rounds


class CpuBackend(Backend):
    """Host CPU backend. Sum-tree options: ``threads`` (default: all cores), ``device`` (``"cpu"``).

    The learner runs torch on the CPU (``torch_device_type``), with the native
    ``"dqn_mlp"``, ``"td3_mlp"`` and ``"sac_mlp"`` steps where they apply; the Data Storage is the core's
    host-memory one and the transports are the core's shared-memory queues
    (this backend overrides neither ``make_storage`` nor ``make_transport``).
    """

    name = "cpu"
    device_kind = "cpu"
    torch_device_type = "cpu"

    def availability(self) -> Availability:
        try:
            from pearl_cpu import _sumtree  # noqa: F401 - the compiled extension
        except ImportError as exc:
            return Availability.no(
                f"the native extension pearl_cpu._sumtree failed to import ({exc}); "
                "reinstall pearl-cpu so it is compiled for this Python"
            )
        return Availability.yes()

    def devices(self) -> list[DeviceInfo]:
        if not self.availability().available:
            return []
        cores = os.cpu_count() or 1
        details = {"cores": cores, "memory_bytes": _memory_bytes(), "machine": platform.machine()}
        return [DeviceInfo("cpu0", "cpu", self.name, _cpu_model(), details)]

    def make_sum_tree(self, capacity: int, fanout: int = 16, **options: Any) -> SumTree:
        from pearl_cpu.sumtree import CpuSumTree

        threads = options.pop("threads", None)
        device = options.pop("device", "cpu")
        if options:
            raise InvalidOptionError(f"cpu backend: unknown sum-tree options {sorted(options)}; "
                                     "known: ['device', 'threads']")
        if str(device).split(":", 1)[0] != "cpu":
            raise InvalidOptionError(f"cpu backend: device = {device!r}; expected 'cpu' (this backend drives the "
                                     "host CPU). Fix: ask the backend of that device's kind.")
        return CpuSumTree(capacity, fanout, threads=threads)

    def settings(self) -> dict[str, Any]:
        """The calibration runs' window and rounds (:func:`calibration_setup`), their update and time bounds and
        the cells' time budget: part of the profile cache key."""
        window_s, rounds = calibration_setup()
        return {"calibrate_window_s": window_s, "calibrate_rounds": rounds,
                "calibrate_max_updates": CALIBRATE_MAX_UPDATES, "calibrate_budget_s": CALIBRATE_BUDGET_S,
                "cell_budget_s": CELL_BUDGET_S}

    def learner_kernel(self, name: str) -> Callable[..., Any] | None:
        """``"dqn_mlp"``: the native DQN step (:func:`pearl_cpu.learner.dqn_mlp_kernel`); ``"dqn_cnn"``: the
        same after one convolution (:func:`pearl_cpu.learner.dqn_cnn_kernel`, the small image encoder);
        ``"td3_mlp"``: the native TD3/DDPG step (:func:`pearl_cpu.learner.td3_mlp_kernel`);
        ``"sac_mlp"``: the native SAC step (:func:`pearl_cpu.learner.sac_mlp_kernel`); each when
        its extension imports and numpy's BLAS exposes ``cblas_sgemm``; else ``None``."""
        modules = {"dqn_mlp": "_learner", "dqn_cnn": "_learner", "td3_mlp": "_learner_ac", "sac_mlp": "_learner_ac"}
        if name not in modules:
            return None
        try:
            import importlib

            importlib.import_module(f"pearl_cpu.{modules[name]}")  # the compiled extension
            from pearl_cpu import learner
        except ImportError:
            return None
        return getattr(learner, f"{name}_kernel") if learner.find_sgemm() is not None else None

    def profile_cells(self, device: "DeviceSpec", workload: "Workload", *, iterations: int = 1000,
                      warmup: int = 50) -> "DeviceRow":
        """Measure this CPU: the replay manager's operations and the learner, with the paper's thread rules.

        Actors run on the host, one core each. Learner threads ``t_l``: the
        fewest (of the cores the actors leave) whose update of ``BS`` experiences
        takes no longer than the actors take to produce ``BS`` experiences, else
        the fastest; RM threads: the cores left after actors and learner,
        clipped to ``[1, BS]``. Every cell is a median of ``iterations`` runs of
        the real replay classes and the real trainer on synthetic data
        (:mod:`pearl_core.composer.profiling`).

        Co-located cells describe this runtime's setting 2 on a CPU: one worker
        process inserts, samples, trains and updates in turn. They are measured
        that way (:func:`~pearl_core.composer.profiling.profile_worker_loop`:
        each part is slower there than alone, as they share one core's caches),
        and the learner cell carries the RM update and insert
        (``co_time_sliced``), so Algorithm 1's ``sample + max(update + insert,
        learner)`` is the worker's whole iteration.

        With ``iterations >= CALIBRATE_MIN_ITERATIONS`` (the composer's default
        1000) each host variant (setting 1 and 2, each learner thread count
        the actors leave, or every count where the learner's threads yield:
        ``config["learner_threads_yield"]``) also runs :data:`CALIBRATE_ROUNDS` times (alternating, median)
        for :data:`CALIBRATE_WINDOW_S` seconds as the runtime runs it (:func:`~pearl_core.composer.profiling.profile_runtime`),
        recorded as ``config["run_s_setting_<s>_threads_<t>"]``: the isolated
        cells miss the runtime's messages, wake-ups and shared cores, which at
        small models are most of an update (see docs/composer.md). A quick
        profile (fewer iterations) skips these runs.
        """
        from pearl_core.errors import PearlError
        from pearl_core.sdk import (
            CostCell,
            DeviceRow,
            calibrate_host_variants,
            learner_threads_yield,
            profile_actor_step,
            profile_learner,
            profile_message_hop,
            profile_replay_ops,
            profile_worker_loop,
        )

        # A profile measures this machine: never more threads than it has, whatever the spec says.
        threads = min(int(device.threads or device.cores or os.cpu_count() or 1), os.cpu_count() or 1)
        bs = workload.batch_size
        avail = max(1, threads - workload.n_actors)
        # A learner whose threads yield (the native DQN step's help-first helper) may also share the
        # actors' cores: those variants are calibrated too, and the measurement decides.
        yields = learner_threads_yield(workload)
        most = threads if yields else avail
        budget = CELL_BUDGET_S
        actor_s = profile_actor_step(workload, iterations=min(iterations, 500), budget_s=budget)
        produce_s = bs * actor_s / workload.n_actors
        learn_iters = max(10, iterations // 3)
        # The thread counts a variant can use (1 .. most): a count no variant runs cannot change the choice.
        learner_s = {t: profile_learner(workload, threads=t, iterations=learn_iters, warmup=min(warmup, 20),
                                        budget_s=budget) for t in range(1, most + 1)}
        fast_enough = [t for t in range(1, avail + 1) if learner_s[t] <= produce_s]
        t_l = min(fast_enough) if fast_enough else min(range(1, avail + 1), key=learner_s.__getitem__)
        t_r = max(1, min(threads - workload.n_actors - t_l, bs))
        rm = profile_replay_ops(workload, {"rm_backend": self.name, "rm_threads": t_r}, iterations=iterations,
                                warmup=warmup, budget_s=budget)

        def power(busy: int) -> float:
            return device.idle_power_w + (device.active_power_w - device.idle_power_w) * min(1.0, busy / threads)

        co = profile_worker_loop(workload, {"rm_backend": self.name, "rm_threads": t_l}, threads=t_l,
                                 iterations=learn_iters, warmup=min(warmup, 20), budget_s=budget)
        p_all = power(workload.n_actors + t_l + t_r)
        p_co = power(workload.n_actors + t_l)
        s, u, n = (CostCell(rm[k], p_all, "profiled") for k in ("sample", "update", "insert"))
        learner = CostCell(learner_s[t_l], p_all, "profiled")
        co_s, co_u, co_n = (CostCell(co[k], p_co, "profiled") for k in ("sample", "update", "insert"))
        co_learner = CostCell(co["learner"] + co["update"] + co["insert"], p_co, "profiled")
        runs: dict[str, float] = {}
        calibration_note = ()
        if iterations >= CALIBRATE_MIN_ITERATIONS:
            # The host variants as the runtime runs them (see profile_runtime), in alternating rounds,
            # medians: what the isolated cells leave out (messages, wake-ups, relaying, cores shared
            # with the actors) is in these. A failure leaves the variants to the isolated cells' model.
            # A variant's run is never faster than its learner step alone: that floor lets the calibration
            # skip the variants that cannot win (pearl_core.composer.calibrate).
            window_s, rounds = calibration_setup()
            variants = [(setting, t) for t in range(1, most + 1) for setting in (1, 2)]
            try:
                runs = calibrate_host_variants(workload, variants, window_s=window_s, rounds=rounds,
                                               lower_bounds={v: learner_s[v[1]] for v in variants},
                                               max_updates=CALIBRATE_MAX_UPDATES, budget_s=CALIBRATE_BUDGET_S)
            except PearlError as exc:
                calibration_note = (f"no calibration runs ({exc}); the host variants are predicted from the "
                                    "isolated cells",)
            else:
                calibration_note = (_calibration_note(runs, variants, window_s, rounds),)
        config = {"rm_threads": t_r, "learner_threads": t_l, "co_rm_threads": t_r, "co_learner_threads": t_l,
                  "co_time_sliced": True, "learner_threads_yield": yields, "actor_step_s": actor_s, "msg_hop_s": profile_message_hop(), "actors_produce_batch_s": produce_s,
                  **{f"learner_s_threads_{t}": v for t, v in learner_s.items()}, **runs}
        notes = (f"profiled on {_cpu_model()}: up to {iterations} iterations per RM cell, {learn_iters} per learner "
                 f"thread count, each cell timed for at most ~{budget:g} s (medians)",
                 f"learner threads {t_l}: actors produce {bs} experiences in {produce_s * 1e3:.2f} ms; "
                 + ", ".join(f"{t} thread(s) train them in {v * 1e3:.2f} ms" for t, v in learner_s.items()),
                 *calibration_note)
        return DeviceRow(device.name, device.kind, s, u, n, learner, co_s, co_u, co_n, co_learner, config=config,
                         notes=notes)


def _calibration_note(runs: dict[str, float], variants: list[tuple[int, int]], window_s: float, rounds: int) -> str:
    """One line: how each host variant was calibrated (rounds run, or left out at its floor)."""
    parts = []
    for s, t in variants:
        n, floor = runs.get(f"run_rounds_setting_{s}_threads_{t}"), runs.get(f"run_floor_setting_{s}_threads_{t}")
        if n:
            parts.append(f"setting {s} x {t} thread(s): {int(n)} round(s)")
        elif floor:
            parts.append(f"setting {s} x {t} thread(s): not run, its learner step alone ({floor * 1e3:.2f} ms) is "
                         "slower than the best run (predicted at that floor, bound 'floor')")
        else:
            parts.append(f"setting {s} x {t} thread(s): no measurement (too few updates)")
    return (f"host variants calibrated: runs of at most {window_s:g} s or {CALIBRATE_MAX_UPDATES} updates, up to "
            f"{rounds} alternating round(s) for the variants within reach of the best, medians; " + "; ".join(parts))
