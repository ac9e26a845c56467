"""The learner side of the parallel runtime: one process, in either protocol setting.

Setting 1 (``Setting.THROUGH_HOST``) — :func:`run_learner`, a process that only
trains. The host samples from the replay manager straight into a batch slot in
shared memory and tells the learner which slot is ready::

    host:    LearnerStep.sample(out=slot s); LAQ <- Train(s)
    learner: Train(s) -> LearnerStep.train(slot s) -> TD errors into slot s; LDQ <- Trained(s)
    host:    LearnerStep.apply(indices of s, TD errors of s); slot s is free again

The host keeps at most ``plan.max_in_flight + 1`` batches at the learner, so
batch ``t + 1`` is sampled before the priority update of ``t`` lands (bounded
staleness) and the learner never waits for the host's round trip.

Setting 2 (``Setting.COLOCATED``) — :func:`run_colocated`, one worker that owns
the Data Storage, the replay manager and the learner. The host forwards only the
actors' insertions (:class:`~pearl_core.runtime.messages.Forward`: the worker
reads the actor's slot directly and releases it); the worker runs the whole
:class:`~pearl_core.runtime.step.LearnerStep` with no host round trip, as long as
``updates < update_budget`` (the host's replay-ratio throttle, in the shared
:class:`~pearl_core.runtime.shared.Control`).

In both, every ``config.weight_sync_every`` updates the learner publishes its
weights to the :class:`~pearl_core.runtime.shared.WeightBuffer` the actors read.
Messages are those of :mod:`pearl_core.runtime.messages`; a learner that raises
sends :class:`~pearl_core.runtime.messages.LearnerFailed` with its traceback and,
if it could still be saved and holds no NaN/inf, its trainer state.

Sanity: the weights are checked for NaN/inf at every publication and the trainer
state at every state request (:mod:`pearl_core.runtime.sanity`), so an update that
diverged is never published to actors nor checkpointed: the learner fails with a
:class:`~pearl_core.errors.DataError` naming the update, and the host checkpoints
the weights last published. Heartbeat: the learner marks what it does
(``Control.heartbeat``, slot ``n_actors``) for the host's stall watchdog.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import time
import traceback

from pearl_core.envs import env_spaces
from pearl_core.replay.storage import Batch, StorageSpec, transition_rows
from pearl_core.runtime.checkpoint import dump_blob, load_blob
from pearl_core.runtime.config import RunConfig, RuntimePlan
from pearl_core.runtime.messages import (
    Forward,
    LearnerFailed,
    LearnerReady,
    Phase,
    Progress,
    StateReply,
    StateRequest,
    Stop,
    Train,
    Trained,
)
from pearl_core.runtime.procs import HostWatch, ignore_stop_signals, quick_exit
from pearl_core.runtime.queues import SequencedQueue, put_while
from pearl_core.runtime.sanity import check_state, nonfinite_in
from pearl_core.runtime.shared import Control, WeightBuffer, WeightHandle
from pearl_core.runtime.shm import BlockHandle, RingHandle, SlotRing
from pearl_core.runtime.devicemove import BatchMover, WeightCopier
from pearl_core.runtime.graphstep import graph_settings
from pearl_core.runtime.step import LearnerStep
from pearl_core.runtime.wiring import build_replay, build_trainer, load_trainer_class, replay_state

__all__ = ["METRICS_EVERY", "PHASES", "LearnerSpec", "run_colocated", "run_learner"]

#: Where the setting-2 worker's time goes (``Progress.phases``, ``RunResult.learner_phases_s``):
#: sampling a batch (tree + gather), ``update_policy``, the priority update, inserting the actors'
#: rows, publishing weights (checked finite), waiting for work, and the rest of the loop.
PHASES = ("sample", "train", "priorities", "insert", "publish", "wait", "other")

#: Learner updates between metric reports to the host.
METRICS_EVERY = 25


@dataclasses.dataclass(frozen=True)
class LearnerSpec:
    """What a learner (setting 1) or co-located worker (setting 2) process needs.

    Attributes:
        config, plan: the run.
        control, weights: shared-memory handles.
        inbox: the LAQ (host -> learner).
        outbox: the LDQ (learner -> host).
        batch_ring: setting 1: the batch slots the host fills.
        actor_rings: setting 2: every actor's experience ring, by actor id.
        trainer_state: a :func:`~pearl_core.runtime.checkpoint.dump_blob` of a trainer state to resume from.
        replay_state: setting 2: a blob of replay contents to resume from.
        metrics_every: updates between metric reports.
    """

    config: RunConfig
    plan: RuntimePlan
    control: BlockHandle
    weights: WeightHandle
    inbox: SequencedQueue
    outbox: SequencedQueue
    batch_ring: RingHandle | None = None
    actor_rings: tuple[RingHandle, ...] = ()
    trainer_state: bytes | None = None
    replay_state: bytes | None = None
    metrics_every: int = METRICS_EVERY


class _Worker:
    """What both learner processes share: trainer, shared state, the LDQ, weight publication."""

    def __init__(self, spec: LearnerSpec):
        import torch

        torch.set_num_threads(spec.plan.learner_threads)
        self.spec = spec
        self.host = HostWatch()  # is the host still alive? (pearl_core.runtime.procs)
        self.ctrl = ctrl = Control.attach(spec.control)
        self.mark = ctrl.heartbeat(ctrl.learner_slot)  # mark(phase, arg) for the host's stall watchdog
        self.weights = WeightBuffer.attach(spec.weights)
        load_trainer_class(spec.config.trainer)  # first: a package that registers its environments on import
        self.spaces = env_spaces(spec.config.env_id, **spec.config.env_options)
        # Same seed as the host's copy: identical initial networks. The host ran the checks.
        # On the plan's learner device, through the backend that owns it (pearl_core.placement).
        self.trainer = build_trainer(spec.config, *self.spaces, check=False, plan=spec.plan)
        self.trainer.use_threads(spec.plan.learner_threads)  # torch's, or the trainer's own (Trainer.use_threads)
        if spec.trainer_state is not None:
            self.trainer.load_state_dict(load_blob(spec.trainer_state))
        self.sync_every = spec.config.weight_sync_every
        self.copier = WeightCopier(self.trainer)  # on a GPU: weights copied to the host without waiting
        self.replay = None  # setting 2: the worker's replay manager

    def make_step(self, replay) -> LearnerStep:
        """The learner step of this process; its ``updates`` continue the run's count."""
        return LearnerStep(self.trainer, replay, self.spec.config.batch_size, updates=self.ctrl.updates)

    def gone(self) -> bool:
        return self.host.gone()

    def send(self, msg) -> None:
        """Put on the LDQ; give up (and exit) if the host is gone or stopping."""
        if not put_while(self.spec.outbox, msg, lambda: not (self.waiting() or self.ctrl.stop)):
            raise SystemExit(0)

    def waiting(self) -> bool:
        """A wait's poll: still alive (heartbeat); whether the host is gone."""
        self.mark(Phase.SENDING)
        return self.gone()

    def updated(self) -> None:
        """One more update done (``step.updates``): tell the host, publish the weights when due.

        Raises:
            DataError: the weights to publish hold a NaN/inf (nothing is published).
        """
        done, before = self.step.updates, self.ctrl.updates
        self.ctrl.updates = done
        if done // self.sync_every > before // self.sync_every:  # a multiple crossed (a launch may do several)
            self.mark(Phase.PUBLISHING, done)
            if not self.copier.asynchronous:
                self.weights.publish(self.step.checked_weights())
            else:  # enqueued now, published below once on the host (an update or two later)
                self.copier.start(done)
        if self.copier.asynchronous:
            ready = self.copier.poll()
            if ready is not None:
                self.weights.publish(ready)

    def state_blob(self, with_replay: bool = False) -> bytes:
        """The trainer state (checked finite), the update count and, if asked, the replay contents.

        Raises:
            DataError: the trainer state holds a NaN/inf (nothing is sent).
        """
        self.mark(Phase.STATE)
        state = check_state(self.trainer.state_dict(), update=self.step.updates)
        replay = replay_state(self.replay) if with_replay and self.replay is not None else None
        return dump_blob({"trainer": state, "replay": replay, "updates": self.step.updates})

    def settle(self) -> None:
        """The loop ended (a ``Stop``, or the stop flag): the LAQ's end-of-run check
        (:meth:`~pearl_core.runtime.queues.SequencedQueue.settle`). What the host sent that is still readable is
        handled as the end of a run handles it (:meth:`leftover`), then a message the host counted as sent that
        never arrived (its last ones, e.g. its ``Stop``) is a :class:`~pearl_core.errors.TransportError`, which
        the caller reports as any failure (:meth:`fail`). Nothing to do for a host that is gone.

        Raises:
            TransportError: the LAQ lost (or repeated) a message.
        """
        if self.gone():
            return
        items, error = self.spec.inbox.settle()
        for msg in items:
            self.leftover(msg)
        if error is not None:
            raise error

    def leftover(self, msg) -> None:
        """A message read at the end of the run (setting 1: nothing to do; a ``Train`` is not trained, the
        host no longer waits for it and its final checkpoint is written)."""

    def fail(self, exc: BaseException) -> None:
        tb = traceback.format_exc()
        try:  # the state goes with the report only if it is sound: never a NaN into a checkpoint
            state = self.trainer.state_dict()
            blob = None if nonfinite_in(state) is not None else dump_blob(
                {"trainer": state, "replay": None, "updates": self.step.updates})
        except Exception:  # noqa: BLE001 - a failed trainer's state_dict may raise anything; report without it
            blob = None
        put_while(self.spec.outbox, LearnerFailed(tb, blob, f"{type(exc).__name__}: {exc}"), lambda: not self.gone())


def _guard(cls, spec: LearnerSpec) -> None:
    ignore_stop_signals()  # SIGINT / SIGHUP to the process group: the host decides when to stop
    spec.inbox.close_sender()
    spec.outbox.close_receiver()
    worker = None
    try:
        worker = cls(spec)
        worker.mark(Phase.WAITING)
        worker.send(LearnerReady())
        worker.loop()
        worker.settle()  # a message lost in the run's last seconds is a TransportError too, not silence
        quick_exit(0)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
        quick_exit(0)
    except EOFError:  # the host closed its end: it is gone
        quick_exit(0)
    except BaseException as exc:  # noqa: BLE001 - a worker reports any failure to the host
        try:
            if worker is not None and hasattr(worker, "step"):
                worker.fail(exc)
            else:
                spec.outbox.put(LearnerFailed(traceback.format_exc(), None, f"{type(exc).__name__}: {exc}"),
                                timeout=10.0)
        except Exception:  # noqa: BLE001 - the host may be gone; the worker exits 1 either way
            pass
        os._exit(1)


# --------------------------------------------------------------------------- setting 1


class _Learner(_Worker):
    def __init__(self, spec: LearnerSpec):
        super().__init__(spec)
        self.ring = SlotRing.attach(spec.batch_ring)
        # Views built once per slot: the trainer reads the host's rows in place.
        self.slots = [self.ring.slot(i) for i in range(self.ring.n_slots)]
        self.batches = [Batch.of(s) for s in self.slots]
        self.step = self.make_step(None)
        # A GPU learner that takes device batches: each batch moves once, from pinned shared memory.
        dev = getattr(self.trainer, "device", None)
        self.mover = (BatchMover(self.slots, dev, memory=self.ring.block.memory())
                      if type(self.trainer).device_batches and dev is not None and str(dev).startswith("cuda")
                      else None)

    def loop(self) -> None:
        inbox, step, every, n = self.spec.inbox, self.step, self.spec.metrics_every, self.ring.n_slots
        mark = self.mark
        while True:
            mark(Phase.WAITING)
            try:
                msg = inbox.get(timeout=0.5)
            except queue.Empty:
                if self.gone() or self.ctrl.stop:
                    return
                continue
            kind = type(msg)
            if kind is Train:
                seq = msg.seq
                slot = self.slots[seq % n]
                mark(Phase.UPDATE, step.updates + 1)
                if self.mover is not None:
                    slot["td"][:] = step.train(*self.mover.move(seq % n))
                else:
                    slot["td"][:] = step.train(self.batches[seq % n], slot["weights"])
                self.updated()
                metrics = step.metrics() if step.updates % every == 0 else None
                self.send(Trained(seq, metrics, step.learner_s))
            elif kind is StateRequest:
                self.send(StateReply(self.state_blob()))
            elif kind is Stop:
                return


def run_learner(spec: LearnerSpec) -> None:
    """Process entry point of the setting-1 learner."""
    _guard(_Learner, spec)


# --------------------------------------------------------------------------- setting 2


class _Colocated(_Worker):
    def __init__(self, spec: LearnerSpec):
        super().__init__(spec)
        state = load_blob(spec.replay_state) if spec.replay_state is not None else None
        self.replay = build_replay(spec.config, spec.plan, StorageSpec.from_spaces(*self.spaces), state=state)
        self.rings = [SlotRing.attach(h) for h in spec.actor_rings]
        self.step = self.make_step(self.replay)
        self.step.use_graph(*graph_settings(spec.plan))  # a GPU iteration runs as a CUDA graph where it can
        self.insert_s = self.wait_s = self.publish_s = 0.0
        self.started = time.perf_counter()

    def phases(self) -> dict[str, float]:
        """Seconds per phase of this process's loop so far (:data:`PHASES`); ``other`` is the rest
        (the messages' polling and unpickling, the loop, the metrics)."""
        st = self.step
        out = {"sample": st.sample_s, "train": st.learner_s, "priorities": st.apply_s, "insert": self.insert_s,
               "publish": self.publish_s, "wait": self.wait_s}
        out["other"] = max(0.0, time.perf_counter() - self.started - sum(out.values()))
        return out

    def handle(self, msg) -> bool:
        kind = type(msg)
        if kind is Forward:
            self.mark(Phase.INSERTING)
            t = time.perf_counter()
            ring = self.rings[msg.actor]
            self.replay.add(*transition_rows(ring.slot(msg.seq), msg.rows))
            ring.release(msg.seq)
            self.insert_s += time.perf_counter() - t
        elif kind is StateRequest:
            self.send(StateReply(self.state_blob(msg.with_replay)))
        elif kind is Stop:
            return False
        return True

    def leftover(self, msg) -> None:
        """A forward read at the end of the run goes into the replay as any other (and its slot is released);
        a state request is not answered (the host no longer waits)."""
        if type(msg) is Forward:
            self.handle(msg)

    def loop(self) -> None:
        inbox, ctrl, replay, step = self.spec.inbox, self.ctrl, self.replay, self.step
        every, mark = self.spec.metrics_every, self.mark
        idle_checks = 0
        while True:
            mark(Phase.WAITING)
            can_train = step.updates < ctrl.update_budget and replay.size >= 1
            # Drain the host's messages; wait for one only when there is nothing to train.
            timeout = 0.0 if can_train else 0.01
            handled = False
            t = time.perf_counter()
            while inbox.poll(timeout):
                if timeout:  # a wait for work (nothing to train), not the drain of what is there
                    self.wait_s += time.perf_counter() - t
                if not self.handle(inbox.get()):
                    return
                timeout, handled = 0.0, True
            else:
                if timeout:
                    self.wait_s += time.perf_counter() - t
            if handled:  # a state request comes after the host's budget stop: no update after a snapshot
                can_train = step.updates < ctrl.update_budget and replay.size >= 1
            if not can_train:
                idle_checks += 1
                if idle_checks % 50 == 0 and (self.gone() or ctrl.stop):
                    return
                continue
            mark(Phase.UPDATE, step.updates + 1)
            step.run(max(1, min(step.per_launch, ctrl.update_budget - step.updates)))
            t = time.perf_counter()
            self.updated()
            self.publish_s += time.perf_counter() - t
            if step.updates % every == 0:
                self.send(Progress(step.updates, step.metrics(), step.learner_s, self.phases()))


def run_colocated(spec: LearnerSpec) -> None:
    """Process entry point of the setting-2 worker (replay manager + storage + learner)."""
    _guard(_Colocated, spec)
