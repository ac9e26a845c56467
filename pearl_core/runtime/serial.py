"""The serial runtime: actors, replay and learner in one process, one loop.

It is the oracle the parallel runtime is tested against, so it is built only
from the shared pieces of :mod:`pearl_core.runtime.wiring` (environments,
trainer, replay, update schedule, learner step, collector, evaluator) and
:mod:`pearl_core.runtime.control` (stop criteria, logs, checkpoints). One
iteration::

    trainer.env_steps = env_steps
    step = collector.step(trainer)                  # every env steps once, one batched get_action
    insert_buffer.push(replay, *step.transition())  # batched inserts at the running max priority
    for _ in range(schedule.due(env_steps, updates)):   # bursts of train_every * replay_ratio (like SB3)
        learner_step(trainer, replay, batch_size)   # sample -> update_policy -> per-sample priorities
    evaluate / log / checkpoint when due; stop when a criterion fires

Usage::

    result = SerialRuntime(RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN",
                                     stop=StopCriteria(eval_return=475, max_env_steps=100_000))).run()
    result = SerialRuntime.from_checkpoint("runs/pearl/checkpoint.pt").run()    # resume
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pearl_core.errors import SpecError
from pearl_core.replay import ReplayManager, StorageSpec
from pearl_core.runtime.config import RunConfig, RuntimePlan
from pearl_core.runtime.control import (
    CHECKPOINT_NAME,
    Checkpoint,
    ProgressDisplay,
    RunLogger,
    RunResult,
    RunState,
    StopDecision,
    StopMonitor,
    load_checkpoint,
    plot_learning_curve,
    save_checkpoint,
)
from pearl_core.runtime.wiring import (
    Collector,
    Evaluator,
    InsertBuffer,
    UpdateSchedule,
    actor_env_seeds,
    build_replay,
    build_trainer,
    learner_step,
    make_env,
    replay_state,
)
from pearl_core.trainer import Trainer

__all__ = ["RunResult", "SerialRuntime"]


class SerialRuntime:
    """Train in one process; returns a :class:`RunResult`.

    Args:
        config: what to train (:class:`RunConfig`).
        plan: where (:class:`RuntimePlan`); the serial runtime uses
            ``rm_backend``, ``rm_threads``, ``learner_threads`` (torch threads
            during the run), ``n_actors * envs_per_actor`` environments stepped
            together, and ``insert_batch``. Default: ``RuntimePlan()``.
        resume_from: a checkpoint path (or a loaded :class:`Checkpoint`) to
            continue from: trainer, counters, stop-monitor state, evaluation
            history and, if saved, the replay. Its ``env_id`` and ``trainer``
            must equal ``config``'s; budgets may differ (to extend a run).
        progress: show progress (``None``: yes; rich on a terminal, plain lines otherwise).
        tensorboard: write TensorBoard events (``None``: if installed).
        plot: write ``learning_curve.png`` at the end.
        metrics_every: env steps between rows of ``metrics.csv``.
        display_every_s: seconds between plain progress lines.

    Raises:
        SpecError: bad config/plan types, an unknown environment, a trainer path
            that does not resolve, or a checkpoint that does not fit.
        TrainerError: the trainer breaks the contract.
    """

    def __init__(self, config: RunConfig, plan: RuntimePlan | None = None, *,
                 resume_from: str | os.PathLike | Checkpoint | None = None, progress: bool | None = None,
                 tensorboard: bool | None = None, plot: bool = True, metrics_every: int = 1_000,
                 display_every_s: float = 10.0):
        if not isinstance(config, RunConfig):
            raise SpecError(f"SerialRuntime needs a RunConfig; found {type(config).__name__}. "
                            "Fix: RunConfig(env_id=..., trainer='pkg.mod:Class', ...).")
        plan = RuntimePlan() if plan is None else plan
        if not isinstance(plan, RuntimePlan):
            raise SpecError(f"SerialRuntime needs a RuntimePlan; found {type(plan).__name__}.")
        if isinstance(metrics_every, bool) or not isinstance(metrics_every, int) or metrics_every < 1:
            raise SpecError(f"SerialRuntime: metrics_every = {metrics_every!r}; expected an int >= 1.")
        self.config = config
        self.plan = plan
        self.checkpoint = load_checkpoint(resume_from) if isinstance(resume_from, (str, os.PathLike)) else resume_from
        if self.checkpoint is not None:
            _check_resumable(config, self.checkpoint)
        self.progress = True if progress is None else bool(progress)
        self.tensorboard = tensorboard
        self.plot = plot
        self.metrics_every = metrics_every
        self.display_every_s = display_every_s

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike, config: RunConfig | None = None,
                        plan: RuntimePlan | None = None, **kwargs: Any) -> "SerialRuntime":
        """Resume the run saved at ``path`` with its own config and plan (or the ones given)."""
        ck = load_checkpoint(path)
        return cls(config or ck.config, plan or ck.plan, resume_from=ck, **kwargs)

    def run(self) -> RunResult:
        """Train until a stop criterion fires; write logs, the final checkpoint and the curve."""
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(self.plan.learner_threads)
        run = _Run(self)
        try:
            return run.loop()
        finally:
            run.close()
            torch.set_num_threads(threads)


def _check_resumable(config: RunConfig, ck: Checkpoint) -> None:
    for name in ("env_id", "trainer"):
        if getattr(config, name) != getattr(ck.config, name):
            raise SpecError(
                f"cannot resume: the checkpoint's {name} is {getattr(ck.config, name)!r} but the config's is "
                f"{getattr(config, name)!r}. Fix: resume with the checkpoint's config "
                "(SerialRuntime.from_checkpoint(path)) or start a new run."
            )
    if ck.replay is not None and int(ck.replay["capacity"]) != config.replay.capacity:
        raise SpecError(
            f"cannot resume: the checkpoint's replay has capacity {ck.replay['capacity']} but the config asks for "
            f"{config.replay.capacity}. Fix: keep replay.capacity unchanged when resuming."
        )


class _Run:
    """One segment of a run: built from a :class:`SerialRuntime`, looped once, closed."""

    def __init__(self, rt: SerialRuntime):
        self._called = time.perf_counter()  # startup_s: from here to the run clock's start
        cfg, plan, ck = rt.config, rt.plan, rt.checkpoint
        self.rt, self.cfg, self.plan = rt, cfg, plan
        self.state = RunState.from_dict(ck.state.to_dict()) if ck is not None else RunState()
        n_envs = plan.n_actors * plan.envs_per_actor
        # A resumed segment starts fresh episodes from seeds it has not used before.
        seeds = actor_env_seeds(cfg, n_envs, first=self.state.env_steps)
        envs: list = []
        self.evaluator = None
        try:  # everything that can reject the config, before anything is written to log_dir
            envs += [make_env(cfg.env_id, s) for s in seeds]
            self.collector = Collector(envs, seeds)
            env = envs[0]
            self.trainer: Trainer = build_trainer(cfg, env.observation_space, env.action_space)
            spec = StorageSpec.from_spaces(env.observation_space, env.action_space)
            self.replay: ReplayManager = build_replay(cfg, plan, spec, state=ck.replay if ck is not None else None)
            self.monitor = StopMonitor(cfg.stop)
            self.evaluator = Evaluator.for_config(cfg) if self.monitor.evaluates else None
            if ck is not None:
                self.trainer.load_state_dict(ck.trainer_state)
                self.monitor.load_state_dict(ck.monitor)
                if self.evaluator is not None:
                    self.evaluator.evaluations = len(self.state.eval_history)
        except BaseException:
            for e in envs + (self.evaluator.envs if self.evaluator is not None else []):
                e.close()
            raise
        self.inserts = InsertBuffer(spec, plan.insert_batch)
        self.log_dir = Path(cfg.log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.log_dir / "config.json").write_text(cfg.to_json(indent=2))
        (self.log_dir / "plan.json").write_text(plan.to_json(indent=2))
        if ck is not None and ck.replay is None and self.state.env_steps:
            # The replay was not saved: refill learning_starts transitions before updating again.
            self.schedule = UpdateSchedule.from_config(cfg, base_env_steps=self.state.env_steps,
                                                       base_updates=self.state.updates)
        else:
            self.schedule = UpdateSchedule.from_config(cfg)
        self.logger = RunLogger(self.log_dir, tensorboard=rt.tensorboard,
                                resume_at=self.state.env_steps if ck is not None else None)
        self.display = ProgressDisplay(cfg.stop.max_env_steps, enabled=rt.progress, every_s=rt.display_every_s)
        self._wall_base = self.state.wall_time_s
        self._t0 = time.perf_counter()
        self._next_metrics = (self.state.env_steps // rt.metrics_every + 1) * rt.metrics_every
        every = cfg.checkpoint_every
        self._next_checkpoint = (self.state.env_steps // every + 1) * every if every else None
        self._rate_mark = (self._t0, self.state.env_steps, self.state.updates)
        self.checkpoint_path: Path | None = None

    # -- time ----------------------------------------------------------------------
    def wall(self) -> float:
        return self._wall_base + (time.perf_counter() - self._t0)

    # -- one piece per concern -------------------------------------------------------
    def act(self) -> None:
        """One step of every environment; stage the transitions; record finished episodes."""
        st = self.state
        self.trainer.env_steps = st.env_steps
        out = self.collector.step(self.trainer, explore=True)
        st.env_steps += self.collector.n_envs
        self.inserts.push(self.replay, *out.transition())
        if out.episodes:
            wall = self.wall()
            for ep in out.episodes:
                st.episodes += 1
                self.monitor.record_episode(ep.episode_return)
                self.logger.episode(st.env_steps, wall, st.episodes, ep.episode_return, ep.length)

    def train(self) -> None:
        """Run the learner updates the schedule owes (a burst), each followed by its priority update."""
        st = self.state
        due = self.schedule.due(st.env_steps, st.updates)
        if self.cfg.stop.max_updates is not None:
            due = min(due, self.cfg.stop.max_updates - st.updates)
        if due <= 0:
            return
        self.inserts.flush(self.replay)
        t = time.perf_counter()
        result = None
        for _ in range(due):
            result = learner_step(self.trainer, self.replay, self.cfg.batch_size)
        st.learner_time_s += time.perf_counter() - t
        st.updates += due
        st.last_metrics = {k: float(v) for k, v in result.metrics.items()}

    def evaluate(self) -> None:
        st = self.state
        t = time.perf_counter()
        res = self.evaluator.evaluate(self.trainer)
        st.eval_time_s += time.perf_counter() - t
        wall = self.wall()
        st.eval_history.append((st.env_steps, res.mean_return, wall))
        self.monitor.record_eval(st.env_steps, res.mean_return)
        self.logger.evaluation(st.env_steps, wall, res.returns)

    def log_metrics(self) -> None:
        now, st = time.perf_counter(), self.state
        t0, e0, u0 = self._rate_mark
        dt = max(now - t0, 1e-9)
        self._rate_mark = (now, st.env_steps, st.updates)
        st.wall_time_s = self.wall()
        self.logger.metrics(st, st.wall_time_s, self.monitor.recent_mean(), (st.env_steps - e0) / dt,
                            (st.updates - u0) / dt)

    def save(self) -> Path:
        self.inserts.flush(self.replay)
        self.state.wall_time_s = self.wall()
        path = self.log_dir / CHECKPOINT_NAME
        replay = replay_state(self.replay) if self.cfg.save_replay else None
        save_checkpoint(path, trainer=self.trainer, state=self.state, monitor=self.monitor, config=self.cfg,
                        plan=self.plan, replay=replay)
        self.checkpoint_path = path
        return path

    # -- the loop ----------------------------------------------------------------------
    def loop(self) -> RunResult:
        st, cfg = self.state, self.cfg
        decision = self.monitor.check(st.env_steps, st.updates, self.wall())
        iteration = 0
        while decision is None:
            self.act()
            self.train()
            if self.monitor.eval_due(st.env_steps):
                self.evaluate()
            if st.env_steps >= self._next_metrics:
                self.log_metrics()
                self._next_metrics = (st.env_steps // self.rt.metrics_every + 1) * self.rt.metrics_every
            if self._next_checkpoint is not None and st.env_steps >= self._next_checkpoint:
                self.save()
                self._next_checkpoint = (st.env_steps // cfg.checkpoint_every + 1) * cfg.checkpoint_every
            iteration += 1
            if iteration % 64 == 0:
                self.display.update(st, self.wall(), self.monitor.recent_mean())
            decision = self.monitor.check(st.env_steps, st.updates, self.wall())
        return self.finish(decision)

    def finish(self, decision: StopDecision) -> RunResult:
        st = self.state
        if decision.solved and st.solved_at_env_steps is None:
            st.solved_at_env_steps = st.env_steps
            st.solved_at_wall_s = self.wall()
        self.log_metrics()
        self.display.update(st, self.wall(), self.monitor.recent_mean(), force=True)
        path = self.save()
        if self.rt.plot:
            s = self.cfg.stop
            plot_learning_curve(self.log_dir, title=f"{self.cfg.env_id} — {self.cfg.trainer.split(':')[-1]}",
                                window=s.window, threshold=s.eval_return if s.eval_return is not None else s.mean_return)
        return RunResult.from_state(st, decision, batch_size=self.cfg.batch_size,
                                    final_mean_return=self.monitor.recent_mean(), log_dir=str(self.log_dir),
                                    checkpoint_path=str(path), startup_s=self._t0 - self._called)

    def close(self) -> None:
        self.display.close()
        self.logger.close()
        self.collector.close()
        if self.evaluator is not None:
            self.evaluator.close()
