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

Usage::

    result = SerialRuntime(RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN",
                                     stop=StopCriteria(eval_return=475, max_env_steps=100_000))).run()
    result = SerialRuntime.from_checkpoint("runs/pearl/checkpoint.pt").run()    # resume
"""

from __future__ import annotations

import time
from pathlib import Path

from pearl_core.envs import make_env
from pearl_core.replay.storage import StorageSpec
from pearl_core.runtime.acting import Collector, InsertBuffer, actor_env_seeds
from pearl_core.runtime.control import RunResult
from pearl_core.runtime.session import Runtime, RunSession
from pearl_core.runtime.step import LearnerStep
from pearl_core.runtime.wiring import build_replay, build_trainer, replay_state

__all__ = ["RunResult", "SerialRuntime"]


class SerialRuntime(Runtime):
    """Train in one process; returns a :class:`RunResult`.

    Takes the arguments of :class:`~pearl_core.runtime.session.Runtime`. Of the
    plan it uses ``rm_backend``, ``rm_threads``, ``learner_threads`` (torch
    threads during the run), ``n_actors * envs_per_actor`` environments stepped
    together, and ``insert_batch``.

    Raises:
        SpecError: bad config/plan types, an unknown environment, a trainer path
            that does not resolve, or a checkpoint that does not fit.
        TrainerError: the trainer breaks the contract.
    """

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


class _Run:
    """One segment of a serial run: built from a :class:`SerialRuntime`, looped once, closed."""

    def __init__(self, rt: SerialRuntime):
        cfg, plan, ck = rt.config, rt.plan, rt.checkpoint
        self.cfg, self.plan = cfg, plan
        self.session = session = RunSession(rt, continuous=False)
        st = session.state
        # A resumed segment starts fresh episodes from seeds it has not used before.
        seeds = actor_env_seeds(cfg, plan.n_actors * plan.envs_per_actor, first=st.env_steps)
        envs: list = []
        self.collector = None
        try:  # everything that can reject the config, before anything is written to log_dir
            envs += [make_env(cfg.env_id, s) for s in seeds]
            self.collector = Collector(envs, seeds)
            env = envs[0]
            self.trainer = build_trainer(cfg, env.observation_space, env.action_space, plan=plan)
            spec = StorageSpec.from_spaces(env.observation_space, env.action_space)
            self.replay = build_replay(cfg, plan, spec, state=ck.replay if ck is not None else None)
            self.evaluator = session.make_evaluator()
            if ck is not None:
                self.trainer.load_state_dict(ck.trainer_state)
        except BaseException:
            for e in envs:
                e.close()
            session.close()
            raise
        self.learner = LearnerStep(self.trainer, self.replay, cfg.batch_size, updates=st.updates)
        self.inserts = InsertBuffer(spec, plan.insert_batch)
        session.open()
        session.start_clock()

    def act(self) -> None:
        """One step of every environment; stage the transitions; record finished episodes."""
        st = self.session.state
        self.trainer.env_steps = st.env_steps
        out = self.collector.step(self.trainer, explore=True)
        st.env_steps += self.collector.n_envs
        self.inserts.push(self.replay, *out.transition())
        for ep in out.episodes:
            self.session.record_episode(ep.episode_return, ep.length)

    def train(self) -> None:
        """Run the learner updates the schedule owes (a burst), each followed by its priority update."""
        st, learner = self.session.state, self.learner
        due = self.session.schedule.due(st.env_steps, st.updates)
        if self.cfg.stop.max_updates is not None:
            due = min(due, self.cfg.stop.max_updates - st.updates)
        if due <= 0:
            return
        self.inserts.flush(self.replay)
        t = time.perf_counter()
        for _ in range(due):
            learner.step()
        st.learner_time_s += time.perf_counter() - t
        st.updates = learner.updates
        self.session.record_metrics(learner.last.metrics)

    def evaluate(self) -> None:
        t = time.perf_counter()
        res = self.evaluator.evaluate(self.trainer)
        self.session.record_eval(self.session.state.env_steps, res, time.perf_counter() - t)

    def save(self) -> Path:
        self.inserts.flush(self.replay)
        return self.session.save(self.trainer, replay_state(self.replay) if self.cfg.save_replay else None)

    def loop(self) -> RunResult:
        session, st = self.session, self.session.state
        decision = session.check()
        while decision is None:
            self.act()
            self.train()
            if session.monitor.eval_due(st.env_steps):
                self.evaluate()
            session.tick(self.save)
            decision = session.check()
        return session.finish(decision, self.save)

    def close(self) -> None:
        self.session.close()
        if self.collector is not None:
            self.collector.close()
