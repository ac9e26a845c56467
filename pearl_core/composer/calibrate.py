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
(workers joined, shared memory unlinked) before the child exits; when the caller
itself dies (SIGTERM or SIGKILL to it alone), Linux sends the child that SIGTERM
(the parent-death signal). Either way the child starts no further run.
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys
from typing import Iterable

from pearl_core.composer.tuning import rounds_spread, spread_key, variant_key
from pearl_core.composer.workload import Workload
from pearl_core.errors import PearlError

__all__ = ["calibrate_host_variants", "learner_threads_yield", "variant_key"]

#: Seconds a stopped child gets to end its run the clean way before it is killed.
STOP_WAIT_S = 60.0


def calibrate_host_variants(wl: Workload, variants: Iterable[tuple[int, int]], *, window_s: float = 3.0,
                            rounds: int = 2, timeout_s: float | None = None) -> dict[str, float]:
    """``{variant_key(s, t): median seconds per update, spread_key(s, t): (max - min) / median}`` of each
    ``(setting, learner threads)`` variant.

    The variants run in turn, ``rounds`` times (1, 2, 1, 2, ...), each for
    ``window_s`` seconds of steady state (:func:`~pearl_core.composer.profiling.profile_runtime`).
    A variant whose runs made too few updates to measure is left out.

    Raises:
        PearlError: the child failed (the message ends with its error) or timed out.
    """
    todo = [(int(s), int(t)) for s, t in variants]
    if not todo:
        return {}
    request = json.dumps({"workload": wl.to_dict(), "variants": todo, "window_s": float(window_s),
                          "rounds": int(rounds), "parent": os.getpid()})
    if timeout_s is None:  # start-up, the fill before learning, the window, shutdown: generous
        timeout_s = 60 + rounds * len(todo) * (window_s + 30)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "pearl_core.composer.calibrate"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        stdout, stderr = proc.communicate(request, timeout=timeout_s)
    except BaseException as exc:  # a timeout, Ctrl-C, an error here: the child's run ends cleanly first
        _stop_child(proc)
        if isinstance(exc, subprocess.TimeoutExpired):
            raise PearlError(f"the host variants' calibration runs did not finish within {timeout_s:.0f} s") from exc
        raise
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        out = [ln for ln in (stderr or stdout).splitlines() if ln.strip()]
        why = out[-1][-1500:] if out else "no output"  # the child's exception, as its last line says it
        raise PearlError(f"the host variants' calibration runs failed (exit {proc.returncode}): {why}")
    got = json.loads(lines[-1])
    return {k: float(v) for k, v in got.items() if isinstance(v, (int, float)) and math.isfinite(v)
            and (v > 0 or (k.startswith("run_spread_") and v >= 0))}


def _stop_child(proc: subprocess.Popen) -> None:
    """SIGTERM (the runtime in the child ends its run cleanly, then the child exits); SIGKILL only if it
    is still there after :data:`STOP_WAIT_S`."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=STOP_WAIT_S)
            return
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.communicate()


def learner_threads_yield(wl: Workload) -> bool:
    """Whether the workload's learner runs threads that yield to other processes
    (:attr:`~pearl_core.trainer.Trainer.threads_yield`): then it may share the actors' cores."""
    from pearl_core.composer.profiling import run_config_for
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


def _main() -> int:
    from pearl_core.composer.profiling import profile_runtime

    request = json.loads(sys.stdin.read())
    parent = int(request.get("parent", os.getppid()))
    _follow_parent(parent)
    wl = Workload.from_dict(request["workload"])
    variants = [tuple(v) for v in request["variants"]]
    times: dict[str, list[float]] = {variant_key(s, t): [] for s, t in variants}
    for _ in range(int(request["rounds"])):
        for s, t in variants:
            # A run SIGTERM stopped (the caller's, or the parent-death signal) raises: no further run starts.
            seconds = profile_runtime(wl, setting=s, learner_threads=t, window_s=float(request["window_s"]))
            if math.isfinite(seconds):
                times[variant_key(s, t)].append(seconds)
    out: dict[str, float] = {}
    for (s, t) in variants:
        v = times[variant_key(s, t)]
        if v:
            out[variant_key(s, t)] = statistics.median(v)
            out[spread_key(s, t)] = rounds_spread(v)  # the rounds' noise (0 with one round)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
