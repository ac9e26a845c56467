"""The composer's calibration child never outlives its caller, and stops its run cleanly.

``calibrate_host_variants`` runs the real runtime in a child interpreter
(:mod:`pearl_core.composer.calibrate`). Whether the caller times out or is killed
(``kill`` to the caller's pid alone, as a scheduler or a user would send it), the child's
run ends the runtime's clean way and no process of it, nor any of its ``/dev/shm``
segments, is left behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from pearl_core.composer.calibrate import calibrate_host_variants
from pearl_core.composer.workload import workload_for_env
from pearl_core.errors import PearlError
from pearl_core.runtime.shm import list_segments

from conftest import proc_table

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="reads /proc; Linux's parent-death signal")]

WORKLOAD = dict(env_id="CartPole-v1", batch_size=32, hidden_sizes=[16, 16], replay="uniform", capacity=5_000)


def _procs() -> dict[int, int]:
    """pid -> ppid of every live (non-zombie) process."""
    return {pid: ppid for pid, (ppid, _) in proc_table().items()}


def _descendants(pid: int) -> set[int]:
    procs, found, todo = _procs(), set(), [pid]
    while todo:
        p = todo.pop()
        kids = {c for c, pp in procs.items() if pp == p} - found
        found |= kids
        todo.extend(kids)
    return found


def _wait_gone(pids: set[int], timeout: float) -> set[int]:
    deadline = time.monotonic() + timeout
    while True:
        left = pids & set(_procs())
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _cmdline(pid: int) -> str:
    return proc_table().get(pid, (0, ""))[1]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_killing_the_caller_stops_the_calibration_child_and_its_workers(sig):
    caller_src = textwrap.dedent(f"""
        from pearl_core.composer.calibrate import calibrate_host_variants
        from pearl_core.composer.workload import workload_for_env
        wl = workload_for_env(**{WORKLOAD!r})
        calibrate_host_variants(wl, [(2, 1)], window_s=120.0, rounds=1)
        print("finished: the caller was meant to be killed before this")
    """)
    caller = subprocess.Popen([sys.executable, "-c", caller_src], start_new_session=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        # Wait until the child runs: it, its fork server and the run's workers (an actor, the learner).
        deadline, child, tree = time.monotonic() + 120, None, set()
        while time.monotonic() < deadline and caller.poll() is None:
            tree = _descendants(caller.pid)
            table = proc_table()
            child = next((p for p in tree if "pearl_core.composer.calibrate" in table.get(p, (0, ""))[1]), None)
            if child is not None and len(_descendants(child)) >= 3 and list_segments(child):
                break
            time.sleep(0.2)
        assert caller.poll() is None and child is not None, "the calibration run never started"
        time.sleep(1.0)
        tree = _descendants(caller.pid)
        os.kill(caller.pid, sig)  # the caller alone, not its group
        caller.wait(timeout=30)
        left = _wait_gone(tree, timeout=90)
        assert not left, f"processes outlived the killed caller: {sorted((p, _cmdline(p)) for p in left)}"
        assert not list_segments(child), f"shared memory left: {list_segments(child)}"
    finally:
        for p in _descendants(caller.pid) | {caller.pid}:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        caller.wait(timeout=30)


def test_a_timed_out_calibration_stops_its_child_cleanly():
    wl = workload_for_env(**WORKLOAD)
    before = _descendants(os.getpid())
    seen, done = set(), threading.Event()

    def watch():  # every process of the calibration (the child, its fork server and workers)
        while not done.is_set():
            seen.update(_descendants(os.getpid()) - before)
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with pytest.raises(PearlError, match="did not finish within 15 s"):
            calibrate_host_variants(wl, [(2, 1)], window_s=120.0, rounds=1, timeout_s=15)
    finally:
        done.set()
        watcher.join()
    assert seen, "the calibration child was never seen"
    left = _wait_gone(_descendants(os.getpid()) - before, timeout=30)
    assert not left, f"processes outlived the timed-out calibration: {sorted((p, _cmdline(p)) for p in left)}"
    # Only the calibration's own: other runs on the machine (other tests, other users) make segments meanwhile.
    ours = [n for p in seen for n in list_segments(p)]
    assert not ours, f"the stopped run left shared memory behind: {ours}"
