"""One run per log directory (:mod:`pearl_core.runtime.runlock`): a second run refuses (naming the owner) and
touches nothing; a stale lock of a dead run is taken over with a warning; the lock is taken before anything
is written and released however a run ends.

Every runtime test runs the serial runtime and the parallel one in both protocol settings on tiny CartPole
budgets; no assertion depends on wall-clock time.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from run_kinds import KINDS, IDS, config, make, snapshot, rows

import pearl_core.runtime.session as session_mod
from pearl_core.errors import LearnerError, SpecError
from pearl_core.runtime.checkpoint import load_checkpoint
from pearl_core.runtime.config import RunConfig, RuntimePlan, StopCriteria
from pearl_core.runtime.runlock import LOCK_NAME, RunLock, check_free, read_owner
from pearl_core.runtime.serial import SerialRuntime

pytestmark = pytest.mark.usefixtures("no_leaks")


HOLDER = textwrap.dedent("""
    import sys
    from pearl_core.runtime.runlock import RunLock
    lock = RunLock.acquire(sys.argv[1])
    print("locked", flush=True)
    sys.stdin.read()  # hold the directory until the test closes stdin or kills this process
""")


@pytest.fixture
def holder():
    """Start a process that holds a log_dir's run lock, as a live run does (killed and reaped at teardown)."""
    procs: list[subprocess.Popen] = []

    def start(log_dir) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(log_dir)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout.readline().strip() == "locked"
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.communicate(timeout=30)


def dead_owner_lock(holder, log_dir) -> int:
    """Leave ``log_dir`` with the lock file of a run killed outright; returns its (dead) pid."""
    p = holder(log_dir)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=30)
    assert read_owner(log_dir)["pid"] == p.pid
    return p.pid


# ================================================================ one run per directory
def test_lock_unit_acquire_refuse_release(tmp_path):
    lock = RunLock.acquire(tmp_path / "d")
    owner = read_owner(tmp_path / "d")
    assert owner["pid"] == os.getpid() and owner["host"] and owner["started"]
    with pytest.raises(SpecError, match=rf"in use by another run \(pid {os.getpid()} on host"):
        check_free(tmp_path / "d")
    with pytest.raises(SpecError, match="Fix: give this run another log_dir"):
        RunLock.acquire(tmp_path / "d")  # a second lock in the same process is refused as well
    lock.release()
    lock.release()  # idempotent
    assert not (tmp_path / "d" / LOCK_NAME).exists()
    check_free(tmp_path / "d")
    with RunLock.acquire(tmp_path / "d") as again:
        assert again.previous is None  # a released lock is no stale lock
    assert not (tmp_path / "d" / LOCK_NAME).exists()


def test_lock_without_flock_falls_back_to_the_owners_pid(tmp_path, holder, monkeypatch, caplog):
    import pearl_core.runtime.runlock as runlock

    live = holder(tmp_path / "live")
    dead = dead_owner_lock(holder, tmp_path / "dead")

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(runlock.fcntl, "flock", no_flock)
    with pytest.raises(SpecError, match=f"pid {live.pid} on host"):
        check_free(tmp_path / "live")
    with pytest.raises(SpecError, match=f"pid {live.pid} on host"):
        RunLock.acquire(tmp_path / "live")
    check_free(tmp_path / "dead")
    with caplog.at_level(logging.WARNING, logger="pearl_core.runtime"):
        lock = RunLock.acquire(tmp_path / "dead")
    assert lock.previous["pid"] == dead and any(f"pid {dead}" in r.getMessage() for r in caplog.records)
    assert read_owner(tmp_path / "dead")["pid"] == os.getpid()
    lock.release()
    assert not (tmp_path / "dead" / LOCK_NAME).exists()


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_second_run_into_a_held_directory_refuses_at_once_and_touches_nothing(tmp_path, holder, monkeypatch, kind):
    d = tmp_path / "run"
    first = make("serial", config(d, steps=96, checkpoint_every=48)).run()
    p = holder(d)  # the first run's directory, now held by a live process
    before = snapshot(d)
    built = []
    for mod in ("pearl_core.runtime.serial", "pearl_core.runtime.host"):
        monkeypatch.setattr(f"{mod}.build_trainer", lambda *a, **k: built.append(a) or pytest.fail("built"))
    with pytest.raises(SpecError) as info:
        make(kind, config(d, steps=96)).run()
    msg = str(info.value)
    assert f"pid {p.pid}" in msg and str(d) in msg and "Fix: give this run another log_dir" in msg
    assert built == []  # refused before building environments, trainer or processes
    assert snapshot(d) == before  # CSVs, checkpoint, config: not one byte changed
    assert load_checkpoint(first.checkpoint_path).state.env_steps == 96


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_a_nested_run_into_a_live_runs_directory_refuses_and_the_live_run_completes(tmp_path, monkeypatch, kind):
    d = tmp_path / "run"
    seen: list = []
    real_tick = session_mod.RunSession.tick

    def tick(self, save):
        if not seen:
            seen.append(read_owner(d))
            try:
                make(kind, config(d, steps=64)).run()
                seen.append(None)
            except SpecError as exc:
                seen.append(exc)
        return real_tick(self, save)

    monkeypatch.setattr(session_mod.RunSession, "tick", tick)
    res = make(kind, config(d, steps=128, checkpoint_every=64)).run()
    owner, err = seen
    assert owner["pid"] == os.getpid()  # the lock was held while the run was live
    assert isinstance(err, SpecError) and f"pid {os.getpid()}" in str(err)
    assert res.env_steps == 128 and len(rows(d / "episodes.csv")) == res.episodes
    assert load_checkpoint(res.checkpoint_path).state.env_steps == 128
    assert not (d / LOCK_NAME).exists()


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_stale_lock_of_a_dead_run_is_taken_over_with_a_warning(tmp_path, holder, caplog, kind):
    d = tmp_path / "run"
    dead = dead_owner_lock(holder, d)
    with caplog.at_level(logging.WARNING, logger="pearl_core.runtime"):
        res = make(kind, config(d, steps=64)).run()
    assert res.env_steps == 64
    warned = [r.getMessage() for r in caplog.records if "stale lock" in r.getMessage()]
    assert len(warned) == 1 and f"pid {dead}" in warned[0] and "not running" in warned[0]
    assert not (d / LOCK_NAME).exists()


class _Stop(KeyboardInterrupt):
    pass


@pytest.mark.parametrize("kind, fault", [("serial", "raise"), ("serial", "interrupt"), (1, "raise"),
                                         (2, "interrupt")], ids=["serial-raise", "serial-ctrl-c", "setting1-raise",
                                                                 "setting2-ctrl-c"])
def test_lock_is_released_when_the_run_fails(tmp_path, monkeypatch, caplog, kind, fault):
    d = tmp_path / "run"
    if fault == "raise":
        cfg = config(d, steps=400, trainer="runtime_support:FailingLearner", trainer_kwargs={"fail_at": 5})
        expected = Exception  # LearnerError (parallel; the serial runtime's own wrapping may vary)
    else:
        cfg, expected = config(d, steps=400), _Stop
        calls = []
        real_tick = session_mod.RunSession.tick

        def tick(self, save):
            calls.append(1)
            if len(calls) == 20:
                assert (d / LOCK_NAME).exists()
                raise _Stop()
            return real_tick(self, save)

        monkeypatch.setattr(session_mod.RunSession, "tick", tick)
    with pytest.raises(expected) as info:
        make(kind, cfg).run()
    if fault == "raise":
        assert "boom in update 5" in str(info.value)
        assert kind == "serial" or isinstance(info.value, LearnerError)
    assert not (d / LOCK_NAME).exists()
    check_free(d)
    with caplog.at_level(logging.WARNING, logger="pearl_core.runtime"):
        RunLock.acquire(d).release()
    assert not any("stale lock" in r.getMessage() for r in caplog.records)


def test_the_lock_is_taken_before_anything_is_written(tmp_path, monkeypatch):
    d = tmp_path / "run"
    writes = []
    real = session_mod.atomic_write

    def spy(path, *a, **k):
        writes.append((Path(path).name, (d / LOCK_NAME).exists()))
        return real(path, *a, **k)

    monkeypatch.setattr(session_mod, "atomic_write", spy)
    make("serial", config(d, steps=32)).run()
    assert writes and all(locked for _, locked in writes), writes


def test_a_serial_run_refused_by_the_lock_restores_torch_threads(tmp_path):

    from pearl_core.runtime.runlock import RunLock

    cfg = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", learning_starts=10,
                    stop=StopCriteria(max_env_steps=50), log_dir=str(tmp_path / "run"))
    before = torch.get_num_threads()
    (tmp_path / "run").mkdir()
    held = RunLock.acquire(tmp_path / "run")
    try:
        rt = SerialRuntime(cfg, RuntimePlan(learner_threads=max(1, before + 1)), progress=False, tensorboard=False)
        with pytest.raises(SpecError, match="run.lock|another run|owned"):
            rt.run()
    finally:
        held.release()
    assert torch.get_num_threads() == before
