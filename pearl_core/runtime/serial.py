"""The serial runtime: actors, replay and learner in one process, one loop.

It is the oracle the parallel runtime is tested against, so it is built only
from the shared pieces: the run session (:mod:`pearl_core.runtime.session`),
acting (:mod:`pearl_core.runtime.acting`), the trainer and replay constructors
(:mod:`pearl_core.runtime.wiring`) and the one learner step
(:mod:`pearl_core.runtime.step`). One iteration::

    trainer.env_steps = env_steps
    step = collector.step(trainer)                  # every env steps once, one batched get_action
    insert_buffer.push(replay, *step.transition())  # batched inserts at the running max priority
    for _ in range(schedule.due(env_steps, updates)):   # bursts of train_every * replay_ratio (like SB3)
        learner.step()                              # sample -> update_policy -> per-sample priorities
    evaluate / log / checkpoint when due; stop when a criterion fires

Failures end the run the way a parallel run's worker failures do: a checkpoint of
what is sound first (the trainer's state if it holds no NaN/inf, else a fresh copy
with the last weights checked finite), then the error naming the component —
:class:`~pearl_core.errors.ActorError` (an environment or ``get_action`` raised),
:class:`~pearl_core.errors.DataError` (non-finite data from the environment with
``on_nonfinite="stop"``), :class:`~pearl_core.errors.LearnerError` (an update
raised or made the weights non-finite), :class:`~pearl_core.errors.EvaluationError`,
or :class:`~pearl_core.errors.HostError` (anything else in the loop). With
``on_nonfinite="drop"`` bad transitions are counted (``dropped_nonfinite``),
logged and not stored. SIGINT (Ctrl-C), SIGTERM and SIGHUP end the run cleanly with
the final checkpoint, logs and curve (``stop_reason == "interrupted"``), as in the
parallel runtime.

Usage::

    result = SerialRuntime(RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN",
                                     stop=StopCriteria(eval_return=475, max_env_steps=100_000))).run()
    result = SerialRuntime.from_checkpoint("runs/pearl/checkpoint.pt").run()    # resume
"""

from __future__ import annotations

import dataclasses

import logging
import time
import traceback
from pathlib import Path

from pearl_core.errors import ActorError, CallbackError, DataError, EvaluationError, HostError, LearnerError, \
    WorkerError
from pearl_core.replay.storage import StorageSpec
from pearl_core.runtime.acting import Collector, InsertBuffer, actor_env_seeds
from pearl_core.runtime.vector import make_vector_envs
from pearl_core.runtime.control import RunResult, StopDecision
from pearl_core.runtime.procs import install_stop_handlers, restore_stop_handlers
from pearl_core.runtime.sanity import DropLog, check_state, nonfinite_in
from pearl_core.runtime.session import Runtime, RunSession
from pearl_core.runtime.graphstep import graph_settings
from pearl_core.runtime.step import LearnerStep
from pearl_core.runtime.wiring import build_replay, build_trainer, load_trainer_class, replay_state

log = logging.getLogger("pearl_core.runtime.serial")

__all__ = ["RunResult", "SerialRuntime"]


class SerialRuntime(Runtime):
    """Train in one process; returns a :class:`RunResult`.

    Takes the arguments of :class:`~pearl_core.runtime.session.Runtime`. Of the
    plan it uses ``rm_backend``, ``rm_threads``, ``learner_threads`` (torch
    threads during the run), ``n_actors * envs_per_actor`` environments stepped
    together, and ``insert_batch``.

    Attributes:
        dropped_nonfinite: after (or during) a run, the transitions dropped for
            non-finite values (``on_nonfinite="drop"``), resumed segments included;
            also in the checkpoint's ``extra["dropped_nonfinite"]`` and logged
            (logger ``pearl_core.runtime.data``).

    Raises:
        SpecError: bad config/plan types, an unknown environment, a trainer path
            that does not resolve, or a checkpoint that does not fit.
        TrainerError: the trainer breaks the contract.
    """

    dropped_nonfinite = 0
    #: the name of the signal (SIGINT, SIGTERM, SIGHUP) that is stopping the run, and when it came
    interrupted: str | None = None
    interrupted_at: float | None = None

    def run(self) -> RunResult:
        """Train until a stop criterion fires; write logs, the final checkpoint and the curve.

        SIGINT (Ctrl-C), SIGTERM and SIGHUP end the run cleanly at the end of the iteration under way: the
        final checkpoint, the last metrics row and the curve are written and the result says
        ``stop_reason == "interrupted"``; a second Ctrl-C aborts at once. The handlers are installed only
        when the run is in the main thread, and the previous ones are put back however the run ends.

        Raises (after a checkpoint of what is sound, when the run progressed):
            ActorError, DataError, LearnerError, EvaluationError, HostError: see the module.
        """
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(self.plan.learner_threads)
        run = None
        handlers = install_stop_handlers(self)
        try:  # a run refused while it is built (e.g. another run owns the log directory) restores the threads too
            run = self._open()
            result = run.loop()
            return dataclasses.replace(result, dropped_nonfinite=int(self.dropped_nonfinite))
        finally:
            try:
                if run is not None:
                    run.close()
            finally:
                restore_stop_handlers(handlers)
                torch.set_num_threads(threads)

    def _open(self) -> "_Run":
        """Build one segment of the run (a subclass's runtime builds its own kind)."""
        return _Run(self)


class _Run:
    """One segment of a serial run: built from a :class:`SerialRuntime`, looped once, closed."""

    #: the runtime's name in messages, and its id in checkpoints (``extra["runtime"]``)
    name, runtime_id = "serial runtime", "serial"

    def __init__(self, rt: SerialRuntime):
        cfg, plan, ck = rt.config, rt.plan, rt.checkpoint
        self.cfg, self.plan = cfg, plan
        self.session = session = RunSession(rt, continuous=False)
        st = session.state
        # A resumed segment starts fresh episodes from seeds it has not used before.
        self.collector = None
        try:  # everything that can reject the config, before anything is written to log_dir
            graph = graph_settings(plan)  # a GPU iteration runs as a CUDA graph where it can (graphstep)
            load_trainer_class(cfg.trainer)  # first: a package that registers its environments on import
            self.spaces = obs_space, act_space = self._start_actors(rt)
            self.trainer = build_trainer(cfg, obs_space, act_space, plan=plan)
            self.trainer.use_threads(plan.learner_threads)  # torch's, or the trainer's own (Trainer.use_threads)
            spec = StorageSpec.from_spaces(obs_space, act_space)
            self.replay = build_replay(cfg, plan, spec, state=ck.replay if ck is not None else None)
            self.evaluator = session.make_evaluator()
            if ck is not None:
                self.trainer.load_state_dict(ck.trainer_state)
        except BaseException:
            self._stop_actors()
            session.close()
            raise
        self.learner = LearnerStep(self.trainer, self.replay, cfg.batch_size, updates=st.updates)
        self.learner.use_graph(*graph)
        self.inserts = InsertBuffer(spec, plan.insert_batch)
        self.rt, self.ck = rt, ck
        self.good_weights = None  # the latest weights checked finite (after a burst of updates) ...
        self.good_at = st.updates  # ... and the update they are from
        self.drops = DropLog(base=int(ck.extra.get("dropped_nonfinite", 0)) if ck is not None else 0)
        rt.dropped_nonfinite = self.drops.base
        self.part = "host"  # what the loop is doing: "actor", "learner", "evaluation", "host"
        try:
            session.open()
        except BaseException:  # e.g. the log directory's lock is held: close what was built
            self._stop_actors()
            session.close()
            raise
        session.start_clock()

    def _start_actors(self, rt) -> tuple:
        """Build what steps the environments (here: one :class:`Collector` over every environment of
        the plan, in this process); returns the (observation, action) spaces. A subclass that acts
        elsewhere overrides this, :meth:`act`, :meth:`flush_pending`, :meth:`dropped` and :meth:`_stop_actors`."""
        cfg, plan = self.cfg, self.plan
        # A resumed segment starts fresh episodes from seeds it has not used before.
        seeds = actor_env_seeds(cfg, plan.n_actors * plan.envs_per_actor, first=self.session.state.env_steps)
        env = make_vector_envs(plan.vector_backend, cfg.env_id, seeds, cfg.env_options)
        try:
            self.collector = Collector(env, seeds, env_id=cfg.env_id, on_nonfinite=cfg.on_nonfinite,
                                       n_step=cfg.replay.n_step, random_steps=cfg.random_steps)
        except BaseException:
            env.close()
            raise
        return env.observation_space, env.action_space

    def _stop_actors(self) -> None:
        if self.collector is not None:
            self.collector.close()

    def dropped(self) -> int:
        """Transitions the actors dropped in this segment (``on_nonfinite="drop"``)."""
        return self.collector.dropped if self.collector is not None else 0

    def check(self):
        """The decision to stop (a :class:`~pearl_core.runtime.control.StopDecision`), or ``None``."""
        sig = self.rt.interrupted
        if sig is not None:  # SIGINT / SIGTERM / SIGHUP (SerialRuntime.run): end with the final checkpoint
            return StopDecision("interrupted", f"received {sig}; stopped cleanly", False)
        return self.session.check()

    def act(self) -> None:
        """One step of every environment; stage the transitions; record finished episodes."""
        st = self.session.state
        self.trainer.env_steps = st.env_steps
        out = self.collector.step(self.trainer, explore=True)
        st.env_steps += out.env_steps  # a dropped transition is not an env step of the run
        self.inserts.push(self.replay, *out.transition())
        for ep in out.episodes:
            self.session.record_episode(ep.episode_return, ep.length)
        if out.dropped:
            self.drops.update("the serial runtime", self.collector.dropped, self.collector.last_drop)
            self.rt.dropped_nonfinite = self.drops.total

    def train(self) -> None:
        """Run the learner updates the schedule owes (a burst), each followed by its priority update."""
        st, learner = self.session.state, self.learner
        due = self.session.schedule.due(st.env_steps, st.updates)
        if self.cfg.stop.max_updates is not None:
            due = min(due, self.cfg.stop.max_updates - st.updates)
        if due <= 0:
            return
        self.inserts.flush(self.replay)
        if self.replay.size == 0:  # n-step returns: no window has closed yet; the updates owed wait for rows
            return
        t = time.perf_counter()
        learner.run(due)
        st.learner_time_s += time.perf_counter() - t
        st.updates = learner.updates
        self.good_weights = learner.checked_weights()  # raises DataError naming the update if it diverged
        self.good_at = learner.updates
        self.session.record_metrics(learner.metrics())

    def evaluate(self) -> None:
        t = time.perf_counter()
        res = self.evaluator.evaluate(self.trainer)
        self.session.record_eval(self.session.state.env_steps, res, time.perf_counter() - t, trainer=self.trainer)

    def save(self, trainer=None) -> Path:
        """Checkpoint ``trainer`` (default: the run's, checked finite first) with the replay if asked."""
        self.inserts.flush(self.replay)
        if trainer is None:
            check_state(self.trainer.state_dict(), update=self.learner.updates, owner=f"learner ({self.name})")
            trainer = self.trainer
        self.rt.dropped_nonfinite = self.drops.total
        return self.session.save(trainer, replay_state(self.replay) if self.cfg.save_replay else None,
                                 extra={"runtime": self.runtime_id, "dropped_nonfinite": self.drops.total})

    def flush_pending(self) -> None:
        """n-step returns: the windows still open (at most ``n - 1`` steps per environment, already
        counted as env steps) go into the replay truncated here (``done=False``, bootstrapped with
        ``gamma ** k``), so the replay and the final checkpoint hold every step taken."""
        out = self.collector.flush_pending()
        if out is not None:
            self.inserts.push(self.replay, *out.transition())

    def loop(self) -> RunResult:
        session, st = self.session, self.session.state
        try:
            decision = self.check()
            while decision is None:
                self.part = "actor"
                self.act()
                self.part = "learner"
                self.train()
                if session.monitor.eval_due(st.env_steps):
                    self.part = "evaluation"
                    self.evaluate()
                self.part = "host"
                session.tick(self.save)
                decision = self.check()
            self.flush_pending()
            return session.finish(decision, self.save)
        except Exception as exc:
            err = self._error(exc)
            self._fail(err)
            if err is exc:
                raise
            raise err from exc
        finally:
            self.drops.summary(self.drops.base + self.dropped())
            self.rt.dropped_nonfinite = self.drops.base + self.dropped()

    def _error(self, exc: Exception) -> Exception:
        """The error the run ends with: ``exc`` itself if it already names the component, else a wrapper."""
        learner = isinstance(exc, DataError) and exc.update is not None  # weights or state of an update
        if isinstance(exc, (WorkerError, CallbackError)) or (
                isinstance(exc, DataError) and self.part == "actor" and not learner):
            return exc
        tb, what = traceback.format_exc(), f"{type(exc).__name__}: {exc}"
        st, env = self.session.state, self.cfg.env_id
        if self.part == "learner" or learner:
            return LearnerError(f"the learner failed ({self.name}) after update {self.learner.updates}: {what}. "
                                "Fix: see the traceback (traceback_text).", tb)
        if self.part == "actor":
            return ActorError(f"the serial runtime's actor failed at env step {st.env_steps} (stepping {env!r} with "
                              f"trainer.get_action): {what}. The serial runtime does not restart actors. Fix: make "
                              "the environment and get_action robust (the traceback is in traceback_text).", tb)
        if self.part == "evaluation":
            return EvaluationError(f"the greedy evaluation at env step {st.env_steps} failed "
                                   f"{self.evaluator.doing} of {env!r}: {what}. Fix: make the environment work for "
                                   "the evaluation seeds, or drop the eval_return criterion.", tb)
        return HostError(f"the {self.name} failed while logging, checkpointing or ending the run: {what}.", tb)

    def _fail(self, err: Exception) -> None:
        """Checkpoint what is sound before ``err`` propagates (nothing if the segment made no progress)."""
        log.error("%s", err)
        st = self.session.state
        st.updates = self.learner.updates
        if not self.session.progressed():
            return
        try:
            if nonfinite_in(self.trainer.state_dict()) is None:
                self.save(self.trainer)
                return
            # The update diverged: a fresh copy with the last weights checked finite (or the initial ones).
            fresh = build_trainer(self.cfg, *self.spaces, check=False)
            if self.ck is not None:
                fresh.load_state_dict(self.ck.trainer_state)
            if self.good_weights is not None:
                fresh.set_weights(self.good_weights)
            log.warning("the trainer state holds NaN/inf: the checkpoint holds the last weights checked finite "
                        "(after update %d) instead.", self.good_at)
            self.save(fresh)
        except Exception as exc:  # noqa: BLE001 - the original error matters more
            log.error("could not write a checkpoint after the failure: %s", exc)

    def close(self) -> None:
        self.session.close()
        self._stop_actors()
