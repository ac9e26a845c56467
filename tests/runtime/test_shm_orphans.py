"""Shared memory and semaphores of a job killed outright are removed at the next start (issue 43).

SIGKILL of the whole job (host, fork server, resource tracker) leaves ``/dev/shm/pearl_<pid>_*`` segments and
multiprocessing semaphores behind. Segments carry their owner's pid; the queues' semaphores get a marker
``pearl_<pid>_sem_<name>``; pearl_core.runtime.shm.clean_orphans (called when a parallel run starts) removes
those of dead owners and never a live one's.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from pearl_core.composer import calibrate
from pearl_core.runtime.queues import PipeQueue
from pearl_core.runtime.shm import SHM_DIR, clean_orphans, list_segments

pytestmark = pytest.mark.skipif(not os.path.isdir(SHM_DIR), reason="needs /dev/shm (Linux)")

KILLED_JOB = textwrap.dedent("""
    import os, signal, sys
    from multiprocessing import resource_tracker
    from pearl_core.runtime.queues import PipeQueue
    from pearl_core.runtime.shm import Layout, ShmArena
    import multiprocessing as mp
    arena = ShmArena("run")
    block = arena.block(Layout.of({"x": ((16,), "<f8")}), "ring")
    q = PipeQueue(4, mp.get_context("forkserver"))
    # The whole job dies: its resource tracker too, so nobody unlinks anything.
    resource_tracker.unregister("/" + block.name, "shared_memory")
    resource_tracker.unregister(q._free._semlock.name, "semaphore")
    resource_tracker.unregister(f"/pearl_{os.getpid()}_sem_" + q._free._semlock.name.lstrip("/"), "shared_memory")
    print(os.getpid(), block.name, q._free._semlock.name, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_segments_and_semaphores_of_a_killed_job_are_removed_and_a_live_ones_kept():
    proc = subprocess.run([sys.executable, "-c", KILLED_JOB], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pid, seg, sem = proc.stdout.split()
    sem_file = os.path.join(SHM_DIR, "sem." + sem.lstrip("/"))
    dead = [n for n in os.listdir(SHM_DIR) if n.startswith(f"pearl_{pid}_")]
    assert seg in dead and any("_sem_" in n for n in dead) and os.path.exists(sem_file)  # left behind
    mine = PipeQueue(2, mp.get_context("spawn"))  # a live owner's: never touched
    try:
        marker = [n for n in list_segments(os.getpid()) if "_sem_" in n]
        assert marker
        removed = clean_orphans()
        assert seg in removed and "sem." + sem.lstrip("/") in removed
        assert not [n for n in os.listdir(SHM_DIR) if n.startswith(f"pearl_{pid}_")]
        assert not os.path.exists(sem_file)
        assert set(marker) <= set(list_segments(os.getpid()))
        mine.put("still works")
        assert mine.get(timeout=5) == "still works"
    finally:
        mine.close()
    assert not [n for n in list_segments(os.getpid()) if "_sem_" in n]  # closing removes the marker


def _entries(pid: int) -> list[str]:
    """Everything in /dev/shm named after ``pid``: segments and semaphore markers."""
    return [n for n in os.listdir(SHM_DIR) if n.startswith(f"pearl_{pid}_")]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: its pid names nobody (until reused, long after this test)
    return proc.pid


def test_a_host_killed_alone_leaves_no_marker_its_resource_tracker_removes_everything():
    # The host alone dies (SIGKILL); its resource tracker lives on and unlinks segments and semaphores, and
    # now the semaphores' markers too (before, every marker stayed until the next parallel run started).
    src = textwrap.dedent("""
        import os, signal
        import multiprocessing as mp
        from pearl_core.runtime.queues import PipeQueue
        from pearl_core.runtime.shm import Layout, ShmArena
        arena = ShmArena("run")
        arena.block(Layout.of({"x": ((16,), "<f8")}), "ring")
        qs = [PipeQueue(4, mp.get_context("spawn")) for _ in range(2)]
        print(os.getpid(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pid = int(proc.stdout.split()[0])
    deadline = time.monotonic() + 10
    while _entries(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _entries(pid), f"left by the killed host: {_entries(pid)}"


def test_closing_a_queue_removes_its_semaphore_and_its_marker_together():
    q = PipeQueue(2, mp.get_context("spawn"))
    sem = "sem." + q._free._semlock.name.lstrip("/")
    marker = [n for n in list_segments(os.getpid()) if n.endswith("_sem_" + sem[4:])]
    assert marker and os.path.exists(os.path.join(SHM_DIR, sem))
    q.close()
    # Not at some later garbage collection: a job killed in between would leave an unmarked semaphore.
    assert not os.path.exists(os.path.join(SHM_DIR, sem)), "the semaphore outlived close()"
    assert not os.path.exists(os.path.join(SHM_DIR, marker[0])), "the marker outlived close()"
    with pytest.raises(OSError, match="closed"):
        q.put(1)


def test_the_calibration_parent_removes_what_a_killed_child_left(monkeypatch):
    # A calibration child that does not end within STOP_WAIT_S is killed; its resource tracker may be gone
    # as well (here: nothing registered with it), so the parent removes what the child's pid names.
    src = textwrap.dedent("""
        import os, signal, sys, time
        import multiprocessing as mp
        from multiprocessing import resource_tracker
        from pearl_core.runtime.queues import PipeQueue
        from pearl_core.runtime.shm import Layout, ShmArena
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a child that cannot end its run in time
        arena = ShmArena("run")
        block = arena.block(Layout.of({"x": ((16,), "<f8")}), "laqseq")
        q = PipeQueue(4, mp.get_context("spawn"))
        name = q._free._semlock.name
        resource_tracker.unregister("/" + block.name, "shared_memory")
        resource_tracker.unregister(name, "semaphore")
        resource_tracker.unregister(f"/pearl_{os.getpid()}_sem_" + name.lstrip("/"), "shared_memory")
        print(name, flush=True)
        time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", src], stdout=subprocess.PIPE, text=True)
    try:
        sem = os.path.join(SHM_DIR, "sem." + child.stdout.readline().strip().lstrip("/"))
        assert len(_entries(child.pid)) == 2 and os.path.exists(sem)
        monkeypatch.setattr(calibrate, "STOP_WAIT_S", 0.2)
        calibrate._stop_child(child)
        assert child.returncode == -signal.SIGKILL
        assert not _entries(child.pid), f"left by the killed child: {_entries(child.pid)}"
        assert not os.path.exists(sem)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def test_a_parallel_hosts_start_removes_the_orphans_of_killed_runs(tmp_path, monkeypatch):
    from pearl_core.runtime import host as host_module
    from pearl_core.runtime.config import RunConfig, RuntimePlan, StopCriteria
    from pearl_core.runtime.parallel import ParallelRuntime
    from pearl_core.runtime.procs import START_METHOD_ENV

    monkeypatch.setenv(START_METHOD_ENV, "spawn")  # no fork server: the host is built and closed, nothing started
    calls, real = [], host_module.clean_orphans

    def spy(*args, **kw):
        out = real(*args, **kw)
        calls.append((args, kw, out, list_segments(os.getpid())))  # what the host had made by then
        return out

    monkeypatch.setattr(host_module, "clean_orphans", spy)
    dead = _dead_pid()
    orphans = [f"pearl_{dead}_0a1b2c_run_laqseq_3", f"pearl_{dead}_sem_mp-pearltest"]
    for n in [*orphans, "sem.mp-pearltest"]:
        with open(os.path.join(SHM_DIR, n), "wb"):
            pass
    try:
        cfg = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN",
                        trainer_kwargs={"hidden_sizes": [8]}, batch_size=16, learning_starts=64,
                        stop=StopCriteria(max_env_steps=128), log_dir=str(tmp_path / "run"))
        rt = ParallelRuntime(cfg, RuntimePlan(n_actors=1), progress=False, plot=False, tensorboard=False)
        host = host_module.Host(rt)
        made = list_segments(os.getpid())
        host.close()
        # Called once, for every owner, before the run made any segment of its own.
        assert [(a, k) for a, k, _, _ in calls] == [((), {})]
        assert not [n for n in calls[0][3] if "_run_" in n] and [n for n in made if "_run_" in n]
        assert not [n for n in os.listdir(SHM_DIR) if n.startswith(f"pearl_{dead}_")]
        assert not os.path.exists(os.path.join(SHM_DIR, "sem.mp-pearltest"))
    finally:
        for n in [*orphans, "sem.mp-pearltest"]:
            try:
                os.unlink(os.path.join(SHM_DIR, n))
            except FileNotFoundError:
                pass
