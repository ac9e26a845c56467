"""Resume continues the logs (:mod:`pearl_core.runtime.control`): every log row up to the checkpoint kept
exactly once (the logs are on the disk before every checkpoint), then appended; restarted logs and the
learning curve written atomically.
"""

from __future__ import annotations

import csv
import errno
import logging
import os
import shutil
from pathlib import Path

import pytest

from run_kinds import KINDS, IDS, config, make, snapshot, rows

import pearl_core.runtime.control as control
import pearl_core.runtime.session as session_mod
from pearl_core.errors import SpecError
from pearl_core.runtime.config import StopCriteria
from pearl_core.runtime.control import RunLogger, plot_learning_curve

pytestmark = pytest.mark.usefixtures("no_leaks")


def _only(d, *names):
    assert sorted(os.listdir(d)) == sorted(names)


# ================================================================ resume continues the logs
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
