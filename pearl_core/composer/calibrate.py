"""Calibration runs of the host variants, in a child interpreter of their own.

:func:`calibrate_host_variants` runs ``python -m pearl_core.composer.calibrate``
with the workload and the variants as JSON on stdin; the child runs each variant
(:func:`~pearl_core.composer.profiling.profile_runtime`) in alternating rounds
and prints the median seconds per update of each as one JSON line.

Why a child: the runtime's worker processes re-import the *main script* from
its file (:mod:`pearl_core.runtime.procs`). Profiling is called from
``Composer.run()``, which a user's script may well call at its top level (that
is fine for composing: only training has to sit under
``if __name__ == "__main__":``). Started from there, every worker would run the
user's script again. The child has no main script, so nothing of the caller's is
re-imported, and a run that crashes takes only the child with it.

No orphan: when the caller times out, is interrupted (Ctrl-C) or fails, it stops
the child with SIGTERM, which the runtime answers by ending its run cleanly
(workers joined, shared memory unlinked) before the child exits; a child that does not
end within :data:`STOP_WAIT_S` is killed and the caller removes the shared memory it left; when the caller
itself dies (SIGTERM or SIGKILL to it alone), Linux sends the child that SIGTERM
(the parent-death signal). Either way the child starts no further run.

**Only the variants that can win are run, and only as long as it can change the choice.**
A run of a variant cannot be faster than its learner's step alone: the isolated
learner cell at that thread count is a floor under it (its *lower bound*). Round 1
runs the variants in the order of their floors; a variant whose floor is above the
best run so far by more than :data:`PRUNE_MARGIN` is not run (it would lose beyond
any tie: its floor is recorded instead of a run, :attr:`RunMeasurement.floor
<pearl_core.composer.matrix.RunMeasurement.floor>`). Later rounds
run only the *contenders*: variants within :data:`CONTEND_MARGIN` of the best median
(a larger gap than any single round's noise measured here, 26-31%); with fewer than
two contenders no further round can change the choice, and none starts that would
end past ``budget_s`` at the runs' mean time so far. Each run ends after
``max_updates`` updates or its window, whichever is first. Each variant's record says the rounds it ran.

**The composer decides the calibration** (the backend only measures): its window, rounds, update and
time bounds (:func:`calibration_setup`, the constants below) are part of the profile cache key.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Callable, Iterable, Mapping

from pearl_core.composer.matrix import RunMeasurement
from pearl_core.composer.tuning import rounds_spread
from pearl_core.composer.workload import Workload
from pearl_core.errors import InvalidOptionError, PearlError
from pearl_core.runtime.shm import clean_orphans

__all__ = ["CALIBRATE_BUDGET_S", "CALIBRATE_MAX_UPDATES", "CALIBRATE_MIN_ITERATIONS", "CALIBRATE_ROUNDS",
           "CALIBRATE_WINDOW_S", "CELL_BUDGET_S", "CONTEND_MARGIN", "PRUNE_MARGIN", "calibrate_host_variants",
           "calibration_settings", "calibration_setup", "learner_threads_yield", "run_variants",
           "user_script_workload"]

#: Environment variable naming the composing script the child (and its runs' workers) load: the trainer is
#: defined in it or the env is registered by it, as the generated program loads it (composer.runtimegen).
SCRIPT_ENV = "PEARL_CALIBRATE_USER_SCRIPT"
#: Seconds a stopped child gets to end its run the clean way before it is killed.
STOP_WAIT_S = 60.0
#: A variant whose lower bound is above the best run by more than this is not run (tuning.NOISE_CAP: beyond a tie).
PRUNE_MARGIN = 0.10
#: Later rounds run the variants whose median is within this of the best one's (above one round's noise).
CONTEND_MARGIN = 0.35


#: A host profile with at least this many iterations per cell also runs the host variants for real.
CALIBRATE_MIN_ITERATIONS = 200
#: Seconds each host variant's calibration run lasts at most, and the rounds at most.
#: ``$PEARL_CALIBRATE_WINDOW_S`` and ``$PEARL_CALIBRATE_ROUNDS`` override them (:func:`calibration_setup`).
CALIBRATE_WINDOW_S = 3.0
CALIBRATE_ROUNDS = 3
#: A calibration run ends sooner once it made this many updates: a CartPole DQN run measured the same seconds
#: per update over 1,300 updates (1 s) as over 4,200 (3 s) on the 2-core VM
#: (benchmarks/results/compose_times_2026-12-04.md).
CALIBRATE_MAX_UPDATES = 1000
#: No further calibration round starts once the runs have taken this long (round 1 always completes).
CALIBRATE_BUDGET_S = 12.0
#: Seconds one measured cell (a replay operation, the learner at one thread count, the worker loop, an actor
#: step) times at most, past its first calls (:func:`pearl_core.composer.timing.median_time`): a 35 ms
#: Atari learner step is then ~30 calls, not 333, and a CartPole cell still makes its full count.
CELL_BUDGET_S = 1.0


def calibration_setup() -> tuple[float, int]:
    """``(window_s, rounds)`` of the host variants' calibration runs.

    :data:`CALIBRATE_WINDOW_S` and :data:`CALIBRATE_ROUNDS` unless ``$PEARL_CALIBRATE_WINDOW_S`` (seconds, > 0)
    or ``$PEARL_CALIBRATE_ROUNDS`` (a whole number >= 1) is set: longer or more runs predict a noisy machine
    better, shorter ones compose sooner (the test suite sets short ones: it checks the mechanism, not the
    figures). Both are part of :func:`calibration_settings`, so a profile cached with other values is
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


def calibration_settings() -> dict[str, float]:
    """The calibration's window and rounds (:func:`calibration_setup`), its update and time bounds and the
    cells' time budget: part of the profile cache key (a changed one is measured again)."""
    window_s, rounds = calibration_setup()
    return {"calibrate_window_s": window_s, "calibrate_rounds": rounds, "calibrate_max_updates": CALIBRATE_MAX_UPDATES,
            "calibrate_budget_s": CALIBRATE_BUDGET_S, "cell_budget_s": CELL_BUDGET_S}


def calibrate_host_variants(wl: Workload, variants: Iterable[tuple[int, int]], *, window_s: float = 3.0,
                            rounds: int = 2, timeout_s: float | None = None,
                            lower_bounds: "Mapping[tuple[int, int], float] | None" = None,
                            max_updates: int | None = None, budget_s: float | None = None
                            ) -> tuple[RunMeasurement, ...]:
    """A :class:`~pearl_core.composer.matrix.RunMeasurement` per ``(setting, learner threads)`` variant run
    (median seconds per update, the rounds' spread and count), or left out because it cannot win (its floor).

    The variants run in turn, up to ``rounds`` times (1, 2, 1, 2, ...), each for
    ``window_s`` seconds or ``max_updates`` updates (:func:`~pearl_core.composer.profiling.profile_runtime`),
    pruned as the module docstring says with ``lower_bounds`` (seconds per variant; none: every
    variant runs round 1) and ``budget_s`` (none: every round for the contenders).
    A variant whose runs made too few updates to measure is left out.

    Raises:
        PearlError: the child failed (the message ends with its error) or timed out.
    """
    todo = [(int(s), int(t)) for s, t in variants]
    if not todo:
        return ()
    wl, script = user_script_workload(wl)
    bounds = [[int(s), int(t), float(v)] for (s, t), v in (lower_bounds or {}).items()]
    request = json.dumps({"workload": wl.to_dict(), "variants": todo, "window_s": float(window_s),
                          "rounds": int(rounds), "parent": os.getpid(), "lower_bounds": bounds,
                          "max_updates": max_updates, "budget_s": budget_s})
    if timeout_s is None:  # start-up, the fill before learning, the window, shutdown: generous
        timeout_s = 60 + rounds * len(todo) * (window_s + 30)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop(SCRIPT_ENV, None)
    if script is not None:  # the child, and every worker of its runs, load it as the generated program does
        env[SCRIPT_ENV] = script
    proc = subprocess.Popen([sys.executable, "-m", "pearl_core.composer.calibrate"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        stdout, stderr = proc.communicate(request, timeout=timeout_s)
    except BaseException as exc:  # a timeout, Ctrl-C, an error here: the child's run ends cleanly first
        _stop_child(proc)
        if isinstance(exc, subprocess.TimeoutExpired):
            raise PearlError(f"the host variants' calibration runs did not finish within {timeout_s:.0f} s") from exc
        raise
    _clean_after(proc)  # a child that crashed or was killed (out of memory) left its run's shared memory
    lines = [ln for ln in stdout.splitlines() if ln.startswith("[")]
    if proc.returncode != 0 or not lines:
        out = [ln for ln in (stderr or stdout).splitlines() if ln.strip()]
        why = out[-1][-1500:] if out else "no output"  # the child's exception, as its last line says it
        raise PearlError(f"the host variants' calibration runs failed (exit {proc.returncode}): {why}")
    try:
        return tuple(RunMeasurement.from_dict(r) for r in json.loads(lines[-1]))
    except (ValueError, TypeError, PearlError) as exc:
        raise PearlError(f"the host variants' calibration runs answered {lines[-1][:300]!r}, which is not a list "
                         f"of run records ({exc})") from None


def user_script_workload(wl: Workload) -> tuple[Workload, str | None]:
    """``(workload, script)``: the composing script the child must load, when the trainer is defined in it
    (``__main__:Name``, renamed to the module name the script is loaded as) or the env is registered by it
    (:func:`~pearl_core.composer.runtimegen.env_script`); ``(wl, None)`` when nothing of the caller's is needed.
    """
    from pearl_core.composer.runtimegen import USER_SCRIPT_MODULE, env_script

    module, _, name = wl.trainer.partition(":")
    script = None
    if module in ("__main__", USER_SCRIPT_MODULE):
        main = sys.modules.get(USER_SCRIPT_MODULE) or sys.modules.get("__main__")
        path = getattr(main, "__file__", None)
        if path and os.path.isfile(path):
            script = os.path.abspath(path)
            wl = dataclasses.replace(wl, trainer=f"{USER_SCRIPT_MODULE}:{name}")
    if script is None:
        try:
            script = env_script(wl.env_id)
        except PearlError:
            script = None  # no script to load: the runs fail and say why, the variants are then predicted
    return wl, script


def _load_user_script() -> None:
    """In the child and its runs' workers (they re-import this module): the caller's script, if it was given."""
    path = os.environ.get(SCRIPT_ENV)
    if path:
        from pearl_core.composer.runtimegen import USER_SCRIPT_MODULE, load_script_module

        load_script_module(path, USER_SCRIPT_MODULE)


def _stop_child(proc: subprocess.Popen) -> None:
    """SIGTERM (the runtime in the child ends its run cleanly, then the child exits); SIGKILL only if it
    is still there after :data:`STOP_WAIT_S`. Then the shared memory of a child that could not end its run
    (named after its pid: segments, semaphores) is removed here, not left to the next run's start."""
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=STOP_WAIT_S)
                return
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.communicate()
    finally:
        _clean_after(proc)


def _clean_after(proc: subprocess.Popen) -> None:
    """Remove what a reaped child that did not end cleanly left in ``/dev/shm`` (named after its pid)."""
    if proc.returncode is not None and proc.returncode != 0:  # reaped: its pid names only what it left
        clean_orphans(owners=(proc.pid,))


def learner_threads_yield(wl: Workload) -> bool:
    """Whether the workload's learner runs threads that yield to other processes
    (:attr:`~pearl_core.trainer.Trainer.threads_yield`): then it may share the actors' cores."""
    from pearl_core.composer.timing import run_config_for
    from pearl_core.envs import env_spaces
    from pearl_core.runtime.wiring import build_trainer

    config = run_config_for(wl)
    return bool(build_trainer(config, *env_spaces(config.env_id, **config.env_options), check=False).threads_yield)


def _follow_parent(parent: int) -> None:
    """Get SIGTERM when ``parent`` dies (Linux's ``prctl(PR_SET_PDEATHSIG)``) and make SIGTERM between
    runs an exit through the ``finally`` clauses (during a run the runtime's own handler ends it)."""
    def on_term(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # it died before the line above
        raise SystemExit(1)


def run_variants(variants: "list[tuple[int, int]]", run: "Callable[[int, int], float]", *, rounds: int,
                 lower_bounds: "Mapping[tuple[int, int], float] | None" = None, budget_s: float | None = None,
                 clock: "Callable[[], float]" = time.monotonic) -> tuple[RunMeasurement, ...]:
    """The calibration's rounds (see the module docstring) with ``run(setting, threads)`` -> seconds per update
    (``nan``: too few updates); returns what :func:`calibrate_host_variants` returns."""
    floors = dict(lower_bounds or {})
    variants = sorted(variants, key=lambda v: floors.get(v, 0.0))  # stable: the likely-fast ones first
    times: dict[tuple[int, int], list[float]] = {v: [] for v in variants}
    out: list[RunMeasurement] = []

    def measure(v: tuple[int, int]) -> None:
        seconds = run(*v)
        if math.isfinite(seconds):
            times[v].append(seconds)

    def best() -> float:
        return min((statistics.median(v) for v in times.values() if v), default=math.inf)

    start, runs = clock(), 0
    for v in variants:  # round 1: every variant that can still beat the best run so far
        floor = floors.get(v)
        if floor is not None and floor > best() * (1 + PRUNE_MARGIN):
            out.append(RunMeasurement(*v, floor=floor))
            continue
        measure(v)
        runs += 1
    for _ in range(rounds - 1):
        top = best()
        contenders = [v for v in variants if times[v] and statistics.median(times[v]) <= top * (1 + CONTEND_MARGIN)]
        spent = clock() - start  # a round starts only if it can end within the budget, at the runs' mean time
        if len(contenders) < 2 or (budget_s is not None and spent + len(contenders) * spent / max(runs, 1)
                                   > float(budget_s)):
            break  # one contender: no round can change the choice; or the round would overrun the budget
        for v in contenders:
            measure(v)
            runs += 1
    for v in variants:
        if times[v]:  # the rounds' noise: 0 with one round
            spread = rounds_spread(times[v])
            out.append(RunMeasurement(*v, seconds=statistics.median(times[v]), rounds=len(times[v]),
                                      spread=spread if math.isfinite(spread) else 0.0))
    return tuple(out)


def _preload_env_module(wl: Workload) -> None:
    """Have the runs' fork server import the module of the workload's environment class, once.

    Every run starts fresh workers from the runtime's fork server, which preloads
    torch and PEARL (:mod:`pearl_core.runtime.procs`) but not the environment's
    package; each run's actor then imports it (MinAtar's imports seaborn, scipy and
    matplotlib: ~2.5 s on the 2-core VM). That import is start-up, not the steady
    state a calibration run measures, yet with runs of 1,000 updates it overlapped the
    measured updates on two cores: MinAtar read 1.37-1.54 ms per update without the
    preload and 1.04-1.26 ms with it, each run taking ~4 s against ~1.3 s
    (benchmarks/results/compose_times_2026-12-04.md). Only this child's fork server is
    affected (it is started by the child's first run). The runtime has no public hook
    for extra preloads, so the child extends its list; a module that cannot be found
    by name (an env defined in a script) is left to the workers, as before.
    """
    import importlib.util

    from pearl_core.envs import make_env
    from pearl_core.runtime import procs

    try:
        env = make_env(wl.env_id, **wl.env_options)
        try:
            module = type(env.unwrapped).__module__
        finally:
            env.close()
        preload = getattr(procs, "_PRELOAD", None)
        if (isinstance(preload, list) and module and not module.startswith("__") and module not in preload
                and importlib.util.find_spec(module) is not None):
            preload.append(module)
    except Exception:  # noqa: BLE001 - only a quicker start is lost; the runs say what is wrong, if anything
        pass


def _main() -> int:
    from pearl_core.composer.runs import profile_runtime

    request = json.loads(sys.stdin.read())
    parent = int(request.get("parent", os.getppid()))
    _follow_parent(parent)
    wl = Workload.from_dict(request["workload"])
    floors = {(int(s), int(t)): float(v) for s, t, v in request.get("lower_bounds") or ()}
    _preload_env_module(wl)

    def run(s: int, t: int) -> float:
        # A run SIGTERM stopped (the caller's, or the parent-death signal) raises: no further run starts.
        return profile_runtime(wl, setting=s, learner_threads=t, window_s=float(request["window_s"]),
                               max_updates=request.get("max_updates"))

    out = run_variants([tuple(v) for v in request["variants"]], run, rounds=int(request["rounds"]),
                       lower_bounds=floors, budget_s=request.get("budget_s"))
    print(json.dumps([r.to_dict() for r in out]), flush=True)
    return 0


if __name__ in ("__main__", "__mp_main__"):  # the child, and the workers its runs spawn
    _load_user_script()
if __name__ == "__main__":
    raise SystemExit(_main())
