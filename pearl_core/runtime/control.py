"""Run control shared by the serial and the parallel runtime.

* :class:`RunState` — the counters of a run (env steps, updates, episodes,
  time, evaluation history, when it was solved) and :class:`RunResult`, the
  frozen value a runtime returns;
* :class:`StopMonitor` — evaluates :class:`~pearl_core.runtime.config.StopCriteria`
  and says which criterion fired;
* :class:`ProgressDisplay` — a rich live line on a terminal, plain periodic lines otherwise;
* :class:`RunLogger` — CSV logs (episodes, evaluations, periodic metrics) and a
  TensorBoard log when the ``tensorboard`` package is installed;
* :func:`plot_learning_curve` — a PNG of returns vs env steps (matplotlib, Agg).

Checkpoints are in :mod:`pearl_core.runtime.checkpoint`; the session that
drives all of these during a run in :mod:`pearl_core.runtime.session`.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import io
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence, TextIO

import numpy as np

from pearl_core.errors import SpecError
from pearl_core.fileio import LogFile, atomic_write, open_append
from pearl_core.runtime.config import StopCriteria

__all__ = [
    "ProgressDisplay",
    "RunLogger",
    "RunResult",
    "RunState",
    "StopDecision",
    "StopMonitor",
    "plot_learning_curve",
]

log = logging.getLogger("pearl_core.runtime")


# --------------------------------------------------------------------------------------
# Counters and the result value
# --------------------------------------------------------------------------------------
@dataclasses.dataclass
class RunState:
    """Mutable counters of a run; checkpointed and restored on resume.

    ``wall_time_s`` accumulates over resumed segments; the runtime adds the
    time of the current segment when it reads or saves it.
    """

    env_steps: int = 0
    updates: int = 0
    episodes: int = 0
    wall_time_s: float = 0.0
    learner_time_s: float = 0.0
    eval_time_s: float = 0.0
    eval_history: list[tuple[int, float, float]] = dataclasses.field(default_factory=list)
    solved_at_env_steps: int | None = None
    solved_at_wall_s: float | None = None
    last_metrics: dict[str, float] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["eval_history"] = [list(e) for e in self.eval_history]
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RunState":
        known = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in data.items() if k in known}
        d["eval_history"] = [(int(a), float(b), float(c)) for a, b, c in d.get("eval_history", [])]
        return cls(**d)


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What a runtime's ``run()`` returns.

    Attributes:
        env_steps, updates, episodes: totals at the end (over resumed segments too).
        wall_time_s: total wall time of the run, from the moment every worker was ready
            (process start-up is ``startup_s``, not included).
        eval_history: ``(env_steps, mean_return, wall_s)`` per greedy evaluation.
        solved_at_env_steps / solved_at_wall_s: when a return criterion
            (``mean_return`` or ``eval_return``) fired, else ``None``.
        stop_reason: the criterion that ended the run (``"mean_return"``,
            ``"eval_return"``, ``"max_env_steps"``, ``"max_updates"``,
            ``"max_wall_time_s"``) and ``stop_detail`` the numbers behind it.
        env_steps_per_s, updates_per_s, samples_per_s: totals / wall time
            (``samples`` = updates * batch size).
        learner_time_s, eval_time_s: time spent in learner updates / evaluation.
        final_mean_return: mean return of the last ``stop.window`` training
            episodes (fewer if fewer finished; ``None`` if none).
        log_dir, checkpoint_path: where the logs and the final checkpoint went.
        startup_s: seconds from ``run()`` to the start of the run clock (building the
            trainer, environments and logs; for the parallel runtime, starting its
            processes), this segment only. ``startup_s + solved_at_wall_s`` is the time to
            solved as a stopwatch started at ``run()`` sees it (for a run not resumed).
        dropped_nonfinite: transitions left out because the environment gave a NaN/inf
            observation, action or reward (``RunConfig.on_nonfinite="drop"``; 0 with "stop"),
            over resumed segments too.
        learner_phases_s: where the setting-2 worker's time went, seconds per phase
            (:data:`pearl_core.runtime.learner.PHASES`) up to its last progress report, this
            segment only; empty for the other runtimes.
    """

    env_steps: int
    updates: int
    wall_time_s: float
    episodes: int
    eval_history: tuple[tuple[int, float, float], ...]
    solved_at_env_steps: int | None
    solved_at_wall_s: float | None
    stop_reason: str
    stop_detail: str
    env_steps_per_s: float
    updates_per_s: float
    samples_per_s: float
    learner_time_s: float
    eval_time_s: float
    final_mean_return: float | None
    log_dir: str
    checkpoint_path: str | None
    startup_s: float = 0.0
    dropped_nonfinite: int = 0
    learner_phases_s: Mapping[str, float] = dataclasses.field(default_factory=dict)

    @property
    def solved(self) -> bool:
        return self.solved_at_env_steps is not None

    def summary(self) -> str:
        """Three lines for people: why the run stopped, when it solved, its throughput."""
        solved = (f"solved at {self.solved_at_env_steps} env steps, {self.solved_at_wall_s:.1f} s" if self.solved
                  else "not solved within the budget")
        return (f"stopped by {self.stop_reason} ({self.stop_detail})\n{solved}\n"
                f"throughput: {self.env_steps_per_s:.0f} env steps/s, {self.updates_per_s:.0f} updates/s, "
                f"{self.samples_per_s:.0f} samples trained/s over {self.wall_time_s:.1f} s")

    @classmethod
    def from_state(cls, state: RunState, decision: "StopDecision", *, batch_size: int,
                   final_mean_return: float | None, log_dir: str, checkpoint_path: str | None,
                   startup_s: float = 0.0, learner_phases_s: Mapping[str, float] | None = None) -> "RunResult":
        wall = max(state.wall_time_s, 1e-9)
        return cls(
            env_steps=state.env_steps,
            updates=state.updates,
            wall_time_s=state.wall_time_s,
            episodes=state.episodes,
            eval_history=tuple(state.eval_history),
            solved_at_env_steps=state.solved_at_env_steps,
            solved_at_wall_s=state.solved_at_wall_s,
            stop_reason=decision.criterion,
            stop_detail=decision.detail,
            env_steps_per_s=state.env_steps / wall,
            updates_per_s=state.updates / wall,
            samples_per_s=state.updates * batch_size / wall,
            learner_time_s=state.learner_time_s,
            eval_time_s=state.eval_time_s,
            final_mean_return=final_mean_return,
            log_dir=log_dir,
            checkpoint_path=checkpoint_path,
            startup_s=startup_s,
            learner_phases_s=dict(learner_phases_s or {}),
        )


# --------------------------------------------------------------------------------------
# Stop criteria
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class StopDecision:
    """Which criterion ended the run, with its numbers; ``solved`` for return criteria."""

    criterion: str
    detail: str
    solved: bool


class StopMonitor:
    """Evaluates :class:`StopCriteria`; the first criterion met wins.

    Return criteria are checked before budgets, so a run that reaches its
    target on its last allowed step counts as solved.

    * ``mean_return``: mean of the last ``window`` training episodes, once
      ``window`` episodes have finished;
    * ``eval_return``: the latest greedy evaluation's mean; evaluations are due
      every ``eval_every`` env steps (:meth:`eval_due`) when ``eval_every``
      or ``eval_return`` is set (every 5,000 for ``eval_return`` alone);
    * ``max_env_steps`` / ``max_updates`` / ``max_wall_time_s``: budgets (``>=``).
    """

    def __init__(self, stop: StopCriteria):
        if not isinstance(stop, StopCriteria):
            raise SpecError(f"StopMonitor needs a StopCriteria; found {type(stop).__name__}.")
        self.stop = stop
        self._returns: collections.deque[float] = collections.deque(maxlen=stop.window)
        self._next_eval = stop.eval_interval
        self._last_eval: tuple[int, float] | None = None

    @property
    def evaluates(self) -> bool:
        """Whether this run evaluates greedily (``eval_return`` or ``eval_every`` is set)."""
        return self.stop.evaluates

    def record_episode(self, episode_return: float) -> None:
        self._returns.append(float(episode_return))

    def recent_mean(self, full_window: bool = False) -> float | None:
        """Mean return of the last ``window`` episodes (of fewer unless ``full_window``)."""
        if not self._returns or (full_window and len(self._returns) < self.stop.window):
            return None
        return float(np.mean(self._returns))

    def eval_due(self, env_steps: int) -> bool:
        return self.evaluates and env_steps >= self._next_eval

    def record_started_eval(self, env_steps: int) -> None:
        """An evaluation at ``env_steps`` has started (asynchronously): the next one is due after it."""
        every = self.stop.eval_interval
        self._next_eval = (env_steps // every + 1) * every

    def record_eval(self, env_steps: int, mean_return: float) -> None:
        """Record an evaluation's mean; the next one is due at the next multiple of ``eval_every``."""
        self._last_eval = (int(env_steps), float(mean_return))
        every = self.stop.eval_interval
        self._next_eval = (env_steps // every + 1) * every

    def check(self, env_steps: int, updates: int, wall_s: float) -> StopDecision | None:
        """The criterion met now, or ``None`` to continue."""
        s = self.stop
        if s.mean_return is not None:
            m = self.recent_mean(full_window=True)
            if m is not None and m >= s.mean_return:
                return StopDecision(
                    "mean_return", f"mean return of the last {s.window} episodes {m:.2f} >= {s.mean_return}", True
                )
        if s.eval_return is not None and self._last_eval is not None and self._last_eval[1] >= s.eval_return:
            at, m = self._last_eval
            return StopDecision(
                "eval_return",
                f"greedy evaluation of {s.eval_episodes} episodes at {at} env steps averaged {m:.2f} "
                f">= {s.eval_return}",
                True,
            )
        if s.max_env_steps is not None and env_steps >= s.max_env_steps:
            return StopDecision("max_env_steps", f"{env_steps} env steps >= budget {s.max_env_steps}", False)
        if s.max_updates is not None and updates >= s.max_updates:
            return StopDecision("max_updates", f"{updates} learner updates >= budget {s.max_updates}", False)
        if s.max_wall_time_s is not None and wall_s >= s.max_wall_time_s:
            return StopDecision("max_wall_time_s", f"{wall_s:.1f} s >= budget {s.max_wall_time_s} s", False)
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"returns": list(self._returns), "next_eval": self._next_eval,
                "last_eval": list(self._last_eval) if self._last_eval else None}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._returns.clear()
        self._returns.extend(float(r) for r in state.get("returns", []))
        self._next_eval = int(state.get("next_eval", self.stop.eval_interval))
        last = state.get("last_eval")
        self._last_eval = (int(last[0]), float(last[1])) if last else None


# --------------------------------------------------------------------------------------
# Progress display
# --------------------------------------------------------------------------------------
def _fmt(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


class ProgressDisplay:
    """Live progress: a rich bar on a terminal, a plain line every ``every_s`` seconds otherwise.

    Shows env steps (of the budget), env steps/s and updates/s over the last
    interval, the mean training return and the latest evaluation.

    Args:
        total_env_steps: the env-step budget (``None``: no bar total).
        enabled: ``False`` prints nothing.
        tty: force the terminal (rich) or plain mode; default asks the stream.
        every_s: seconds between plain lines.
        stream: where to write (default ``sys.stdout``).
    """

    def __init__(self, total_env_steps: int | None, *, enabled: bool = True, tty: bool | None = None,
                 every_s: float = 10.0, stream: TextIO | None = None):
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stdout
        self.total = total_env_steps
        self.every_s = float(every_s)
        self.tty = bool(tty if tty is not None else getattr(self.stream, "isatty", lambda: False)())
        self._last: tuple[float, int, int] | None = None
        self._last_print = -math.inf
        self._progress = None
        self._task = None
        if self.enabled and self.tty:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("[bold]env steps"), BarColumn(bar_width=20), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("{task.fields[info]}"),
                console=Console(file=self.stream), transient=False, refresh_per_second=4,
            )
            self._task = self._progress.add_task("run", total=total_env_steps, info="")
            self._progress.start()

    def _rates(self, now: float, env_steps: int, updates: int) -> tuple[float | None, float | None]:
        if self._last is None:
            self._last = (now, env_steps, updates)
            return None, None
        t0, e0, u0 = self._last
        dt = now - t0
        if dt <= 0:
            return None, None
        self._last = (now, env_steps, updates)
        return (env_steps - e0) / dt, (updates - u0) / dt

    def update(self, state: RunState, wall_s: float, mean_return: float | None, *, force: bool = False) -> None:
        """Refresh with the current counters (plain mode prints at most every ``every_s`` seconds)."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if not self._progress and not force and now - self._last_print < self.every_s:
            return
        sps, ups = self._rates(now, state.env_steps, state.updates)
        last_eval = state.eval_history[-1][1] if state.eval_history else None
        info = (f"{_fmt(sps, '.0f')} steps/s  {_fmt(ups, '.0f')} upd/s  updates {state.updates}  "
                f"episodes {state.episodes}  return {_fmt(mean_return)}  eval {_fmt(last_eval)}")
        if self._progress is not None:
            short = (f"{_fmt(sps, '.0f')} st/s {_fmt(ups, '.0f')} up/s | ret {_fmt(mean_return)} | "
                     f"eval {_fmt(last_eval)} | upd {state.updates}")
            assert self._task is not None  # added with the progress bar
            self._progress.update(self._task, completed=state.env_steps, info=short)
        else:
            total = f"/{self.total}" if self.total else ""
            print(f"[{wall_s:7.1f}s] env steps {state.env_steps}{total}  {info}", file=self.stream, flush=True)
            self._last_print = now

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


# --------------------------------------------------------------------------------------
# Logs
# --------------------------------------------------------------------------------------
_EPISODE_COLUMNS = ("env_steps", "wall_s", "episode", "return", "length")
_EVAL_COLUMNS = ("env_steps", "wall_s", "mean_return", "std_return", "min_return", "max_return", "episodes")
_METRIC_COLUMNS = ("env_steps", "updates", "episodes", "wall_s", "env_steps_per_s", "updates_per_s",
                   "mean_return", "eval_return", "loss", "q_mean")


def _tensorboard_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorboard") is not None


class RunLogger:
    """CSV logs in ``log_dir`` (``episodes.csv``, ``evals.csv``, ``metrics.csv``) and TensorBoard events.

    A fresh run (``resume_at=None``) starts new CSV files, replacing old ones in
    the same directory, and hides older TensorBoard events (``purge_step=0``).
    A resumed run keeps the rows logged up to the checkpoint (``resume_at``, and
    at most ``keep[name]`` rows of a log: the episodes and evaluations the
    checkpoint counts) and drops later ones (written after that checkpoint by a
    run that then died), so no row is lost and none is logged twice; TensorBoard
    is purged the same way. Rows are then appended.

    Every CSV is (re)started atomically (:func:`~pearl_core.fileio.atomic_write`
    of the header and the kept rows, then opened for appending), so a crash while
    a run starts never loses the rows of the run it resumes. A log whose header is
    not PEARL's refuses the resume before any file is touched; a kept log with
    fewer rows than the checkpoint counts, or a damaged row (e.g. cut short by a
    full disk), is reported with a logged warning.

    Args:
        log_dir: the run's directory (created).
        tensorboard: write TensorBoard events with ``torch.utils.tensorboard``;
            ``None`` = when the ``tensorboard`` package is installed.
        resume_at: env steps of the checkpoint a resumed run continues from.
        keep: per log name (``"episodes"``, ``"evals"``), the number of rows the
            checkpoint counts (its episodes, its evaluations).
        source_dir: where the logs being continued are (default ``log_dir``): a
            run resumed into another directory starts its logs with the rows of
            the checkpoint's own directory.

    Raises:
        SpecError: resuming over a file that is not one of PEARL's logs.
    """

    def __init__(self, log_dir: str | os.PathLike, *, tensorboard: bool | None = None, resume_at: int | None = None,
                 keep: Mapping[str, int] | None = None, source_dir: str | os.PathLike | None = None):
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, LogFile] = {}
        self._writers: dict[str, Any] = {}
        self.tb = None
        source = Path(source_dir) if source_dir is not None else self.log_dir
        logs = (("episodes", _EPISODE_COLUMNS), ("evals", _EVAL_COLUMNS), ("metrics", _METRIC_COLUMNS))
        # Read (and check) every log before rewriting any: a bad one changes nothing.
        kept = {name: (_rows_up_to(source / f"{name}.csv", resume_at, cols, (keep or {}).get(name))
                       if resume_at is not None else []) for name, cols in logs}
        try:
            for name, cols in logs:
                path = self.log_dir / f"{name}.csv"
                buf = io.StringIO()
                w = csv.writer(buf)
                w.writerow(cols)
                w.writerows(kept[name])
                atomic_write(path, buf.getvalue())
                fh = open_append(path)  # its OS errors (a full disk) are FileWriteErrors naming it and the fix
                self._files[name], self._writers[name] = fh, csv.writer(fh)
        except BaseException:
            self.close()
            raise
        if tensorboard is None:
            tensorboard = _tensorboard_available()
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            purge = 0 if resume_at is None else int(resume_at) + 1
            self.tb = SummaryWriter(log_dir=str(self.log_dir / "tensorboard"), purge_step=purge)

    def flush(self, sync: bool = False) -> None:
        """Write buffered rows to the files (``sync``: and to the disk, as before a checkpoint)."""
        for fh in self._files.values():
            fh.sync() if sync else fh.flush()
        if self.tb is not None:
            self.tb.flush()

    def episode(self, env_steps: int, wall_s: float, index: int, episode_return: float, length: int) -> None:
        self._writers["episodes"].writerow((env_steps, f"{wall_s:.3f}", index, f"{episode_return:.6g}", length))
        if self.tb is not None:
            self.tb.add_scalar("episode/return", episode_return, env_steps)
            self.tb.add_scalar("episode/length", length, env_steps)

    def evaluation(self, env_steps: int, wall_s: float, returns: Sequence[float]) -> None:
        r = np.asarray(returns, dtype=np.float64)
        self._writers["evals"].writerow((env_steps, f"{wall_s:.3f}", f"{r.mean():.6g}", f"{r.std():.6g}",
                                         f"{r.min():.6g}", f"{r.max():.6g}", r.size))
        self._files["evals"].flush()
        if self.tb is not None:
            self.tb.add_scalar("eval/mean_return", float(r.mean()), env_steps)

    def metrics(self, state: RunState, wall_s: float, mean_return: float | None,
                env_steps_per_s: float, updates_per_s: float) -> None:
        last_eval = state.eval_history[-1][1] if state.eval_history else None
        m = state.last_metrics
        loss = m.get("loss", m.get("critic_loss"))
        row = (state.env_steps, state.updates, state.episodes, f"{wall_s:.3f}", f"{env_steps_per_s:.1f}",
               f"{updates_per_s:.1f}", _fmt(mean_return, ".6g"), _fmt(last_eval, ".6g"), _fmt(loss, ".6g"),
               _fmt(m.get("q_mean"), ".6g"))
        self._writers["metrics"].writerow(["" if v == "-" else v for v in row])
        for fh in self._files.values():
            fh.flush()
        if self.tb is not None:
            self.tb.add_scalar("perf/env_steps_per_s", env_steps_per_s, state.env_steps)
            self.tb.add_scalar("perf/updates_per_s", updates_per_s, state.env_steps)
            if mean_return is not None:
                self.tb.add_scalar("train/mean_return", mean_return, state.env_steps)
            for k, v in m.items():
                self.tb.add_scalar(f"learner/{k}", v, state.env_steps)

    def close(self) -> None:
        """Close every log (all of them, even when one fails to flush: its error is raised after)."""
        files, failed = list(self._files.values()), None
        self._files.clear()
        for fh in files:
            try:
                fh.close()
            except OSError as exc:
                failed = failed or exc
        if self.tb is not None:
            self.tb.close()
            self.tb = None
        if failed is not None:
            raise failed


def _rows_up_to(path: Path, env_steps: int, columns: Sequence[str], limit: int | None = None) -> list[list[str]]:
    """Data rows of an existing log whose ``env_steps`` column is ``<= env_steps`` (the first ``limit`` of them).

    Raises:
        SpecError: the file's header is not ``columns`` (not one of PEARL's logs).
    """
    name = path.name
    if not path.exists():
        if limit:
            log.warning("resuming at env step %d: %s is missing, so the %d row(s) the checkpoint counts are lost "
                        "from it.", env_steps, path, limit)
        return []
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        rows = [list(columns)]
    if rows[0] != list(columns):
        raise SpecError(f"cannot resume the logs: {str(path)!r} has the header {rows[0][:12]}; expected PEARL's "
                        f"{name} columns {list(columns)}. Nothing was changed. Fix: move that file out of the run's "
                        "directory, then resume again.")
    out, damaged = [], 0
    for row in rows[1:]:
        try:
            ok = len(row) == len(columns) and int(row[0]) >= 0
        except ValueError:
            ok = False
        if not ok:
            damaged += 1
            continue
        if int(row[0]) <= env_steps:
            out.append(row)
    if damaged:
        log.warning("resuming at env step %d: dropped %d damaged row(s) of %s (cut short, e.g. by a full disk).",
                    env_steps, damaged, path)
    if limit is not None:
        if len(out) < limit:
            log.warning("resuming at env step %d: %s holds %d row(s) up to it but the checkpoint counts %d; "
                        "%d row(s) were lost before this run (a run killed before its logs reached the disk?).",
                        env_steps, path, len(out), limit, limit - len(out))
        out = out[:limit]
    return out


def _read_csv(path: Path) -> dict[str, np.ndarray]:
    if not path.exists():
        return {}
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        return {}
    out = {}
    for key in rows[0]:
        out[key] = np.array([float(r[key]) if r[key] not in ("", None) else np.nan for r in rows])
    return out


def plot_learning_curve(log_dir: str | os.PathLike, out_path: str | os.PathLike | None = None, *,
                        title: str | None = None, window: int = 20, threshold: float | None = None) -> Path:
    """Draw training returns (raw and rolling mean) and evaluation means against env steps.

    Reads ``episodes.csv`` and ``evals.csv`` from ``log_dir``; writes a PNG
    (default ``log_dir/learning_curve.png``) with matplotlib's Agg canvas, so no
    display is needed and pyplot's global state is untouched.

    Returns:
        The path of the PNG.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    log_dir = Path(log_dir)
    out = Path(out_path) if out_path is not None else log_dir / "learning_curve.png"
    eps = _read_csv(log_dir / "episodes.csv")
    evs = _read_csv(log_dir / "evals.csv")
    fig = Figure(figsize=(8, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    if eps:
        x, r = eps["env_steps"], eps["return"]
        ax.plot(x, r, color="tab:blue", alpha=0.25, lw=0.8, label="episode return")
        if r.size >= 1:
            k = min(window, r.size)
            rolling = np.convolve(r, np.ones(k) / k, mode="valid")
            ax.plot(x[k - 1:], rolling, color="tab:blue", lw=1.8, label=f"mean of last {k}")
    if evs:
        ax.plot(evs["env_steps"], evs["mean_return"], "o-", color="tab:orange", lw=1.5, label="greedy evaluation")
    if threshold is not None:
        ax.axhline(threshold, color="gray", ls="--", lw=1, label=f"target {threshold:g}")
    if not eps and not evs:
        ax.text(0.5, 0.5, "no finished episodes", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("env steps")
    ax.set_ylabel("return")
    ax.set_title(title or log_dir.name)
    ax.grid(alpha=0.3)
    if eps or evs:
        ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    atomic_write(out, lambda fh: fig.savefig(fh, format="png"), make_parents=True)
    return out
