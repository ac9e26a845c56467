"""The host process of a parallel run: shared memory, worker processes, and the loop that moves messages.

One :class:`Host` is one segment of a :class:`~pearl_core.runtime.parallel.ParallelRuntime`
run. It owns a :class:`~pearl_core.runtime.session.RunSession` (counters, stop
checks, logs, checkpoints), the shared memory of the run, the actor processes
and the learner-side process, and delegates what depends on the protocol
setting to its role (:mod:`pearl_core.runtime.roles`)::

    start: learner process (role.target), actor processes; wait until all are ready
    loop:
        pump: wait for any DCQ / LDQ message or process exit, handle all ready
              Experience -> count steps, record episodes, role.deliver(slot)
              LDQ        -> role.on_reply (Trained / Progress), state replies, failures
        set budgets (actors' env budget; the role's update budget)
        role.feed()  (setting 1: sample batches into the learner's slots)
        evaluation (a host thread), session.tick (metrics, checkpoints, progress)
        stop when the session's criterion fires and the updates owed are done

The replay ratio: the learner may run only the updates the inserted env steps
owe (the session's continuous :class:`~pearl_core.runtime.step.UpdateSchedule`),
and actors may step only a small slack ahead of what the learner has consumed.

Greedy evaluations run in a host thread on a snapshot of the published weights
while training goes on; a result counts at the env steps of its snapshot, and a
budget stop waits for a running one.

Failures (:mod:`pearl_core.runtime.hostfaults`): whatever fails — a worker, an
environment's data, an evaluation, a stalled worker (the :class:`~pearl_core.runtime.watchdog.Watchdog`
looks at every pump), or this loop itself (:class:`~pearl_core.errors.HostError`) —
ends the run the same way: a checkpoint of what is sound, every child stopped, the
error raised with the component named.
"""

from __future__ import annotations

import copy
import logging
import math
import queue
import time
import traceback
from multiprocessing.connection import wait as mp_wait
from pathlib import Path
from typing import Any, Mapping

from pearl_core.envs import env_spaces
from pearl_core.errors import CallbackError, EvaluationError, HostError, TransportError, WorkerError
from pearl_core.placement import backend_for_device, learner_route, make_queue
from pearl_core.replay.storage import StorageSpec
from pearl_core.runtime.actors import ActorSpec, experience_fields, run_actor
from pearl_core.runtime.checkpoint import dump_blob, load_blob
from pearl_core.runtime.config import Setting
from pearl_core.runtime.control import RunResult, StopDecision
from pearl_core.runtime.learner import METRICS_EVERY, LearnerSpec
from pearl_core.runtime.hostfaults import JOIN_TIMEOUT_S, STARTUP_TIMEOUT_S, HostFaults, HostStop
from pearl_core.runtime.messages import (
    ActorFailed,
    ActorReady,
    Dropped,
    Experience,
    LearnerFailed,
    LearnerReady,
    StateReply,
    StateRequest,
)
from pearl_core.runtime.procs import worker_context
from pearl_core.runtime.queues import PipeQueue, SequencedQueue
from pearl_core.runtime.roles import Colocated, ThroughHost
from pearl_core.runtime.sanity import DropLog
from pearl_core.runtime.session import RunSession
from pearl_core.runtime.shared import Control, WeightBuffer
from pearl_core.runtime.shm import ShmArena, SlotRing, clean_orphans
from pearl_core.runtime.watchdog import EvalJob, Watchdog
from pearl_core.runtime.wiring import build_trainer, load_trainer_class

__all__ = ["JOIN_TIMEOUT_S", "STARTUP_TIMEOUT_S", "Host", "HostStop"]

log = logging.getLogger("pearl_core.runtime.parallel")

_WHAT = {StateRequest: "a state request"}


class Host(HostFaults):
    """One segment of a parallel run: shared memory, processes and the host loop."""

    def __init__(self, rt):
        cfg, plan, ck = rt.config, rt.plan, rt.checkpoint
        self.rt, self.cfg, self.plan = rt, cfg, plan
        # Before anything is built or written: a script without a file cannot start workers.
        self.ctx = worker_context(early=True)  # the fork server loads torch while we build the trainer
        self.session = session = RunSession(rt, continuous=True, title=f"(parallel, setting {int(plan.setting)})")
        self.interrupted: str | None = None
        self.interrupted_at: float | None = None  # time.monotonic() of the first SIGINT / SIGTERM / SIGHUP
        self.failing = False  # a failure is being handled: no restarts, no second failure
        self.frozen: set[int] = set()  # pids of workers known frozen (terminated at once by close)
        self.watchdog: Watchdog | None = None  # started once every worker is ready
        self.doing = "starting the workers"  # what the host loop is doing, for a HostError
        self.drops = DropLog(base=int(ck.extra.get("dropped_nonfinite", 0)) if ck is not None else 0)
        rt.dropped_nonfinite = self.drops.base
        self.actor_procs: list[Any] = []
        self.learner_proc = None
        self.arena: ShmArena | None = None
        self.ctrl: Control | None = None
        self.inbox: SequencedQueue | None = None
        self.outbox: SequencedQueue | None = None
        self.dcqs: list[PipeQueue | None] = [None] * plan.n_actors
        self.eval_trainer = None  # the host's evaluation copy of the policy (see start_eval)
        self.eval_job: EvalJob | None = None  # the running evaluation, if any
        self.eval_seen: tuple[int, float | None] = (0, None)  # its progress and when that last moved
        self.eval_frozen = False
        st = session.state
        # Everything that can reject the config happens before anything is written to log_dir.
        load_trainer_class(cfg.trainer)  # first: a package that registers its environments on import
        spaces = env_spaces(cfg.env_id, **cfg.env_options)
        # Checked here, before any worker starts: a broken trainer, or a learner placement no backend
        # can run, fails fast with a clear message. The host's copy (evaluation, checks) is on the CPU.
        self.trainer = build_trainer(cfg, *spaces)
        learner_route(type(self.trainer), plan.learner_device, plan.learner_config(), backends=plan.backends)
        self.spec = StorageSpec.from_spaces(*spaces)
        if ck is not None:
            self.trainer.load_state_dict(ck.trainer_state)
        n_actors, n_envs = plan.n_actors, plan.envs_per_actor
        # Actors must always be allowed to reach the env step that owes the next update, or
        # a low replay ratio would leave the learner waiting for data the throttle withholds.
        # By default they may also run ahead by what the learner consumes between two of the host's
        # looks at its progress (the host raises the budget when it wakes: on a DCQ batch, or the
        # learner's report every METRICS_EVERY updates): with only two DCQ batches of slack, the
        # setting-2 worker waited ~115-160 us of a ~0.78 ms update for rows the throttle held back
        # (DQN 256-256, batch 64, ratio 0.5, one actor; RunResult.learner_phases_s).
        default = 2 * n_actors * max(plan.insert_batch, n_envs) + math.ceil(2 * METRICS_EVERY / cfg.replay_ratio)
        self.slack = max(rt.actor_slack or default, math.ceil(1.0 / cfg.replay_ratio) + n_actors * n_envs)
        self.received = [0] * n_actors  # rows received from each actor slot
        self.restarts = [0] * n_actors
        self.last_error: list[str] = [""] * n_actors
        self.learn_s0 = st.learner_time_s
        self.state_reply: bytes | None = None
        self.accepting = True  # False once the run ends: late actor rows are released uncounted
        self.hold_actors = False  # True while waiting for a state snapshot
        self.learner_ready = False
        self.actor_ready = [False] * n_actors
        self.max_env = cfg.stop.max_env_steps
        self.max_updates = cfg.stop.max_updates
        self.role = ThroughHost(self) if plan.setting == Setting.THROUGH_HOST else Colocated(self)
        orphans = clean_orphans()  # of runs killed outright (SIGKILL of the whole job): never a live process's
        if orphans:
            log.warning("removed %d shared-memory segment(s) and semaphore(s) left by killed runs: %s", len(orphans),
                        ", ".join(orphans))
        try:
            self._build_shared(ck)
            session.make_evaluator()
            session.open()
        except BaseException:
            self.close()
            raise

    # -- construction ------------------------------------------------------------------
    def _build_shared(self, ck) -> None:
        cfg, plan, st = self.cfg, self.plan, self.session.state
        self.arena = ShmArena("run")
        self.ctrl = Control.create(self.arena, plan.n_actors)
        self.weights = WeightBuffer.create(self.arena, self.trainer.get_weights())
        self.weights.publish(self.trainer.get_weights())
        self.ctrl.updates = st.updates
        # Resume: the exploration schedule continues from the saved env-step count.
        self.ctrl.actor_steps[0] = st.env_steps
        self.received[0] = st.env_steps
        self.rings = [
            SlotRing.create(self.arena, experience_fields(self.spec, plan.insert_batch, plan.envs_per_actor),
                            n_slots=plan.queue_size, rows=plan.insert_batch + plan.envs_per_actor, tag=f"dcq{i}")
            for i in range(plan.n_actors)
        ]
        q = max(plan.queue_size, plan.max_in_flight + 3)
        # LAQ and LDQ: the transport of the learner device's backend (a shared-memory PipeQueue by default),
        # each message stamped with a sequence number and counted, so a lost one is an error naming it.
        self.inbox = self._transport("laq", q)
        self.outbox = self._transport("ldq", q)
        extra = self.role.build(ck)
        self.learner_spec = LearnerSpec(
            config=cfg, plan=plan, control=self.ctrl.handle, weights=self.weights.handle, inbox=self.inbox,
            outbox=self.outbox, actor_rings=tuple(r.handle for r in self.rings),
            trainer_state=dump_blob(self.trainer.state_dict()) if ck is not None else None, **extra,
        )

    def _transport(self, role: str, maxsize: int) -> SequencedQueue:
        """The LAQ / LDQ: the learner device's backend's transport, checked by :class:`SequencedQueue`."""
        plan = self.plan
        inner = make_queue(role, maxsize, self.ctx, plan.learner_device, backends=plan.backends)
        kind = type(inner)
        if kind is PipeQueue:
            who = "PipeQueue (PEARL's own)"
        else:
            name, _ = backend_for_device(plan.learner_device, "learner transport", backends=plan.backends)
            who = f"{kind.__module__}.{kind.__qualname__} (backend {name!r}, Backend.make_transport)"
        try:
            return SequencedQueue(inner, role.upper(), who, self.arena)
        except BaseException:
            inner.close()
            raise

    def start(self) -> None:
        self.learner_proc = self.ctx.Process(target=self.role.target, args=(self.learner_spec,), daemon=True,
                                             name="pearl-learner")
        self.learner_proc.start()
        self.inbox.close_receiver()
        self.outbox.close_sender()
        self.actor_procs = [None] * self.plan.n_actors
        for a in range(self.plan.n_actors):
            self._start_actor(a)
        # Wait until every worker has built its environments and networks (imports take
        # seconds); the run's clock starts then, so throughput excludes process start-up.
        t = time.perf_counter()
        while not (self.learner_ready and all(self.actor_ready)):
            self.pump(0.05)
            if self.interrupted is not None:
                break
            if time.perf_counter() - t > STARTUP_TIMEOUT_S:
                waiting = ([] if self.learner_ready else ["the learner"]) + [
                    f"actor {a}" for a, ok in enumerate(self.actor_ready) if not ok]
                raise HostStop(WorkerError(
                    f"{', '.join(waiting)} did not finish starting within {STARTUP_TIMEOUT_S:.0f} s "
                    "(building environments and the trainer). Fix: check that the environment and the "
                    "trainer can be built in a fresh process (importable trainer class, no blocking I/O)."))
        log.info("parallel runtime: %d actor(s) and the learner started in %.1f s", self.plan.n_actors,
                 time.perf_counter() - t)
        self.watchdog = Watchdog(self.ctrl, self.rt.stall_timeout_s, STARTUP_TIMEOUT_S)
        self.session.start_clock()
        self.set_budgets()

    def _start_actor(self, a: int) -> None:
        plan = self.plan
        dcq = PipeQueue(plan.queue_size + 2, self.ctx)
        spec = ActorSpec(
            actor_id=a, incarnation=self.restarts[a], config=self.cfg, n_actors=plan.n_actors,
            n_envs=plan.envs_per_actor, batch_rows=plan.insert_batch, ring=self.rings[a].handle,
            control=self.ctrl.handle, weights=self.weights.handle, dcq=dcq,
            weight_check_every=self.rt.weight_check_every,
            env_seed_offset=self.session.state.env_steps if self.rt.checkpoint is not None else 0,
            vector_backend=plan.vector_backend,
        )
        proc = self.ctx.Process(target=run_actor, args=(spec,), daemon=True, name=f"pearl-actor-{a}")
        proc.start()
        dcq.close_sender()  # EOF on our side once the actor is gone
        self.dcqs[a] = dcq
        self.actor_procs[a] = proc
        if self.watchdog is not None:
            self.watchdog.restarted(a)

    # -- counters and budgets -------------------------------------------------------------
    def current_updates(self) -> int:
        return self.role.updates()

    def owed(self, env_steps: int) -> int:
        """Updates the inserted env steps allow (capped by ``max_updates``)."""
        t = self.session.schedule.target(env_steps)
        return t if self.max_updates is None else min(t, self.max_updates)

    def steps_for(self, updates: int) -> int:
        """Fewest env steps whose schedule owes ``updates`` updates."""
        s = self.session.schedule
        extra = updates - s.base_updates
        if extra <= 0:
            return s.base_env_steps + s.learning_starts
        return s.base_env_steps + s.learning_starts + math.ceil(extra / s.replay_ratio - 1e-9)

    def set_budgets(self) -> None:
        e = self.session.state.env_steps
        self.role.set_update_budget(self.owed(e))
        budget = self.steps_for(self.current_updates()) + self.slack
        if self.max_env is not None:
            budget = min(budget, self.max_env)
        self.ctrl.env_budget = budget

    # -- messages ------------------------------------------------------------------------
    def pump(self, timeout: float) -> None:
        """Wait up to ``timeout`` for any message or process exit, and handle everything ready."""
        waitables: dict[Any, tuple[str, int]] = {self.outbox.reader: ("ldq", -1)}
        if self.learner_proc is not None:
            waitables[self.learner_proc.sentinel] = ("learner_exit", -1)
        # Read actors only when the role can take their slots and no state snapshot is pending.
        if self.role.reads_actors() and not self.hold_actors:
            for a, q in enumerate(self.dcqs):
                if q is not None:
                    waitables[q.reader] = ("dcq", a)
        # An actor's exit is handled once no snapshot is pending: handling it drains (and counts) the rows it
        # finished, which must not happen between a state request and its reply (the count saved with the
        # snapshot would include rows the snapshot does not hold).
        if not self.hold_actors:
            for a, p in enumerate(self.actor_procs):
                if p is not None:
                    waitables[p.sentinel] = ("actor_exit", a)
        try:
            for obj in mp_wait(list(waitables), timeout):
                kind, a = waitables[obj]
                if kind == "ldq":
                    self.drain_ldq()
                elif kind == "dcq":
                    self.drain_dcq(a)
                elif kind == "actor_exit":
                    self.actor_exited(a)
                else:
                    self.drain_ldq()
                    self.learner_exited()
            if not self.failing:
                self.outbox.check()  # LDQ messages the learner sent that never arrived (TransportError)
        except TransportError as exc:
            if self.failing:  # already ending: the first error is the one raised
                log.error("%s", exc)
            else:
                self.rt.faults.append((self.session.wall(), "transport", str(exc)))
                raise HostStop(exc) from None
        self.role.after_pump()
        self.watch()

    def drain_dcq(self, a: int) -> None:
        q = self.dcqs[a]
        try:
            while q.poll(0):
                msg = q.get_nowait()
                kind = type(msg)
                if kind is Experience:
                    self.on_experience(msg)
                elif kind is ActorReady:
                    self.actor_ready[a] = True
                elif kind is Dropped:
                    self.drops.update(f"actor {a}", msg.total, msg.detail)
                elif kind is ActorFailed:
                    self.on_actor_failed(a, msg)
        except (EOFError, OSError):
            pass  # the actor is gone; its sentinel reports it

    def on_experience(self, msg: Experience) -> None:
        session, st = self.session, self.session.state
        a, n = msg.actor, msg.rows
        self.received[a] += n
        take = n if self.max_env is None else max(0, min(n, self.max_env - st.env_steps))
        if not self.accepting:  # the run is ending: counters and replay are frozen
            take = 0
        st.env_steps += take
        # Episodes first (their returns are in the slot), then the slot goes back / onward. A slot of
        # episodes only (every row dropped for non-finite values) counts while the run takes steps.
        room = self.accepting and (self.max_env is None or st.env_steps < self.max_env)
        if msg.episodes and take == n and (take or room):
            s = self.rings[a].slot(msg.seq)
            for r, length in zip(s["ep_return"][:msg.episodes].tolist(), s["ep_length"][:msg.episodes].tolist()):
                session.record_episode(r, length)
        try:
            self.role.deliver(a, msg.seq, take)
        except BaseException:
            st.env_steps -= take  # not stored (nor forwarded): not counted, so a checkpoint stays consistent
            raise

    def drain_ldq(self) -> None:
        q = self.outbox
        try:
            while q.poll(0):
                self.on_ldq(q.get_nowait())
        except (EOFError, OSError):
            pass  # the learner is gone; its sentinel reports it

    def on_ldq(self, msg) -> None:
        if self.role.on_reply(msg):
            return
        kind = type(msg)
        if kind is StateReply:
            self.state_reply = msg.blob
        elif kind is LearnerReady:
            self.learner_ready = True
        elif kind is LearnerFailed:
            raise self.learner_failed(msg)

    def dropped_total(self) -> int:
        """Transitions dropped for non-finite values over the whole run (earlier segments included)."""
        if self.ctrl is None:
            return self.drops.total
        return self.drops.base + int(self.ctrl.dropped.sum())

    # -- state requests, evaluation, checkpoints -------------------------------------------
    def request_state(self, with_replay: bool, deadline: float | None = None) -> dict:
        """Ask the learner for its trainer state (and, setting 2, replay contents); pump until it answers.

        Raises:
            HostStop: with a :class:`StallError` when no answer came by ``deadline`` (default:
                :meth:`reply_deadline`; sooner after Ctrl-C).
        """
        self.state_reply = None
        deadline = self.reply_deadline() if deadline is None else deadline
        # No actor rows are taken until the answer arrives, so the env-step count saved with it
        # matches the replay contents the worker snapshots.
        self.hold_actors = True
        try:
            while self.role.unsent():
                # Setting 2: forwards of rows already counted go first, or the snapshot would miss them.
                if time.monotonic() > self.capped(deadline):
                    raise self.no_answer("a state request")
                self.role.after_pump()
                if self.role.unsent():
                    self.pump(0.01)
            self.send_to_learner(StateRequest(with_replay), deadline)
            while self.state_reply is None:
                if time.monotonic() > self.capped(deadline):
                    raise self.no_answer("a state request")
                self.pump(0.05)
                self.role.feed()
        finally:
            self.hold_actors = False
        blob, self.state_reply = self.state_reply, None
        return load_blob(blob)

    def send_to_learner(self, msg, deadline: float) -> None:
        """Put on the LAQ without ever blocking the host: pump while it is full."""
        while True:
            try:
                self.inbox.put_nowait(msg)
                return
            except queue.Full:
                if time.monotonic() > self.capped(deadline):
                    raise self.no_answer(f"{_WHAT.get(type(msg), type(msg).__name__)} (its queue stayed full)") \
                        from None
                self.pump(0.01)

    def sync_host_trainer(self) -> None:
        """Load the latest published weights into the host's trainer copy."""
        got = self.weights.read()
        if got is not None:
            self.trainer.set_weights(got[1])

    def start_eval(self) -> None:
        """Start a greedy evaluation of the latest published weights in a host thread.

        Training goes on while it runs (the host keeps pumping messages; the
        policy evaluated is the snapshot taken here). Its result is recorded by
        :meth:`collect_eval` at the env steps of the snapshot.
        """
        got = self.weights.read()
        if self.eval_trainer is None:
            self.eval_trainer = copy.deepcopy(self.trainer)
        if got is not None:
            self.eval_trainer.set_weights(got[1])
        steps, trainer, evaluator = self.session.state.env_steps, self.eval_trainer, self.session.evaluator

        def job():
            t = time.perf_counter()
            res = evaluator.evaluate(trainer)
            return steps, res, time.perf_counter() - t

        self.eval_job = EvalJob(job, steps)
        self.eval_seen = (evaluator.progress, time.monotonic())
        self.session.monitor.record_started_eval(steps)

    def collect_eval(self, wait: bool = False) -> None:
        """Record a finished evaluation (or, with ``wait``, the running one once it ends: bounded by the
        stall watchdog, and given up after Ctrl-C).

        Raises:
            HostStop: with an :class:`EvaluationError` when it failed or stalled.
        """
        job = self.eval_job
        if job is None:
            return
        while wait and not job.wait(0.1):
            self.watch_eval()
            if self.interrupted is not None:
                return
        if not job.done():
            return
        self.eval_job = None
        try:
            steps, res, took = job.result()
        except Exception as exc:  # environments and get_action raise anything
            ev = self.session.evaluator
            raise HostStop(EvaluationError(
                f"the greedy evaluation of the policy at env step {job.steps} failed "
                f"{ev.doing if ev is not None else ''} of {self.cfg.env_id!r}: {type(exc).__name__}: {exc}. The "
                "run was stopped; the checkpoint holds the learner's state. Fix: make the environment work for "
                "the evaluation seeds (its traceback is in traceback_text), or drop the eval_return criterion.",
                job.traceback)) from exc
        self.session.record_eval(steps, res, took, trainer=self.eval_trainer)

    def save(self, trainer_state: dict | None = None, deadline: float | None = None, *,
             replay: Mapping[str, Any] | None = None) -> Path:
        """Checkpoint: the learner's trainer state, counters, monitor and (if asked) the replay.

        ``replay``: contents to save instead of asking for them (a failed setting-2 run's rebuilt replay).
        """
        given = replay is not None
        want_replay = self.cfg.save_replay and not given
        role, st = self.role, self.session.state
        updates = self.current_updates()
        mark = None
        if trainer_state is None:
            with_replay = want_replay and role.learner_holds_replay()
            got = self.request_state(with_replay=with_replay, deadline=deadline)
            trainer_state = got["trainer"]
            replay = got.get("replay")
            updates = got["updates"]  # the learner's own count at the snapshot
            mark = role.journal_mark() if with_replay and replay is not None else None
        if want_replay and not role.learner_holds_replay():
            replay = role.replay_contents()
        self.trainer.load_state_dict(trainer_state)
        st.updates = updates
        dropped = self.rt.dropped_nonfinite = self.dropped_total()
        path = self.session.save(self.trainer, replay, extra={
            "runtime": "parallel", "setting": int(self.plan.setting), "actor_restarts": list(self.restarts),
            "dropped_nonfinite": dropped})
        if mark is not None:
            role.checkpointed(mark)  # the worker's replay is on disk up to there: the journal can forget it
        return path

    # -- the loop ------------------------------------------------------------------------
    def settled(self, decision: StopDecision) -> bool:
        """A budget stop waits until the updates the inserted steps owe are done (exact replay ratio)."""
        if decision.criterion not in ("max_env_steps",):
            return True
        return self.current_updates() >= self.owed(self.session.state.env_steps) and not self.role.in_flight()

    def loop(self) -> RunResult:
        started = False
        try:
            self.start()
            started = True
            decision = self._loop()
            self.doing = "ending the run (final checkpoint, logs)"
            return self.session.finish(decision, self._final_save)
        except HostStop as stop:
            self.fail(stop)
            raise stop.error from None
        except Exception as exc:
            if not started:  # e.g. a process that cannot be started: nothing ran, nothing to save
                raise
            if isinstance(exc, CallbackError):  # the user's callback raised: its own message says which
                self.rt.faults.append((self.session.wall(), "callback", str(exc)))
                self.fail(HostStop(exc))
                raise
            err = HostError(
                f"the host of the parallel run (setting {int(self.plan.setting)}) failed while {self.doing}: "
                f"{type(exc).__name__}: {exc}. The run was stopped after a checkpoint of what is sound. Fix: "
                "see where in the traceback (traceback_text, and this error's cause).", traceback.format_exc())
            self.rt.faults.append((self.session.wall(), "host", str(err)))
            self.fail(HostStop(err))
            raise err from exc

    def _loop(self) -> StopDecision:
        session, role, st = self.session, self.role, self.session.state
        while True:
            self.doing = "handling the workers' messages"
            self.pump(role.pump_timeout())
            self.set_budgets()
            self.doing = "feeding the learner (sampling batches from the replay)"
            role.feed()
            self.doing = "collecting or starting an evaluation"
            self.collect_eval()
            if self.eval_job is None and session.monitor.eval_due(st.env_steps):
                self.start_eval()
            st.updates = self.current_updates()
            self.doing = "logging, checkpointing and showing progress"
            session.tick(self.save)
            if self.interrupted is not None:
                return StopDecision("interrupted", f"received {self.interrupted}; stopped cleanly", False)
            st.updates = self.current_updates()
            self.doing = "checking the stop criteria"
            decision = session.check()
            if decision is not None and not decision.solved and self.eval_job is not None:
                # A budget stop waits for the running evaluation: it may have solved the task.
                self.collect_eval(wait=True)
                decision = session.check() or decision
            if decision is not None and self.settled(decision):
                return decision

    def _quiesce(self, deadline: float | None = None) -> None:
        """Stop producing work: actors idle, the worker stops training, in-flight batches finish
        (waiting until ``deadline`` at most, default :meth:`reply_deadline`)."""
        self.ctrl.env_budget = 0
        self.accepting = False
        self.role.quiesce()
        deadline = self.reply_deadline() if deadline is None else deadline
        while self.role.busy() and time.monotonic() < self.capped(deadline):
            self.pump(0.05)

    def _final_save(self) -> Path:
        deadline = self.reply_deadline()
        self._quiesce(deadline)
        path = self.save(deadline=deadline)
        # Then the workers stop, and the messages of the run's last seconds are checked: a message lost there
        # (the LAQ's Stop, the learner's last reply) ends the run with a TransportError, after this checkpoint.
        self.doing = "stopping the workers (the end-of-run check of the LAQ and LDQ)"
        stop = self.stop_workers()
        if stop is not None:
            stop.checkpointed = True
            raise stop
        return path
