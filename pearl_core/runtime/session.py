"""The run session: the bookkeeping every runtime shares, and the runtimes' common constructor.

A runtime (:class:`~pearl_core.runtime.serial.SerialRuntime`, the oracle, or
:class:`~pearl_core.runtime.parallel.ParallelRuntime`) decides *how* steps and
updates happen; one :class:`RunSession` keeps *what happened* and when the run
must log, checkpoint, evaluate or stop::

    session = RunSession(runtime, continuous=False)     # counters, stop monitor, update schedule
    evaluator = session.make_evaluator()                # None when no criterion evaluates
    ...build environments, trainer, replay (anything that can reject the config)...
    session.open()                                      # run lock, config.json, plan.json, logs, progress
    session.start_clock()
    while (decision := session.check()) is None:
        ...act: session.state.env_steps += n; session.record_episode(ret, length)...
        ...train: session.state.updates = step.updates...
        session.tick(save)                              # metrics row, checkpoint, progress when due
    return session.finish(decision, save)               # final checkpoint, curve, RunResult

A resumed session continues the checkpoint's counters, stop-monitor state,
evaluation count and logs (the rows up to the checkpoint are kept, exactly once;
the logs are flushed to the disk before every checkpoint, so a checkpoint never
counts a row the disk does not hold).

One run per ``log_dir`` (:mod:`pearl_core.runtime.runlock`): a session refuses at
once (on construction, before the runtime builds anything) a directory another
run holds; :meth:`RunSession.open` takes the lock before it writes anything
there, and :meth:`RunSession.close` releases it however the run ends.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from pearl_core.callbacks import EvalEvent, RunView, call, load_callbacks
from pearl_core.errors import CallbackError, SpecError
from pearl_core.fileio import atomic_write
from pearl_core.runtime.acting import EvalResult, Evaluator
from pearl_core.runtime.checkpoint import CHECKPOINT_NAME, Checkpoint, check_modules, check_network_shapes, \
    check_resumable, load_checkpoint, save_checkpoint
from pearl_core.runtime.config import RunConfig, RuntimePlan
from pearl_core.runtime.control import (
    ProgressDisplay,
    RunLogger,
    RunResult,
    RunState,
    StopDecision,
    StopMonitor,
    plot_learning_curve,
)
from pearl_core.runtime.machine import check_machine
from pearl_core.runtime.vector import check_vector_backend
from pearl_core.runtime.rundir import fresh_log_dir, same_dir
from pearl_core.runtime.runlock import RunLock, check_free
from pearl_core.runtime.step import UpdateSchedule

__all__ = ["DISPLAY_EVERY_S", "RunSession", "Runtime", "int_at_least"]

#: Seconds between refreshes of the live progress display.
DISPLAY_EVERY_S = 0.25


def int_at_least(owner: str, name: str, value: Any, low: int) -> None:
    """Raise :class:`SpecError` unless ``value`` is an int (not a bool) ``>= low``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise SpecError(f"{owner}: {name} = {value!r}; expected an int >= {low}.")


class Runtime:
    """What both runtimes take and check on construction; subclasses implement :meth:`run`.

    Args:
        config: what to train (:class:`RunConfig`).
        plan: where and how (:class:`RuntimePlan`; default ``RuntimePlan()``).
        resume_from: a checkpoint path (or a loaded :class:`Checkpoint`) to
            continue from: trainer, counters, stop-monitor state, evaluation
            history, logs and, if saved, the replay. Its ``env_id`` and ``trainer``
            must equal ``config``'s; budgets may differ (to extend a run).
            A run that is not resuming in place never writes into a ``log_dir``
            holding an earlier run: it takes the first free ``<log_dir>-<n>``
            (:mod:`pearl_core.runtime.rundir`; ``self.config.log_dir`` says which).
        progress: show progress (``None``: yes; rich on a terminal, plain lines otherwise).
        tensorboard: write TensorBoard events (``None``: if installed).
        plot: write ``learning_curve.png`` at the end.
        metrics_every: env steps between rows of ``metrics.csv``.
        display_every_s: seconds between plain progress lines.
        callbacks: :mod:`pearl_core.callbacks` objects (or ``"pkg.module:Name"`` strings), called
            in this process at the run's start, metrics rows, evaluations, checkpoints and end.

    Raises:
        SpecError: bad config/plan types or options, or a checkpoint that does not fit.
    """

    #: whether actors run in processes of their own (the parallel runtime)
    _actor_processes = False

    def __init__(self, config: RunConfig, plan: RuntimePlan | None = None, *,
                 resume_from: str | os.PathLike | Checkpoint | None = None, progress: bool | None = None,
                 tensorboard: bool | None = None, plot: bool = True, metrics_every: int = 1_000,
                 display_every_s: float = 10.0, callbacks: Sequence[Any] = ()):
        me = type(self).__name__
        if not isinstance(config, RunConfig):
            raise SpecError(f"{me} needs a RunConfig; found {type(config).__name__}. "
                            "Fix: RunConfig(env_id=..., trainer='pkg.mod:Class', ...).")
        plan = RuntimePlan() if plan is None else plan
        if not isinstance(plan, RuntimePlan):
            raise SpecError(f"{me} needs a RuntimePlan; found {type(plan).__name__}.")
        int_at_least(me, "metrics_every", metrics_every, 1)
        from_path = isinstance(resume_from, (str, os.PathLike))
        checkpoint = load_checkpoint(resume_from) if from_path else resume_from
        #: The directory of the checkpoint file resumed from (``None``: none, or a loaded Checkpoint).
        self.checkpoint_dir = Path(resume_from).parent if from_path else None
        valid_dir = isinstance(config.log_dir, str) and "\0" not in config.log_dir  # else check_machine says why
        in_place = checkpoint is not None and (same_dir(checkpoint.config.log_dir, config.log_dir)
                                               or same_dir(self.checkpoint_dir, config.log_dir))
        # A new run never replaces an old one's files (pearl_core.runtime.rundir); a live run's directory is
        # refused when the run starts (RunSession).
        if valid_dir and not in_place and not _held(config.log_dir):
            config = dataclasses.replace(config, log_dir=fresh_log_dir(config.log_dir))
        check_machine(config, plan)  # memory, cores, batch vs capacity, log_dir: before any worker or file
        check_vector_backend(plan.vector_backend, config.env_id, config.env_kwargs, config.env_wrappers)
        if plan.vector_backend == "gym-async" and self._actor_processes:
            raise SpecError(f"{me}: RuntimePlan.vector_backend = 'gym-async' cannot run in actor processes (they "
                            "are daemon processes, which may not start AsyncVectorEnv's subprocesses). Fix: use "
                            "vector_backend='gym-sync' or 'envpool' here, or 'gym-async' with SerialRuntime.")
        self.config = config
        self.plan = plan
        self.checkpoint = checkpoint
        if self.checkpoint is not None:
            check_resumable(config, self.checkpoint)
            check_network_shapes(config, self.checkpoint)
        self.callbacks = load_callbacks(callbacks, config)
        self.progress = True if progress is None else bool(progress)
        self.tensorboard = tensorboard
        self.plot = plot
        self.metrics_every = metrics_every
        self.display_every_s = display_every_s

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike, config: RunConfig | None = None,
                        plan: RuntimePlan | None = None, *, trust_modules: bool = False, **kwargs: Any):
        """Resume the run saved at ``path`` with its own config and plan (or the ones given).

        With the checkpoint's own config, the modules it names (trainer, ``module:EnvId``, wrapper
        paths) are imported only if they are PEARL's own or ``trust_modules=True``: importing a
        module runs its code (:func:`~pearl_core.runtime.checkpoint.check_modules`).
        """
        ck = load_checkpoint(path)
        if config is None:
            check_modules(ck, trust_modules=trust_modules, path=path)
        return cls(config or ck.config, plan or ck.plan, resume_from=ck, **kwargs)

    def run(self) -> RunResult:  # pragma: no cover - abstract
        raise NotImplementedError


def _held(log_dir: str) -> bool:
    """Whether another live run holds ``log_dir`` (the run session refuses it when the run starts)."""
    try:
        check_free(Path(log_dir))
    except SpecError:
        return True
    return False


@dataclasses.dataclass
class _Marks:
    next_metrics: int
    next_checkpoint: int | None
    rate: tuple[float, int, int]
    display: float = 0.0


class RunSession:
    """Run state, stop checks, evaluation records, logs and progress, schedule and cadences of one segment.

    Args:
        runtime: the runtime driving it (config, plan, checkpoint and options).
        continuous: the update schedule's mode (``False``: SB3-style bursts, the
            serial runtime; ``True``: the parallel runtime).
        title: the learning curve's title suffix (e.g. ``"(parallel, setting 2)"``).

    Attributes:
        state: the run's counters (a copy of the checkpoint's when resuming).
        monitor: the stop monitor.
        schedule: updates owed per env step (a resume whose replay was not saved
            refills ``learning_starts`` transitions before updating again).
        checkpoint_path: the latest checkpoint written, if any.
    """

    def __init__(self, runtime: Runtime, *, continuous: bool, title: str = ""):
        self._called = time.perf_counter()  # startup_s: from here to the run clock's start
        cfg, ck = runtime.config, runtime.checkpoint
        self.runtime, self.config, self.plan, self.resumed = runtime, cfg, runtime.plan, ck is not None
        self.title = title
        # A loaded checkpoint is never mutated: the run counts on a copy of its counters.
        self.state = RunState.from_dict(ck.state.to_dict()) if ck is not None else RunState()
        self.monitor = StopMonitor(cfg.stop)
        self.learner_phases: dict[str, float] = {}  # the setting-2 worker's (Progress.phases)
        if ck is not None:
            self.monitor.load_state_dict(ck.monitor)
        if ck is not None and ck.replay is None and self.state.env_steps:
            self.schedule = UpdateSchedule.from_config(cfg, continuous=continuous, base_env_steps=self.state.env_steps,
                                                       base_updates=self.state.updates)
        else:
            self.schedule = UpdateSchedule.from_config(cfg, continuous=continuous)
        self.log_dir = Path(cfg.log_dir)
        check_free(self.log_dir)  # refuse a directory another run holds, before anything is built
        self.lock: RunLock | None = None
        self.logger: RunLogger | None = None
        self.display: ProgressDisplay | None = None
        self.evaluator: Evaluator | None = None
        self.checkpoint_path: Path | None = None
        self.start_counts = (self.state.env_steps, self.state.updates)
        self.callbacks = list(getattr(runtime, "callbacks", ()))
        self.view = RunView(self)
        self._stop_reason: str | None = None
        self._wall_base = self.state.wall_time_s
        self._t0 = time.perf_counter()
        self._marks = self._new_marks()

    # -- building ------------------------------------------------------------------------
    def make_evaluator(self) -> Evaluator | None:
        """The run's greedy evaluator (``None`` when no stop criterion evaluates); closed by :meth:`close`."""
        if self.monitor.evaluates and self.evaluator is None:
            self.evaluator = Evaluator.for_config(self.config)
            self.evaluator.evaluations = len(self.state.eval_history)
        return self.evaluator

    def open(self) -> None:
        """Lock ``log_dir``, write ``config.json`` and ``plan.json``, open the logs and the progress display.

        Call it after everything that can reject the config, so that a run that
        fails to start writes nothing to ``log_dir``. If it fails itself, it
        releases what it took (the lock, the logs) before the error propagates.

        Raises:
            SpecError: another run holds ``log_dir``, or a resumed log is not PEARL's.
        """
        rt, st = self.runtime, self.state
        self.lock = RunLock.acquire(self.log_dir)  # before anything is written to the directory
        try:
            atomic_write(self.log_dir / "config.json", self.config.to_json(indent=2))
            atomic_write(self.log_dir / "plan.json", self.plan.to_json(indent=2))
            resume = self.resumed
            self.logger = RunLogger(self.log_dir, tensorboard=rt.tensorboard,
                                    resume_at=st.env_steps if resume else None,
                                    keep={"episodes": st.episodes, "evals": len(st.eval_history)} if resume else None,
                                    source_dir=self._resume_source())
            self.display = ProgressDisplay(self.config.stop.max_env_steps, enabled=rt.progress,
                                           every_s=rt.display_every_s)
            self._notify("on_start", self.view)
        except BaseException:
            self.close()
            raise

    def _resume_source(self) -> Path | None:
        """Where the logs this resumed run continues are, when not in ``log_dir`` (resumed into another directory).

        The checkpoint's own run directory (its config's ``log_dir``), else the
        checkpoint file's directory, whichever holds PEARL's logs.
        """
        ck = self.runtime.checkpoint
        if ck is None or Path(ck.config.log_dir).resolve() == self.log_dir.resolve():
            return None
        for src in (Path(ck.config.log_dir), getattr(self.runtime, "checkpoint_dir", None)):
            if src is not None and (src / "episodes.csv").is_file() and src.resolve() != self.log_dir.resolve():
                return src
        return None

    def start_clock(self) -> None:
        """Start the run clock (``wall``); what came before it is the segment's start-up time."""
        self._t0 = time.perf_counter()
        self._marks = self._new_marks()

    def _new_marks(self) -> _Marks:
        every, e = self.config.checkpoint_every, self.state.env_steps
        return _Marks(next_metrics=(e // self.runtime.metrics_every + 1) * self.runtime.metrics_every,
                      next_checkpoint=(e // every + 1) * every if every else None,
                      rate=(self._t0, e, self.state.updates))

    def wall(self) -> float:
        """Seconds of run time, resumed segments included."""
        return self._wall_base + (time.perf_counter() - self._t0)

    @property
    def startup_s(self) -> float:
        return self._t0 - self._called

    # -- records ---------------------------------------------------------------------------
    def record_episode(self, episode_return: float, length: int) -> None:
        """A finished training episode, at the current env-step count."""
        st = self.state
        st.episodes += 1
        self.monitor.record_episode(episode_return)
        self.logger.episode(st.env_steps, self.wall(), st.episodes, episode_return, length)

    def record_eval(self, env_steps: int, result: EvalResult, took_s: float, trainer: Any = None) -> None:
        """A finished greedy evaluation of the policy as it was at ``env_steps`` (``trainer``: the one evaluated,
        which callbacks may save)."""
        st, wall = self.state, self.wall()
        st.eval_time_s += took_s
        st.eval_history.append((env_steps, result.mean_return, wall))
        self.monitor.record_eval(env_steps, result.mean_return)
        self.logger.evaluation(env_steps, wall, result.returns)
        target = self.config.stop.eval_return
        if target is not None and result.mean_return >= target and st.solved_at_env_steps is None:
            st.solved_at_env_steps, st.solved_at_wall_s = env_steps, wall
        if self.callbacks:
            save = None if trainer is None else (lambda path: save_checkpoint(
                path, trainer=trainer, state=self.state, monitor=self.monitor, config=self.config, plan=self.plan))
            self._notify("on_evaluation", self.view,
                 EvalEvent(int(env_steps), result.mean_return, result.std_return, tuple(result.returns), save))

    def record_metrics(self, metrics: Mapping[str, Any] | None, learner_s: float | None = None) -> None:
        """The learner's latest metrics and (if given) its total time in ``update_policy``."""
        if metrics:
            self.state.last_metrics = {k: float(v) for k, v in metrics.items()}
        if learner_s is not None:
            self.state.learner_time_s = learner_s

    def log_metrics(self) -> None:
        """A row of ``metrics.csv`` with the rates since the previous row."""
        now, st = time.perf_counter(), self.state
        t0, e0, u0 = self._marks.rate
        dt = max(now - t0, 1e-9)
        self._marks.rate = (now, st.env_steps, st.updates)
        st.wall_time_s = self.wall()
        self.logger.metrics(st, st.wall_time_s, self.monitor.recent_mean(), (st.env_steps - e0) / dt,
                            (st.updates - u0) / dt)
        self._notify("on_step", self.view)

    # -- cadence, stop, checkpoints ----------------------------------------------------------
    def tick(self, save: Callable[[], Path]) -> None:
        """Log a metrics row, write a checkpoint (``save()``) and refresh progress, each when due."""
        st, m = self.state, self._marks
        if st.env_steps >= m.next_metrics:
            self.log_metrics()
            every = self.runtime.metrics_every
            m.next_metrics = (st.env_steps // every + 1) * every
        if m.next_checkpoint is not None and st.env_steps >= m.next_checkpoint:
            save()
            every = self.config.checkpoint_every
            m.next_checkpoint = (st.env_steps // every + 1) * every
        now = time.perf_counter()
        if now - m.display > DISPLAY_EVERY_S:
            self.display.update(st, self.wall(), self.monitor.recent_mean())
            m.display = now

    def check(self) -> StopDecision | None:
        """The stop criterion that fires now, if any (a callback's stop request after the monitor's)."""
        st = self.state
        decision = self.monitor.check(st.env_steps, st.updates, self.wall())
        if decision is None and self._stop_reason is not None:
            return StopDecision("callback", self._stop_reason, False)
        return decision

    def _notify(self, hook: str, *args: Any) -> None:
        """Call ``hook`` of every callback; once one raised, the callbacks are off (the failure path's own
        checkpoint must not call the failing one again) and its :class:`CallbackError` propagates."""
        if not self.callbacks:
            return
        try:
            call(self.callbacks, hook, *args)
        except CallbackError:
            self.callbacks = []
            raise

    def request_stop(self, reason: str) -> None:
        """End the run at the next :meth:`check` (a callback's :meth:`~pearl_core.callbacks.RunView.stop`)."""
        if self._stop_reason is None:
            self._stop_reason = reason

    def save(self, trainer, replay: Mapping[str, Any] | None = None,
             extra: Mapping[str, Any] | None = None) -> Path:
        """Checkpoint ``trainer`` with the counters, monitor, config, plan and (if given) the replay contents."""
        self.state.wall_time_s = self.wall()
        if self.logger is not None:
            self.logger.flush(sync=True)  # every row the checkpoint counts is on the disk before it
        path = save_checkpoint(self.log_dir / CHECKPOINT_NAME, trainer=trainer, state=self.state,
                               monitor=self.monitor, config=self.config, plan=self.plan, replay=replay, extra=extra)
        self.checkpoint_path = path
        self._notify("on_checkpoint", self.view, path)
        return path

    def progressed(self) -> bool:
        """Whether this segment took a step or an update (a failed start has nothing new to save)."""
        return (self.state.env_steps, self.state.updates) != self.start_counts

    def finish(self, decision: StopDecision, save: Callable[[], Path]) -> RunResult:
        """End the segment: final checkpoint (``save()``), a last metrics row, the curve; the result."""
        st = self.state
        if decision.solved and st.solved_at_env_steps is None:
            st.solved_at_env_steps = st.env_steps
            st.solved_at_wall_s = self.wall()
        path = save()
        self.log_metrics()
        self.display.update(st, self.wall(), self.monitor.recent_mean(), force=True)
        cfg = self.config
        if self.runtime.plot:
            s = cfg.stop
            title = f"{cfg.env_id} — {cfg.trainer.split(':')[-1]}" + (f" {self.title}" if self.title else "")
            plot_learning_curve(self.log_dir, title=title, window=s.window,
                                threshold=s.eval_return if s.eval_return is not None else s.mean_return)
        result = RunResult.from_state(st, decision, batch_size=cfg.batch_size,
                                      final_mean_return=self.monitor.recent_mean(), log_dir=str(self.log_dir),
                                      checkpoint_path=str(path), startup_s=self.startup_s,
                                      learner_phases_s=self.learner_phases)
        self._notify("on_end", self.view, result)
        return result

    def close(self) -> None:
        """Close the display, the logs and the evaluator's environments, then release ``log_dir`` (idempotent)."""
        parts = (self.display, self.logger, self.evaluator)
        self.display = self.logger = self.evaluator = None
        lock, self.lock = self.lock, None
        error: BaseException | None = None
        for part in parts:
            if part is not None:
                try:
                    part.close()
                except BaseException as exc:  # noqa: BLE001 - the lock is released anyway; re-raised below
                    error = error or exc
        if lock is not None:
            lock.release()
        if error is not None:
            raise error
