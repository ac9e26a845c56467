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

import pytest

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
