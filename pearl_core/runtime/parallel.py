"""The parallel runtime: actor processes, a learner (setting 1) or a co-located
replay + learner worker (setting 2), and the host loop that moves messages.

Processes and queues (every queue bounded; bulk data only in shared memory)::

    actor i (x n_actors)                     host (this process)                    learner / worker
    ──────────────────────                   ───────────────────                    ────────────────
    envs + policy copy ──DCQ_i (slot ids)──▶ count steps, episodes
      ▲  writes rows into ring_i (shm)       setting 1:
      │                                        RRQ ⇄ ReplayServer (RM + DS, here)
      │                                        INSERT rows of ring_i, release slot
      │                                        SAMPLE ──▶ batch slot s (shm) ──LAQ──▶ update_policy(slot s)
      │                                        UPDATE(idx, TD of s) ◀──────LDQ──── TD errors into slot s
      │                                      setting 2:
      │                                        forward ("insert", i, seq) ───────▶ worker reads ring_i,
      │                                                                            inserts, samples, trains,
      │                                                                            updates priorities
      └──────── WeightBuffer (shm, seqlock) ◀──────────────────────────────────── publish every
                                                                                   weight_sync_every updates
    Control (shm): stop flag, per-actor step counters, env budget (actor throttle),
    learner update count, update budget (setting-2 throttle)

The host keeps the replay ratio: the learner may run only the updates the
inserted env steps owe (:class:`~pearl_core.runtime.wiring.UpdateSchedule` in
continuous mode), and actors may step only a small slack ahead of what the
learner has consumed. At most ``plan.max_in_flight + 1`` batches are at the
learner (sampling for ``t + 1`` overlaps training ``t``).

Greedy evaluations run in a host thread on a snapshot of the published
weights while training goes on (:meth:`_Host.start_eval`); a result counts at
the env steps of its snapshot, and a budget stop waits for a running one.

Stop criteria, evaluation, logs, progress and checkpoints are the serial
runtime's (:mod:`pearl_core.runtime.control`, :mod:`pearl_core.runtime.wiring`),
so both runtimes produce the same :class:`~pearl_core.runtime.control.RunResult`.

Faults: an actor that raises or dies is restarted (``max_restarts`` times per
actor slot) and logged; past that the run fails with :class:`ActorError`. A
learner that raises or dies ends the run with :class:`LearnerError` (carrying
the worker's traceback) after a checkpoint. SIGINT / SIGTERM end the run
cleanly with a final checkpoint (``stop_reason`` ``"interrupted"``); a second
SIGINT aborts at once. Every child process is stopped and every shared-memory
segment unlinked before :meth:`ParallelRuntime.run` returns or raises.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import math
import os
import queue
import signal
import threading
import time
from multiprocessing.connection import wait as mp_wait
from pathlib import Path
from typing import Any


from pearl_core.errors import PearlError, SpecError
from pearl_core.replay import StorageSpec
from pearl_core.runtime.actors import ActorSpec, experience_fields, run_actor
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
from pearl_core.runtime.learner import (
    LearnerSpec,
    LocalRRQ,
    ReplayServer,
    batch_fields,
    dump_blob,
    load_blob,
    run_colocated,
    run_learner,
)
from pearl_core.runtime.procs import worker_context
from pearl_core.runtime.shm import Control, PipeQueue, ShmArena, SlotRing, WeightBuffer
from pearl_core.runtime.wiring import (
    Evaluator,
    UpdateSchedule,
    build_replay,
    build_trainer,
    make_env,
    replay_state,
)

__all__ = [
    "ActorError",
    "LearnerError",
    "LocalRRQ",
    "ParallelRuntime",
    "ReplayServer",
    "WorkerError",
]

log = logging.getLogger(__name__)

#: Seconds to wait for a child to exit on its own before terminating it.
JOIN_TIMEOUT_S = 5.0
#: Seconds the workers may take to import, build their environments and trainer, and report ready.
STARTUP_TIMEOUT_S = 300.0


class WorkerError(PearlError):
    """A worker process of a parallel run failed.

    Attributes:
        traceback_text: the worker's formatted traceback (``""`` when it died
            without one, e.g. killed by a signal).
        exitcode: the process's exit code (negative: killed by that signal), if known.
    """

    def __init__(self, message: str, traceback_text: str = "", exitcode: int | None = None):
        super().__init__(message)
        self.traceback_text = traceback_text
        self.exitcode = exitcode


class ActorError(WorkerError):
    """An actor kept failing after its restarts were used up."""


class LearnerError(WorkerError):
    """The learner (setting 1) or the replay + learner worker (setting 2) failed."""


# --------------------------------------------------------------------------- runtime


class ParallelRuntime:
    """Train with actor processes and a learner process; returns a :class:`RunResult`.

    Args:
        config: what to train.
        plan: how: ``setting`` (1 or 2), ``n_actors``, ``envs_per_actor``,
            ``insert_batch`` (rows per DCQ message), ``max_in_flight``,
            ``queue_size`` (slots per actor ring and queue capacities),
            ``learner_threads``, ``rm_backend``/``rm_threads``.
        resume_from: a checkpoint path or loaded :class:`Checkpoint` to continue.
        progress, tensorboard, plot, metrics_every, display_every_s: as in
            :class:`~pearl_core.runtime.serial.SerialRuntime`.
        max_restarts: restarts allowed per actor slot before the run fails.
        weight_check_every: actor vector steps between looks at the weight version.
        actor_slack: env steps actors may run ahead of what the learner has
            consumed (``None``: two DCQ batches per actor); never less than
            ``1 / replay_ratio`` plus one step of every environment, so the
            learner's next update is always reachable.

    Attributes:
        faults: after (or during) a run, one ``(wall_s, who, what)`` entry per
            detected worker failure.

    Raises:
        SpecError: bad config/plan/arguments, an unknown environment, a trainer
            path that does not resolve, or a checkpoint that does not fit.
        TrainerError: the trainer breaks the contract (checked in this process
            before any worker starts).
    """

    def __init__(self, config: RunConfig, plan: RuntimePlan | None = None, *,
                 resume_from: str | os.PathLike | Checkpoint | None = None, progress: bool | None = None,
                 tensorboard: bool | None = None, plot: bool = True, metrics_every: int = 1_000,
                 display_every_s: float = 10.0, max_restarts: int = 3, weight_check_every: int = 1,
                 actor_slack: int | None = None):
        from pearl_core.runtime.serial import _check_resumable

        if not isinstance(config, RunConfig):
            raise SpecError(f"ParallelRuntime needs a RunConfig; found {type(config).__name__}. "
                            "Fix: RunConfig(env_id=..., trainer='pkg.mod:Class', ...).")
        plan = RuntimePlan() if plan is None else plan
        if not isinstance(plan, RuntimePlan):
            raise SpecError(f"ParallelRuntime needs a RuntimePlan; found {type(plan).__name__}.")
        for name, value, low in (("metrics_every", metrics_every, 1), ("max_restarts", max_restarts, 0),
                                 ("weight_check_every", weight_check_every, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise SpecError(f"ParallelRuntime: {name} = {value!r}; expected an int >= {low}.")
        if actor_slack is not None and (isinstance(actor_slack, bool) or not isinstance(actor_slack, int)
                                        or actor_slack < 1):
            raise SpecError(f"ParallelRuntime: actor_slack = {actor_slack!r}; expected None or an int >= 1.")
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
        self.max_restarts = max_restarts
        self.weight_check_every = weight_check_every
        self.actor_slack = actor_slack
        self.faults: list[tuple[float, str, str]] = []
        self._host: _Host | None = None

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike, config: RunConfig | None = None,
                        plan: RuntimePlan | None = None, **kwargs: Any) -> "ParallelRuntime":
        """Resume the run saved at ``path`` with its own config and plan (or the ones given)."""
        ck = load_checkpoint(path)
        return cls(config or ck.config, plan or ck.plan, resume_from=ck, **kwargs)

    def pids(self) -> dict[str, list[int]]:
        """Process ids of the live workers of the current run (``{"actors": [...], "learner": [...]}``)."""
        host = self._host
        if host is None:
            return {"actors": [], "learner": []}
        actors = [p.pid for p in host.actor_procs if p is not None and p.is_alive()]
        learner = [host.learner_proc.pid] if host.learner_proc is not None and host.learner_proc.is_alive() else []
        return {"actors": actors, "learner": learner}

    def run(self) -> RunResult:
        """Train until a stop criterion fires (or an interrupt); write logs, checkpoint and curve.

        Raises:
            ActorError: an actor slot failed more than ``max_restarts`` times.
            LearnerError: the learner failed (a checkpoint was written first).
        """
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the host steps evaluation envs only; the cores belong to the workers
        host = _Host(self)
        self._host = host
        handlers = _install_signal_handlers(host)
        try:
            return host.loop()
        finally:
            try:
                host.close()
            finally:
                _restore_signal_handlers(handlers)
                torch.set_num_threads(threads)
                self._host = None


def _install_signal_handlers(host: "_Host") -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}

    def on_signal(signum, frame):
        if host.interrupted is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # second Ctrl-C: abort now (the finally clauses still clean up)
        host.interrupted = signal.Signals(signum).name

    old = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        old[sig] = signal.signal(sig, on_signal)
    return old


def _restore_signal_handlers(old: dict[int, Any]) -> None:
    for sig, handler in old.items():
        signal.signal(sig, handler)


#: The tail of the error for a worker that died before PEARL's code ran in it.
_STARTUP_FIX = ("Its traceback is on stderr. Fix for the common start-up failure: run the code that starts a run "
                "under `if __name__ == \"__main__\":`, since workers re-import your script.")


class _Stop(Exception):
    """Internal: a worker failure ends the loop."""

    def __init__(self, error: WorkerError, trainer_blob: bytes | None = None):
        super().__init__(str(error))
        self.error = error
        self.trainer_blob = trainer_blob


class _Host:
    """One segment of a parallel run: shared memory, processes and the host loop."""

    def __init__(self, rt: ParallelRuntime):
        self._called = time.perf_counter()  # startup_s: from here to the run clock's start (see start)
        cfg, plan, ck = rt.config, rt.plan, rt.checkpoint
        self.rt, self.cfg, self.plan = rt, cfg, plan
        self.ctx = worker_context(early=True)  # the fork server loads torch while we build the trainer
        self.interrupted: str | None = None
        self.actor_procs: list[Any] = []
        self.learner_proc = None
        self.arena: ShmArena | None = None
        self.logger: RunLogger | None = None
        self.display: ProgressDisplay | None = None
        self.evaluator: Evaluator | None = None
        self.eval_trainer = None  # the host's evaluation copy of the policy (see start_eval)
        self.eval_job = None  # the running evaluation (a Future), if any
        self.eval_pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="pearl-eval")

        # A loaded checkpoint is never mutated: the run counts on a copy of its counters.
        self.state = RunState.from_dict(ck.state.to_dict()) if ck is not None else RunState()
        # Everything that can reject the config happens before anything is written to log_dir.
        env = make_env(cfg.env_id)
        spaces = (env.observation_space, env.action_space)
        env.close()
        # Checked here, before any worker starts: a broken trainer fails fast with a clear message.
        self.trainer = build_trainer(cfg, *spaces)
        self.spec = StorageSpec.from_spaces(*spaces)
        self.monitor = StopMonitor(cfg.stop)
        if ck is not None:
            self.trainer.load_state_dict(ck.trainer_state)
            self.monitor.load_state_dict(ck.monitor)
        self.log_dir = Path(cfg.log_dir)
        if ck is not None and ck.replay is None and self.state.env_steps:
            self.schedule = UpdateSchedule.from_config(cfg, continuous=True, base_env_steps=self.state.env_steps,
                                                       base_updates=self.state.updates)
        else:
            self.schedule = UpdateSchedule.from_config(cfg, continuous=True)

        n_actors, n_envs = plan.n_actors, plan.envs_per_actor
        # Actors must always be allowed to reach the env step that owes the next update, or
        # a low replay ratio would leave the learner waiting for data the throttle withholds.
        self.slack = max(rt.actor_slack or 2 * n_actors * max(plan.insert_batch, n_envs),
                         math.ceil(1.0 / cfg.replay_ratio) + n_actors * n_envs)
        self.received = [0] * n_actors  # rows received from each actor slot
        self.restarts = [0] * n_actors
        self.last_error: list[str] = [""] * n_actors
        self.dcqs: list[PipeQueue | None] = [None] * n_actors
        self.inflight: collections.deque = collections.deque()  # setting 1: (seq, indices)
        self.next_seq = 0
        self.updates = self.state.updates  # completed updates (setting 1 counts LDQ replies)
        self.learn_s0 = self.state.learner_time_s
        self.pending_inserts: collections.deque = collections.deque()  # setting 2: forwards not yet sent
        self.state_reply: bytes | None = None
        self.accepting = True  # False once the run ends: late actor rows are released uncounted
        self.hold_actors = False  # True while waiting for a state snapshot
        self.learner_ready = False
        self.actor_ready = [False] * n_actors
        self.startup_s = 0.0
        self.max_env = cfg.stop.max_env_steps
        self.max_updates = cfg.stop.max_updates

        try:
            self._build_shared(ck)
            self.evaluator = Evaluator.for_config(cfg) if self.monitor.evaluates else None
            if self.evaluator is not None and ck is not None:
                self.evaluator.evaluations = len(self.state.eval_history)
            self.log_dir.mkdir(parents=True, exist_ok=True)
            (self.log_dir / "config.json").write_text(cfg.to_json(indent=2))
            (self.log_dir / "plan.json").write_text(plan.to_json(indent=2))
            self.logger = RunLogger(self.log_dir, tensorboard=rt.tensorboard)
            self.display = ProgressDisplay(cfg.stop.max_env_steps, enabled=rt.progress, every_s=rt.display_every_s)
        except BaseException:
            self.close()
            raise
        self._start_counts = (self.state.env_steps, self.state.updates)
        self._wall_base = self.state.wall_time_s
        self._t0 = time.perf_counter()
        self._next_metrics = (self.state.env_steps // rt.metrics_every + 1) * rt.metrics_every
        every = cfg.checkpoint_every
        self._next_checkpoint = (self.state.env_steps // every + 1) * every if every else None
        self._rate_mark = (self._t0, self.state.env_steps, self.state.updates)
        self.checkpoint_path: Path | None = None

    # -- construction ------------------------------------------------------------------
    def _build_shared(self, ck: Checkpoint | None) -> None:
        cfg, plan = self.cfg, self.plan
        self.arena = ShmArena("run")
        self.ctrl = Control.create(self.arena, plan.n_actors)
        self.weights = WeightBuffer.create(self.arena, self.trainer.get_weights())
        self.weights.publish(self.trainer.get_weights())
        self.ctrl.updates = self.state.updates
        # Resume: the exploration schedule continues from the saved env-step count.
        self.ctrl.actor_steps[0] = self.state.env_steps
        self.received[0] = self.state.env_steps
        self.rings = [
            SlotRing.create(self.arena, experience_fields(self.spec, plan.insert_batch, plan.envs_per_actor),
                            n_slots=plan.queue_size, rows=plan.insert_batch + plan.envs_per_actor, tag=f"dcq{i}")
            for i in range(plan.n_actors)
        ]
        q = max(plan.queue_size, plan.max_in_flight + 3)
        self.inbox = PipeQueue(q, self.ctx)   # LAQ (setting 1) / insert forwards (setting 2)
        self.outbox = PipeQueue(q, self.ctx)  # LDQ
        replay_blob = None
        if plan.setting == 1:
            self.replay = build_replay(cfg, plan, self.spec, state=ck.replay if ck is not None else None)
            self.rrq = LocalRRQ(ReplayServer(self.replay))
            self.batch_ring = SlotRing.create(self.arena, batch_fields(self.spec), n_slots=plan.max_in_flight + 1,
                                              rows=cfg.batch_size, tag="laq")
        else:
            self.replay = None
            self.batch_ring = None
            if ck is not None and ck.replay is not None:
                replay_blob = dump_blob(ck.replay)
        self.learner_spec = LearnerSpec(
            config=cfg, plan=plan, control=self.ctrl.handle, weights=self.weights.handle, inbox=self.inbox,
            outbox=self.outbox, batch_ring=self.batch_ring.handle if self.batch_ring is not None else None,
            actor_rings=tuple(r.handle for r in self.rings),
            trainer_state=dump_blob(self.trainer.state_dict()) if ck is not None else None,
            replay_state=replay_blob,
        )

    def start(self) -> None:
        target = run_learner if self.plan.setting == 1 else run_colocated
        self.learner_proc = self.ctx.Process(target=target, args=(self.learner_spec,), daemon=True,
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
                raise _Stop(WorkerError(
                    f"{', '.join(waiting)} did not finish starting within {STARTUP_TIMEOUT_S:.0f} s "
                    "(building environments and the trainer). Fix: check that the environment and the "
                    "trainer can be built in a fresh process (importable trainer class, no blocking I/O)."))
        self.startup_s = time.perf_counter() - t
        log.info("parallel runtime: %d actor(s) and the learner started in %.1f s", self.plan.n_actors,
                 self.startup_s)
        self._t0 = time.perf_counter()
        self._rate_mark = (self._t0, self.state.env_steps, self.state.updates)
        self.set_budgets()

    def _start_actor(self, a: int) -> None:
        plan = self.plan
        dcq = PipeQueue(plan.queue_size + 2, self.ctx)
        spec = ActorSpec(
            actor_id=a, incarnation=self.restarts[a], config=self.cfg, n_actors=plan.n_actors,
            n_envs=plan.envs_per_actor, batch_rows=plan.insert_batch, ring=self.rings[a].handle,
            control=self.ctrl.handle, weights=self.weights.handle, dcq=dcq,
            weight_check_every=self.rt.weight_check_every,
            env_seed_offset=self.state.env_steps if self.rt.checkpoint is not None else 0,
        )
        proc = self.ctx.Process(target=run_actor, args=(spec,), daemon=True, name=f"pearl-actor-{a}")
        proc.start()
        dcq.close_sender()  # EOF on our side once the actor is gone
        self.dcqs[a] = dcq
        self.actor_procs[a] = proc

    # -- time and counters -------------------------------------------------------------
    def wall(self) -> float:
        return self._wall_base + (time.perf_counter() - self._t0)

    def current_updates(self) -> int:
        return self.updates if self.plan.setting == 1 else self.ctrl.updates

    def owed(self, env_steps: int) -> int:
        """Updates the inserted env steps allow (capped by ``max_updates``)."""
        t = self.schedule.target(env_steps)
        return t if self.max_updates is None else min(t, self.max_updates)

    def steps_for(self, updates: int) -> int:
        """Fewest env steps whose schedule owes ``updates`` updates."""
        s = self.schedule
        extra = updates - s.base_updates
        if extra <= 0:
            return s.base_env_steps + s.learning_starts
        return s.base_env_steps + s.learning_starts + math.ceil(extra / s.replay_ratio - 1e-9)

    def set_budgets(self) -> None:
        e = self.state.env_steps
        u = self.current_updates()
        if self.plan.setting == 2:
            self.ctrl.update_budget = self.owed(e)
        budget = self.steps_for(u) + self.slack
        if self.max_env is not None:
            budget = min(budget, self.max_env)
        self.ctrl.env_budget = budget

    # -- messages ------------------------------------------------------------------------
    def pump(self, timeout: float) -> None:
        """Wait up to ``timeout`` for any message or process exit, and handle everything ready."""
        waitables: dict[Any, tuple[str, int]] = {self.outbox.reader: ("ldq", -1)}
        if self.learner_proc is not None:
            waitables[self.learner_proc.sentinel] = ("learner_exit", -1)
        # Read actors only when forwards flowed (setting-2 backpressure) and no state snapshot is pending.
        if not self.pending_inserts and not self.hold_actors:
            for a, q in enumerate(self.dcqs):
                if q is not None:
                    waitables[q.reader] = ("dcq", a)
        for a, p in enumerate(self.actor_procs):
            if p is not None:
                waitables[p.sentinel] = ("actor_exit", a)
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
        if self.pending_inserts:
            self.flush_forwards()

    def drain_dcq(self, a: int) -> None:
        q = self.dcqs[a]
        try:
            while q.poll(0):
                msg = q.get_nowait()
                if msg[0] == "batch":
                    self.on_batch(*msg[1:])
                elif msg[0] == "ready":
                    self.actor_ready[a] = True
                elif msg[0] == "error":
                    self.last_error[a] = msg[2]
        except (EOFError, OSError):
            pass  # the actor is gone; its sentinel reports it

    def on_batch(self, a: int, seq: int, n: int, n_eps: int) -> None:
        st = self.state
        ring = self.rings[a]
        self.received[a] += n
        take = n if self.max_env is None else max(0, min(n, self.max_env - st.env_steps))
        if not self.accepting:  # the run is ending: counters and replay are frozen
            take = 0
        s = ring.slot(seq)
        if self.plan.setting == 1:
            if take:
                self.rrq.call(("insert", s["obs"][:take], s["action"][:take], s["reward"][:take],
                               s["next_obs"][:take], s["done"][:take]))
        # Episodes first (their returns are in the slot), then the slot goes back / onward.
        if n_eps and take == n and take:
            st.env_steps += take
            wall = self.wall()
            rets, lens = s["ep_return"][:n_eps].tolist(), s["ep_length"][:n_eps].tolist()
            for r, length in zip(rets, lens):
                st.episodes += 1
                self.monitor.record_episode(r)
                self.logger.episode(st.env_steps, wall, st.episodes, r, length)
        else:
            st.env_steps += take
        if self.plan.setting == 1:
            ring.release(seq)
        else:
            self.pending_inserts.append(("insert", a, seq, take))
            self.flush_forwards()

    def flush_forwards(self) -> None:
        while self.pending_inserts:
            try:
                self.inbox.put_nowait(self.pending_inserts[0])
            except queue.Full:
                return
            self.pending_inserts.popleft()

    def drain_ldq(self) -> None:
        q = self.outbox
        try:
            while q.poll(0):
                self.on_ldq(q.get_nowait())
        except (EOFError, OSError):
            pass  # the learner is gone; its sentinel reports it

    def on_ldq(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == "done":  # setting 1: ("done", seq, metrics, learner_s)
            _, seq, metrics, learn_s = msg
            want, indices = self.inflight.popleft()
            if want != seq:
                raise PearlError(f"LDQ out of order: got batch {seq}, expected {want}.")
            td = self.batch_ring.slot(seq)["td"]
            self.rrq.call(("update", indices, td))
            self.updates += 1
            self.state.learner_time_s = self.learn_s0 + learn_s
            if metrics:
                self.state.last_metrics = {k: float(v) for k, v in metrics.items()}
        elif kind == "metrics":  # setting 2: ("metrics", updates, metrics, learner_s)
            self.state.learner_time_s = self.learn_s0 + msg[3]
            self.state.last_metrics = {k: float(v) for k, v in msg[2].items()}
        elif kind == "state":
            self.state_reply = msg[1]
        elif kind == "ready":
            self.learner_ready = True
        elif kind == "error":
            _, tb, blob = msg
            raise _Stop(LearnerError(
                f"the learner failed (setting {self.plan.setting}); its traceback:\n{tb}", tb,
                self.learner_proc.exitcode if self.learner_proc is not None else None), blob)

    def feed_learner(self) -> None:
        """Setting 1: keep up to ``max_in_flight + 1`` sampled batches at the learner."""
        if not self.accepting:  # the run is ending
            return
        cap = self.plan.max_in_flight + 1
        owed = self.owed(self.state.env_steps)
        b = self.cfg.batch_size
        while len(self.inflight) < cap and self.updates + len(self.inflight) < owed and self.replay.size:
            sampled = self.rrq.call(("sample", b))[1]
            seq = self.next_seq
            self.next_seq += 1
            slot = self.batch_ring.slot(seq)
            batch = sampled.batch
            slot["obs"][:] = batch.obs
            slot["action"][:] = batch.action
            slot["reward"][:] = batch.reward
            slot["next_obs"][:] = batch.next_obs
            slot["done"][:] = batch.done
            slot["weights"][:] = sampled.weights
            self.inflight.append((seq, sampled.indices))
            self.inbox.put(("train", seq))  # never blocks: the queue holds more than cap

    # -- faults --------------------------------------------------------------------------
    def actor_exited(self, a: int) -> None:
        proc = self.actor_procs[a]
        proc.join(1.0)
        self.drain_dcq(a)  # keep every batch it finished before dying
        code = proc.exitcode
        tb = self.last_error[a]
        self.dcqs[a].close()
        self.dcqs[a] = None
        self.actor_procs[a] = None
        what = f"actor {a} (pid {proc.pid}) exited with code {code}" + ("" if tb else " without a traceback")
        self.rt.faults.append((self.wall(), f"actor {a}", what + (f"\n{tb}" if tb else "")))
        if not tb and not self.actor_ready[a]:
            # It never started: a restart would fail the same way.
            raise _Stop(ActorError(
                f"{what} before it was ready: it failed while starting, before PEARL's code ran, or was "
                f"killed. {_STARTUP_FIX}", tb, code))
        if self.restarts[a] >= self.rt.max_restarts:
            raise _Stop(ActorError(
                f"{what}; it failed {self.restarts[a] + 1} times, more than max_restarts={self.rt.max_restarts}. "
                f"Last traceback:\n{tb or '(none: the process was killed)'}Fix: make the environment and "
                "get_action robust, or raise max_restarts.", tb, code))
        self.restarts[a] += 1
        log.warning("%s; restarting it (restart %d of %d).%s", what, self.restarts[a], self.rt.max_restarts,
                    f"\n{tb}" if tb else "")
        # Steps it took but never delivered are forgotten, so budgets count delivered rows only.
        self.ctrl.actor_steps[a] = self.received[a]
        self.last_error[a] = ""
        self._start_actor(a)

    def learner_exited(self) -> None:
        proc = self.learner_proc
        proc.join(1.0)
        raise _Stop(LearnerError(
            f"the learner process (pid {proc.pid}) exited with code {proc.exitcode} without reporting an error: "
            "killed by a signal or out of memory, or it failed while starting, before PEARL's code ran. "
            f"{_STARTUP_FIX}", "", proc.exitcode))

    # -- state requests, evaluation, logs, checkpoints -------------------------------------
    def request_state(self, with_replay: bool, timeout: float = 120.0) -> dict:
        """Ask the learner for its trainer state (and, setting 2, replay contents); pump until it answers."""
        self.state_reply = None
        deadline = time.monotonic() + timeout
        # No actor rows are taken until the answer arrives, so the env-step count saved with it
        # matches the replay contents the worker snapshots.
        self.hold_actors = True
        try:
            self.send_to_learner(("state", with_replay), deadline)
            while self.state_reply is None:
                if time.monotonic() > deadline:
                    raise LearnerError(f"the learner did not answer a state request within {timeout:.0f} s.")
                self.pump(0.05)
                if self.plan.setting == 1:
                    self.feed_learner()
        finally:
            self.hold_actors = False
        blob, self.state_reply = self.state_reply, None
        return load_blob(blob)

    def send_to_learner(self, msg: tuple, deadline: float) -> None:
        """Put on the learner's inbox without ever blocking the host: pump while it is full."""
        while True:
            try:
                self.inbox.put_nowait(msg)
                return
            except queue.Full:
                if time.monotonic() > deadline:
                    raise LearnerError(f"the learner's queue stayed full; could not send {msg[0]!r}.") from None
                self.pump(0.01)

    def sync_host_trainer(self) -> None:
        """Load the latest published weights into the host's trainer copy (for evaluation)."""
        got = self.weights.read()
        if got is not None:
            self.trainer.set_weights(got[1])

    def start_eval(self) -> None:
        """Start a greedy evaluation of the latest published weights in a host thread.

        Training goes on while it runs (the host keeps pumping messages; the
        policy evaluated is the snapshot taken here), so an evaluation no longer
        stalls the learner. Its result is recorded by :meth:`collect_eval` at the
        env steps of the snapshot.
        """
        import copy

        got = self.weights.read()
        if self.eval_trainer is None:
            self.eval_trainer = copy.deepcopy(self.trainer)
        if got is not None:
            self.eval_trainer.set_weights(got[1])
        steps, trainer, evaluator = self.state.env_steps, self.eval_trainer, self.evaluator

        def job():
            t = time.perf_counter()
            res = evaluator.evaluate(trainer)
            return steps, res, time.perf_counter() - t

        self.eval_job = self.eval_pool.submit(job)
        self.monitor.record_started_eval(steps)

    def collect_eval(self, wait: bool = False) -> None:
        """Record a finished evaluation (or, with ``wait``, the running one once it ends)."""
        job = self.eval_job
        if job is None or not (wait or job.done()):
            return
        self.eval_job = None
        steps, res, took = job.result()  # an evaluation error propagates here, in the host
        st = self.state
        st.eval_time_s += took
        wall = self.wall()
        st.eval_history.append((steps, res.mean_return, wall))
        self.monitor.record_eval(steps, res.mean_return)
        self.logger.evaluation(steps, wall, res.returns)
        s = self.cfg.stop
        if s.eval_return is not None and res.mean_return >= s.eval_return and st.solved_at_env_steps is None:
            st.solved_at_env_steps, st.solved_at_wall_s = steps, wall

    def log_metrics(self) -> None:
        now, st = time.perf_counter(), self.state
        st.updates = self.current_updates()
        t0, e0, u0 = self._rate_mark
        dt = max(now - t0, 1e-9)
        self._rate_mark = (now, st.env_steps, st.updates)
        st.wall_time_s = self.wall()
        self.logger.metrics(st, st.wall_time_s, self.monitor.recent_mean(), (st.env_steps - e0) / dt,
                            (st.updates - u0) / dt)

    def save(self, trainer_state: dict | None = None) -> Path:
        """Checkpoint: the learner's trainer state, counters, monitor and (if asked) the replay."""
        want_replay = self.cfg.save_replay
        replay = None
        updates = self.current_updates()
        if trainer_state is None:
            got = self.request_state(with_replay=want_replay and self.plan.setting == 2)
            trainer_state = got["trainer"]
            replay = got.get("replay")
            updates = got["updates"]  # the learner's own count at the snapshot
        if want_replay and self.plan.setting == 1:
            replay = replay_state(self.replay)
        self.trainer.load_state_dict(trainer_state)
        st = self.state
        st.updates = updates
        st.wall_time_s = self.wall()
        path = self.log_dir / CHECKPOINT_NAME
        save_checkpoint(path, trainer=self.trainer, state=st, monitor=self.monitor, config=self.cfg,
                        plan=self.plan, replay=replay,
                        extra={"runtime": "parallel", "setting": self.plan.setting,
                               "actor_restarts": list(self.restarts)})
        self.checkpoint_path = path
        return path

    # -- the loop ------------------------------------------------------------------------
    def settled(self, decision: StopDecision) -> bool:
        """A budget stop waits until the updates the inserted steps owe are done (exact replay ratio)."""
        if decision.criterion not in ("max_env_steps",):
            return True
        return self.current_updates() >= self.owed(self.state.env_steps) and not self.inflight

    def loop(self) -> RunResult:
        try:
            self.start()
            decision = self._loop()
        except _Stop as stop:
            self._fail(stop)
            raise stop.error from None
        return self.finish(decision)

    def _loop(self) -> StopDecision:
        st, cfg, rt = self.state, self.cfg, self.rt
        setting1 = self.plan.setting == 1
        last_display = 0.0
        while True:
            self.pump(0.002 if setting1 and self.inflight else 0.02)
            self.set_budgets()
            if setting1:
                self.feed_learner()
            self.collect_eval()
            if self.eval_job is None and self.monitor.eval_due(st.env_steps):
                self.start_eval()
            if st.env_steps >= self._next_metrics:
                self.log_metrics()
                self._next_metrics = (st.env_steps // rt.metrics_every + 1) * rt.metrics_every
            if self._next_checkpoint is not None and st.env_steps >= self._next_checkpoint:
                self.save()
                self._next_checkpoint = (st.env_steps // cfg.checkpoint_every + 1) * cfg.checkpoint_every
            now = time.perf_counter()
            if now - last_display > 0.25:
                st.updates = self.current_updates()
                self.display.update(st, self.wall(), self.monitor.recent_mean())
                last_display = now
            if self.interrupted is not None:
                return StopDecision("interrupted", f"received {self.interrupted}; stopped cleanly", False)
            st.updates = self.current_updates()
            decision = self.monitor.check(st.env_steps, st.updates, self.wall())
            if decision is not None and not decision.solved and self.eval_job is not None:
                # A budget stop waits for the running evaluation: it may have solved the task.
                self.collect_eval(wait=True)
                decision = self.monitor.check(st.env_steps, st.updates, self.wall()) or decision
            if decision is not None and self.settled(decision):
                return decision

    def _quiesce(self) -> None:
        """Stop producing work: actors idle, the worker stops training, in-flight batches finish."""
        self.ctrl.env_budget = 0
        self.accepting = False
        if self.plan.setting == 2:
            self.ctrl.update_budget = 0
        deadline = time.monotonic() + 60.0
        while (self.inflight or self.pending_inserts) and time.monotonic() < deadline:
            self.pump(0.05)

    def finish(self, decision: StopDecision) -> RunResult:
        st = self.state
        if decision.solved and st.solved_at_env_steps is None:
            st.solved_at_env_steps = st.env_steps
            st.solved_at_wall_s = self.wall()
        try:
            self._quiesce()
            path = self.save()
        except _Stop as stop:
            self._fail(stop)
            raise stop.error from None
        self.log_metrics()
        self.display.update(st, self.wall(), self.monitor.recent_mean(), force=True)
        if self.rt.plot:
            s = self.cfg.stop
            plot_learning_curve(self.log_dir, title=f"{self.cfg.env_id} — {self.cfg.trainer.split(':')[-1]} "
                                f"(parallel, setting {self.plan.setting})", window=s.window,
                                threshold=s.eval_return if s.eval_return is not None else s.mean_return)
        return RunResult.from_state(st, decision, batch_size=self.cfg.batch_size,
                                    final_mean_return=self.monitor.recent_mean(), log_dir=str(self.log_dir),
                                    checkpoint_path=str(path), startup_s=self._t0 - self._called)

    def _fail(self, stop: _Stop) -> None:
        """Write what can be saved before the error propagates (nothing if the run never progressed,
        so a failed start cannot overwrite the checkpoint it was resuming from)."""
        log.error("%s", stop.error)
        if (self.state.env_steps, self.current_updates()) == self._start_counts:
            return
        try:
            self.ctrl.env_budget = 0
            if stop.trainer_blob is not None:
                self.save(load_blob(stop.trainer_blob)["trainer"])
            elif not isinstance(stop.error, LearnerError) and self.learner_proc is not None \
                    and self.learner_proc.is_alive():
                self._quiesce()
                self.save()  # the learner's own state (and the worker's replay if asked)
            else:
                # The learner died without a word: keep the weights the actors last received.
                self.sync_host_trainer()
                self.save(self.trainer.state_dict())
        except Exception as exc:  # noqa: BLE001 - the original error matters more
            log.error("could not write a checkpoint after the failure: %s", exc)

    # -- shutdown ------------------------------------------------------------------------
    def close(self) -> None:
        """Stop every child (politely, then by force) and unlink every segment. Idempotent."""
        try:
            if self.arena is not None and getattr(self, "ctrl", None) is not None:
                self.ctrl.request_stop()
            # pid is None for a process whose start() failed (e.g. a script without the
            # ``if __name__ == "__main__":`` guard): there is nothing to join, and joining would
            # hide the original error behind an AssertionError.
            procs = [p for p in [self.learner_proc, *self.actor_procs] if p is not None and p.pid is not None]
            if self.learner_proc is not None and self.learner_proc.is_alive():
                try:
                    self.inbox.put_nowait(("stop",))
                except (queue.Full, OSError, ValueError):
                    pass
            deadline = time.monotonic() + JOIN_TIMEOUT_S
            for p in procs:
                p.join(max(0.0, deadline - time.monotonic()))
            for p in procs:
                if p.is_alive():
                    p.terminate()
                    p.join(2.0)
                if p.is_alive():
                    p.kill()
                    p.join(2.0)
            for p in procs:
                try:
                    p.close()
                except ValueError:
                    pass
            self.learner_proc = None
            self.actor_procs = []
            for q in [getattr(self, "inbox", None), getattr(self, "outbox", None), *self.dcqs]:
                if q is not None:
                    q.close()
        finally:
            try:
                if self.display is not None:
                    self.display.close()
                if self.logger is not None:
                    self.logger.close()
                if self.eval_job is not None:
                    self.eval_job.cancel()
                self.eval_pool.shutdown(wait=True)  # an evaluation in progress ends before its envs close
                if self.evaluator is not None:
                    self.evaluator.close()
            finally:
                if self.arena is not None:
                    self.arena.close()
                    self.arena = None
