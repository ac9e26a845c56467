"""Run integrity under faults ("Nothing lost, nothing silent", part 2).

1. One run per log directory: a second run refuses (naming the owner) and touches
   nothing; a stale lock of a dead run is taken over with a warning; the lock is
   released however a run ends.
2. Resume keeps every log row up to the checkpoint exactly once (and the logs are
   on the disk before every checkpoint), then appends.
3. Outputs are written atomically: ``atomic_write`` / ``atomic_write_all`` leave no
   temporary file and change nothing on failure; ``pearl compose`` is all or nothing
   and never deletes a pre-existing program; the runtime's own outputs too.
4. Checkpoint errors: a damaged file, other network shapes, a full disk.

Every runtime test runs the serial runtime and the parallel one in both protocol
settings on tiny CartPole budgets; no assertion depends on wall-clock time.
"""

from __future__ import annotations

import csv
import errno
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import pearl_core.composer.compose_cli as compose_cli
import pearl_core.fileio as fileio
import pearl_core.runtime.checkpoint as checkpoint_mod
import pearl_core.runtime.control as control
import pearl_core.runtime.session as session_mod
from pearl_core.errors import InvalidValueError, LearnerError, PearlError, SpecError
from pearl_core.fileio import atomic_write, atomic_write_all
from pearl_core.runtime.checkpoint import CheckpointWriteError, load_checkpoint, load_trainer_state, save_checkpoint
from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
from pearl_core.runtime.control import RunLogger, RunState, StopMonitor, plot_learning_curve
from pearl_core.runtime.parallel import ParallelRuntime
from pearl_core.runtime.runlock import LOCK_NAME, RunLock, check_free, read_owner
from pearl_core.runtime.serial import SerialRuntime

pytestmark = pytest.mark.usefixtures("no_leaks")

ROOT = Path(__file__).resolve().parents[1]
THIS_MACHINE = ROOT / "examples" / "hardware" / "this-machine.toml"
KINDS = ["serial", 1, 2]
IDS = ["serial", "setting1", "setting2"]


def plan_for(kind) -> RuntimePlan:
    return RuntimePlan(setting=1 if kind == "serial" else kind, n_actors=1, envs_per_actor=2, insert_batch=16,
                       queue_size=4)


def config(log_dir, steps=160, trainer="runtime_support:LinearQ", **kw) -> RunConfig:
    base = dict(env_id="CartPole-v1", trainer=trainer, batch_size=16, learning_starts=32, train_every=16,
                replay_ratio=0.5, replay=ReplayConfig(capacity=2048), stop=StopCriteria(max_env_steps=steps),
                log_dir=str(log_dir))
    base.update(kw)
    return RunConfig(**base)


def make(kind, cfg, **kw):
    kw = {"progress": False, "plot": False, "tensorboard": False, **kw}
    return (SerialRuntime if kind == "serial" else ParallelRuntime)(cfg, plan_for(kind), **kw)


def snapshot(d) -> dict[str, bytes]:
    d = Path(d)
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def rows(path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))[1:]


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


# ================================================================ 1. one run per directory
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


# ================================================================ 2. resume continues the logs
def _spy_checkpoints(monkeypatch, tmp_path):
    """Copy every checkpoint as it is written, with the log rows on the disk at that moment."""
    saved = []
    real = session_mod.save_checkpoint
    keep = tmp_path / "saved"
    keep.mkdir()

    def spy(path, **kw):
        out = real(path, **kw)
        st = kw["state"]
        copy = keep / f"ck{len(saved)}.pt"
        shutil.copyfile(out, copy)
        on_disk = {n: rows(Path(path).parent / f"{n}.csv") for n in ("episodes", "evals", "metrics")}
        saved.append((copy, st.env_steps, st.episodes, len(st.eval_history), on_disk))
        return out

    monkeypatch.setattr(session_mod, "save_checkpoint", spy)
    return saved


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_resume_keeps_every_row_up_to_the_checkpoint_exactly_once(tmp_path, monkeypatch, kind):
    d = tmp_path / "run"
    stop = dict(eval_return=1e9, eval_every=48, eval_episodes=1)
    saved = _spy_checkpoints(monkeypatch, tmp_path)
    # metrics_every so large that only evaluations and checkpoints flush the logs
    first = make(kind, config(d, steps=224, checkpoint_every=96, save_replay=True,
                              stop=StopCriteria(max_env_steps=224, **stop)), metrics_every=10**6).run()
    for _, env_steps, episodes, evals, on_disk in saved:
        # every row a checkpoint counts is on the disk when it is written
        assert len(on_disk["episodes"]) == episodes, (env_steps, episodes, len(on_disk["episodes"]))
        assert len(on_disk["evals"]) == evals
    mid = next(s for s in saved if 0 < s[1] < first.env_steps)
    ck_path, at, episodes, evals, on_disk = mid
    assert len(rows(d / "episodes.csv")) > episodes  # the first run logged past that checkpoint
    # The run "died" after its checkpoint at `at`: resume from it (the logs hold rows after it).
    monkeypatch.undo()
    res = make(kind, config(d, steps=320, checkpoint_every=96, save_replay=True,
                            stop=StopCriteria(max_env_steps=320, **stop)), resume_from=ck_path,
               metrics_every=10**6).run()
    assert res.env_steps == 320
    eps, evs, mets = (rows(d / f"{n}.csv") for n in ("episodes", "evals", "metrics"))
    assert eps[:episodes] == on_disk["episodes"]  # every row up to the checkpoint, unchanged ...
    assert [int(r[2]) for r in eps] == list(range(1, res.episodes + 1))  # ... exactly once, then appended
    assert all(int(r[0]) > at for r in eps[episodes:])
    assert evs[:evals] == on_disk["evals"] and len(evs) == len(res.eval_history)
    assert [int(r[0]) for r in evs] == [e[0] for e in res.eval_history]
    assert mets[:len(on_disk["metrics"])] == on_disk["metrics"]
    steps = [int(r[0]) for r in mets]
    assert steps == sorted(set(steps)) and [s for s in steps if s > at] == [320]  # the first run's later row: gone


def test_resume_into_another_log_dir_carries_the_rows_up_to_the_checkpoint(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    first = make("serial", config(a, steps=96)).run()
    before = rows(a / "episodes.csv")
    res = make("serial", config(b, steps=160), resume_from=first.checkpoint_path).run()
    eps = rows(b / "episodes.csv")
    assert eps[:len(before)] == before and [int(r[2]) for r in eps] == list(range(1, res.episodes + 1))
    assert rows(a / "episodes.csv") == before  # the source directory is only read


def test_resume_over_a_foreign_log_refuses_and_changes_nothing(tmp_path):
    log = RunLogger(tmp_path, tensorboard=False)
    log.episode(10, 0.5, 1, 12.0, 10)
    log.close()
    (tmp_path / "evals.csv").write_text("step,value\n1,2\n")
    before = snapshot(tmp_path)
    with pytest.raises(SpecError, match=r"evals.csv' has the header \['step', 'value'\]; expected PEARL's"):
        RunLogger(tmp_path, tensorboard=False, resume_at=20)
    assert snapshot(tmp_path) == before


def test_resume_reports_damaged_and_missing_rows(tmp_path, caplog):
    log = RunLogger(tmp_path, tensorboard=False)
    log.episode(10, 0.5, 1, 12.0, 10)
    log.close()
    with open(tmp_path / "episodes.csv", "a", encoding="utf-8") as fh:
        fh.write("15,0.7,2,1")  # a row cut short by a full disk
    with caplog.at_level(logging.WARNING, logger="pearl_core.runtime"):
        RunLogger(tmp_path, tensorboard=False, resume_at=20, keep={"episodes": 2}).close()
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "dropped 1 damaged row" in text and "holds 1 row(s) up to it but the checkpoint counts 2" in text
    assert rows(tmp_path / "episodes.csv") == [["10", "0.500", "1", "12", "10"]]


# ================================================================ 3. atomic outputs
def _only(d, *names):
    assert sorted(os.listdir(d)) == sorted(names)


@pytest.mark.parametrize("fault", ["callable", "interrupt", "fsync", "chmod", "replace"])
def test_atomic_write_failure_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch, fault):
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")
    data: object = b"new"
    if fault == "callable":
        def data(fh):
            fh.write(b"half")
            raise ValueError("render failed")
    elif fault == "interrupt":
        def data(fh):
            fh.write(b"half")
            raise KeyboardInterrupt
    else:
        real = getattr(os, fault)

        def boom(*a, **k):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(fileio.os, fault, boom)
    with pytest.raises((ValueError, KeyboardInterrupt, OSError)):
        atomic_write(path, data)
    if fault not in ("callable", "interrupt"):
        monkeypatch.setattr(fileio.os, fault, real)
    assert path.read_bytes() == b"old"
    _only(tmp_path, "out.bin")


def test_atomic_write_make_parents_removes_the_directories_it_made_on_failure(tmp_path):
    def data(fh):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError):
        atomic_write(tmp_path / "a" / "b" / "f.txt", data, make_parents=True)
    _only(tmp_path)


def test_atomic_write_all_is_all_or_nothing(tmp_path, monkeypatch):
    old, new = tmp_path / "old.txt", tmp_path / "new.txt"
    old.write_text("before")

    def bad(fh):
        raise ValueError("render failed")

    with pytest.raises(ValueError):
        atomic_write_all([(old, "after"), (new, bad)])
    assert old.read_text() == "before"
    _only(tmp_path, "old.txt")
    with pytest.raises(InvalidValueError, match="twice"):
        atomic_write_all([(old, "a"), (tmp_path / "." / "old.txt", "b")])
    with pytest.raises(InvalidValueError, match="is a directory"):
        atomic_write_all([(old, "a"), (tmp_path, "b")])
    assert old.read_text() == "before"
    # A failure while moving files into place puts back the ones already moved.
    real = os.replace

    def replace(src, dst):
        if str(dst).endswith("new.txt"):
            raise OSError(errno.EIO, "I/O error")
        return real(src, dst)

    monkeypatch.setattr(fileio.os, "replace", replace)
    with pytest.raises(OSError, match="I/O error"):
        atomic_write_all([(old, "after"), (new, "x")])
    monkeypatch.setattr(fileio.os, "replace", real)
    assert old.read_text() == "before"
    _only(tmp_path, "old.txt")
    assert atomic_write_all([(old, "after"), (new, b"x")]) == [old, new]
    assert (old.read_text(), new.read_text()) == ("after", "x")
    _only(tmp_path, "old.txt", "new.txt")


def _compose(*args):
    from pearl_core.cli import app

    return CliRunner().invoke(app, ["compose", "-H", str(THIS_MACHINE), "--no-profile", *args])


@pytest.mark.parametrize("bad", ["png-under-a-file", "png-missing-dir", "json-is-a-directory", "same-path"])
def test_compose_bad_destination_keeps_the_existing_program(tmp_path, monkeypatch, bad):
    prog = tmp_path / "rt.py"
    prog.write_text("# my program\n")
    (tmp_path / "afile").write_text("x")
    (tmp_path / "plan.json").mkdir()
    args = {"png-under-a-file": ["--png", str(tmp_path / "afile" / "grid.png")],
            "png-missing-dir": ["--png", str(tmp_path / "nope" / "grid.png")],
            "json-is-a-directory": ["--json", str(tmp_path / "plan.json")],
            "same-path": ["--json", str(prog)]}[bad]
    before = snapshot(tmp_path)
    res = _compose("-o", str(prog), *args)
    assert res.exit_code == 2 and "error:" in res.output, res.output
    assert snapshot(tmp_path) == before  # the program is still there, unchanged, and no .tmp is left
    assert sorted(os.listdir(tmp_path)) == ["afile", "plan.json", "rt.py"]


def test_compose_checks_destinations_before_planning(tmp_path, monkeypatch):
    monkeypatch.setattr(compose_cli, "composer_from_options", lambda o: pytest.fail("planned"))
    res = _compose("-o", str(tmp_path / "rt.py"), "--json", str(tmp_path))
    assert res.exit_code == 2 and "is a directory" in res.output
    _only(tmp_path)


def test_compose_failure_while_writing_changes_no_output(tmp_path, monkeypatch):
    prog, png, js = tmp_path / "rt.py", tmp_path / "grid.png", tmp_path / "plan.json"
    for p in (prog, png):
        p.write_bytes(b"old " + p.name.encode())
    real = os.replace

    def replace(src, dst):
        if str(dst).endswith("plan.json"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(fileio.os, "replace", replace)
    res = _compose("-o", str(prog), "--png", str(png), "--json", str(js))
    assert res.exit_code == 2 and "No space left" in res.output, res.output
    assert prog.read_bytes() == b"old rt.py" and png.read_bytes() == b"old grid.png"
    _only(tmp_path, "rt.py", "grid.png")
    monkeypatch.setattr(fileio.os, "replace", real)
    res = _compose("-o", str(prog), "--png", str(png), "--json", str(js))
    assert res.exit_code == 0, res.output
    assert "RUN_CONFIG = RunConfig(" in prog.read_text()
    assert png.read_bytes()[:4] == b"\x89PNG" and js.read_text().startswith("{")
    _only(tmp_path, "rt.py", "grid.png", "plan.json")


def test_resumed_logs_are_restarted_atomically(tmp_path, monkeypatch):
    log = RunLogger(tmp_path, tensorboard=False)
    for i in range(5):
        log.episode(10 * i, 0.1 * i, i + 1, float(i), 10)
    log.close()
    before = snapshot(tmp_path)

    class FullDiskCsv:  # the rows kept by a resume hit a full disk
        reader = staticmethod(csv.reader)

        @staticmethod
        def writer(fh):
            w = csv.writer(fh)

            class W:
                writerow = staticmethod(w.writerow)

                @staticmethod
                def writerows(rs):
                    rs = list(rs)
                    if rs:
                        raise OSError(errno.ENOSPC, "No space left on device")

            return W()

    monkeypatch.setattr(control, "csv", FullDiskCsv)
    with pytest.raises(OSError, match="No space left"):
        RunLogger(tmp_path, tensorboard=False, resume_at=30)
    assert snapshot(tmp_path) == before  # not one row lost


def test_learning_curve_write_failure_keeps_the_old_png(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    RunLogger(tmp_path, tensorboard=False).close()
    png = plot_learning_curve(tmp_path)
    good = png.read_bytes()

    def savefig(self, fh, **kw):
        fh.write(b"half a png")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", savefig)
    with pytest.raises(OSError):
        plot_learning_curve(tmp_path)
    assert png.read_bytes() == good
    _only(tmp_path, "episodes.csv", "evals.csv", "metrics.csv", "learning_curve.png")


# ================================================================ 4. checkpoint errors
def _dqn(log_dir, hidden, steps=64) -> RunConfig:
    return config(log_dir, steps=steps, trainer="pearl_core.algorithms:DQN",
                  trainer_kwargs={"hidden_sizes": hidden, "eps_decay_steps": 100})


def test_damaged_checkpoint_says_damaged_and_never_recommends_weights_only_false(tmp_path):
    d = tmp_path / "run"
    first = make("serial", config(d, steps=64)).run()
    good = Path(first.checkpoint_path).read_bytes()
    cases = {"truncated.pt": good[: len(good) // 2], "junk.pt": b"not a checkpoint", "empty.pt": b""}
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        for call in (lambda: load_checkpoint(p), lambda: SerialRuntime(config(d), resume_from=p)):
            with pytest.raises(SpecError) as info:
                call()
            msg = str(info.value)
            assert "weights_only" not in msg, msg
            assert "damaged" in msg and "not a PEARL checkpoint" in msg and "earlier checkpoint" in msg, msg


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_resume_with_other_hidden_sizes_names_both_shapes(tmp_path, kind):
    d = tmp_path / "run"
    first = make("serial", _dqn(d, [8])).run()
    before = snapshot(d)
    with pytest.raises(SpecError) as info:
        make(kind, _dqn(d, [16], steps=128), resume_from=first.checkpoint_path).run()
    msg = str(info.value)
    assert "(8, 4) in the checkpoint, (16, 4) under the config" in msg, msg
    assert "'hidden_sizes': [8]" in msg and "'hidden_sizes': [16]" in msg and "Fix: resume with the checkpoint's" in msg
    assert "size mismatch" not in msg
    assert snapshot(d) == before


def test_load_trainer_state_reports_a_mismatch_as_spec_error(tmp_path):
    from pearl_core.envs import env_spaces
    from pearl_core.runtime.wiring import build_trainer

    first = make("serial", _dqn(tmp_path / "run", [8])).run()
    ck = load_checkpoint(first.checkpoint_path)
    other = build_trainer(_dqn(tmp_path, [4]), *env_spaces("CartPole-v1"), check=False)
    with pytest.raises(SpecError, match=r"q_net.0.weight: \(8, 4\) in the checkpoint, \(4, 4\)"):
        load_trainer_state(other, ck)


class _FullDisk:
    """A file whose writes fail with ENOSPC after ``room`` bytes, like a disk that fills up."""

    def __init__(self, fh, room=512):
        self.fh, self.room = fh, room

    def write(self, b):
        self.room -= len(b)
        if self.room < 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.fh.write(b)

    def __getattr__(self, name):
        return getattr(self.fh, name)


def _fill_disk_after(monkeypatch, good_saves: int) -> list:
    calls = []
    real = checkpoint_mod.atomic_write

    def spy(path, data, **kw):
        calls.append(path)
        if len(calls) > good_saves:
            return real(path, lambda fh: data(_FullDisk(fh)), **kw)
        return real(path, data, **kw)

    monkeypatch.setattr(checkpoint_mod, "atomic_write", spy)
    return calls


def test_full_disk_unit_save_checkpoint(tmp_path, monkeypatch):
    d = tmp_path / "run"
    make("serial", config(d, steps=32)).run()
    path = d / "checkpoint.pt"
    good = path.read_bytes()
    _fill_disk_after(monkeypatch, 0)
    ck = load_checkpoint(path)
    with pytest.raises(CheckpointWriteError) as info:
        save_checkpoint(path, trainer=_Weights(ck.trainer_state), state=RunState(env_steps=99),
                        monitor=StopMonitor(ck.config.stop), config=ck.config, plan=ck.plan)
    msg = str(info.value)
    assert isinstance(info.value, PearlError) and isinstance(info.value, OSError)
    assert f"could not write checkpoint {str(path)!r}: disk full?" in msg and "previous checkpoint" in msg
    assert "inline_container" in msg  # torch's own words are kept for the record
    assert path.read_bytes() == good
    assert not [n for n in os.listdir(d) if n.endswith(".tmp")]


class _Weights:
    def __init__(self, state):
        self._state = state

    def state_dict(self):
        return self._state


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_full_disk_while_checkpointing_fails_the_run_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch,
                                                                                       kind):
    d = tmp_path / "run"
    calls = _fill_disk_after(monkeypatch, 1)
    with pytest.raises(PearlError, match="could not write checkpoint") as info:
        make(kind, config(d, steps=400, checkpoint_every=64)).run()
    # the parallel host may wrap it (HostError naming what it was doing); the cause is kept
    err = info.value if isinstance(info.value, CheckpointWriteError) else info.value.__cause__
    assert isinstance(err, CheckpointWriteError) and "Fix: free space" in str(err)
    assert len(calls) >= 2
    monkeypatch.undo()
    ck = load_checkpoint(d / "checkpoint.pt")  # the first checkpoint, intact
    assert 64 <= ck.state.env_steps < 400
    assert not [n for n in os.listdir(d) if n.endswith(".tmp")]
    assert not (d / LOCK_NAME).exists()
    # ... and the run resumes from it
    res = make(kind, config(d, steps=ck.state.env_steps + 32), resume_from=d / "checkpoint.pt").run()
    assert res.env_steps == ck.state.env_steps + 32


def test_plan_outputs_are_all_or_nothing_and_keep_an_existing_png(tmp_path):
    """`pearl plan --png old.png --json <a directory>` used to write the PNG, fail on the JSON and delete it."""
    from typer.testing import CliRunner

    from pearl_core.cli import app

    png = tmp_path / "grid.png"
    png.write_bytes(b"the user's old grid")
    (tmp_path / "plan.json").mkdir()
    before = snapshot(tmp_path)
    res = CliRunner().invoke(app, ["plan", "-H", str(THIS_MACHINE), "--png", str(png),
                                   "--json", str(tmp_path / "plan.json")])
    assert res.exit_code == 2 and "error:" in res.output, res.output
    assert snapshot(tmp_path) == before and png.read_bytes() == b"the user's old grid"
    ok = CliRunner().invoke(app, ["plan", "-H", str(THIS_MACHINE), "--png", str(png),
                                  "--json", str(tmp_path / "new.json")])
    assert ok.exit_code == 0, ok.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (tmp_path / "new.json").exists()
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


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
