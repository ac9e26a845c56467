"""Fixtures and helpers shared by the test files.

* ``no_leaks`` — fails a test that leaves child processes or ``/dev/shm`` segments behind.
* ``cartpole`` — one CartPole-v1 environment per test session (its spaces seed
  nothing: tests that need a seeded env build their own).
* :func:`proc_table`, :func:`child_pids`, :func:`wait_no_children` — the leak checks' process scan, for
  tests that look at processes themselves (``from conftest import child_pids``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import pytest

from pearl_core.runtime.shm import list_segments

HERE = os.path.dirname(os.path.abspath(__file__))
# The shared test helpers (cpu_backend, faulty_envs, runtime_support): on sys.path through pyproject's
# ``pythonpath``; a script a test runs in a fresh interpreter puts this folder on its own path.
HELPERS = os.path.join(HERE, "helpers")

# The CPU backend's calibration runs (each host variant run for real while profiling) are checked here for
# their mechanism, not their figures: one round of 1 s each instead of the default three of 3 s (about a
# minute per profiled workload on 2 cores). Subprocesses inherit these; a test may still set its own.
os.environ.setdefault("PEARL_CALIBRATE_WINDOW_S", "1")
os.environ.setdefault("PEARL_CALIBRATE_ROUNDS", "1")


def proc_table() -> dict[int, tuple[int, str]]:
    """``pid -> (ppid, command line)`` of every live (non-zombie) process, from /proc."""
    procs = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                stat = fh.read()
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            procs[int(entry)] = (int(fields[1]), cmd)
    return procs


def child_pids(pid: int | None = None) -> list[int]:
    """Live (non-zombie) worker processes under ``pid``, from /proc.

    Children of ``pid``, and the children of multiprocessing's fork server (the parallel
    runtime's workers start from it, :mod:`pearl_core.runtime.procs`). The resource tracker
    and the fork server themselves are helpers that live as long as the Python process and
    are not counted.
    """
    pid = os.getpid() if pid is None else pid
    procs = proc_table()
    out = []
    for child, (ppid, cmd) in procs.items():
        if ppid != pid or "resource_tracker" in cmd:
            continue
        if "forkserver" in cmd:
            out.extend(c for c, (pp, _) in procs.items() if pp == child)
        else:
            out.append(child)
    return out


def wait_no_children(timeout: float = 10.0) -> list[int]:
    """Children still alive after up to ``timeout`` seconds (normally none)."""
    deadline = time.monotonic() + timeout
    while True:
        mp.active_children()  # reaps finished multiprocessing children
        left = child_pids()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


@pytest.fixture
def no_leaks():
    """Fail a test that leaves child processes or /dev/shm segments behind."""
    before = set(list_segments(os.getpid()))
    yield
    left = wait_no_children()
    assert not left, f"child processes outlived the test: {left}"
    assert not mp.active_children(), f"multiprocessing children alive: {mp.active_children()}"
    leaked = set(list_segments(os.getpid())) - before
    assert not leaked, f"leaked shared-memory segments: {sorted(leaked)}"


@pytest.fixture(scope="session")
def cartpole():
    """A CartPole-v1 environment, built once per session (not at import time)."""
    from pearl_core.envs import make_env

    env = make_env("CartPole-v1")
    yield env
    env.close()
