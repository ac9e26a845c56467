"""The learner and replay-manager side of the parallel runtime, in both protocol settings.

The RRQ — :class:`ReplayServer` answers insert / sample / update requests on a
replay manager; :class:`LocalRRQ` is the request/reply queue pair for a replay
manager that lives in the host process (setting 1 on a CPU-only machine).

Setting 1 — :func:`run_learner`, a process that only trains. The host samples
from the replay manager and hands the learner batches through shared memory::

    host:    RRQ <- SAMPLE(B); write batch + IS weights into batch slot s; LAQ <- ("train", s)
    learner: ("train", s) -> update_policy(slot s) -> write TD errors into slot s; LDQ <- ("done", s)
    host:    RRQ <- UPDATE(indices of s, TD errors of s); slot s is free again

The host keeps at most ``plan.max_in_flight + 1`` batches at the learner, so
batch ``t + 1`` is sampled before the priority update of ``t`` lands (bounded
staleness) and the learner never waits for the host's round trip.

Setting 2 — :func:`run_colocated`, one worker process that owns the Data
Storage, the replay manager and the learner. The host forwards only the actors'
insertions (``("insert", actor, seq, rows)``: the worker reads the actor's slot
directly and releases it); the worker samples, trains and updates priorities
with no host round trip, as long as ``updates < update_budget`` (the host's
replay-ratio throttle, in the shared :class:`~pearl_core.runtime.shm.Control`).

In both, every ``config.weight_sync_every`` updates the learner publishes its
weights to the :class:`~pearl_core.runtime.shm.WeightBuffer` the actors read,
and ``control.updates`` counts finished updates. TD errors are per sample; the
replay turns them into priorities ``(|δ| + ε) ** α``.

Messages back to the host (the LDQ): ``("ready",)`` once built,
``("done", seq, metrics | None, learner_s)`` (setting 1),
``("metrics", updates, metrics, learner_s)`` (setting 2), ``("state", blob)`` answering a
``("state", with_replay)`` request, and ``("error", traceback, blob | None)``
when training raised (``blob``: the trainer's state if it could still be saved).
"""

from __future__ import annotations

import collections
import dataclasses
import io
import os
import queue
import signal
import time
import traceback
from typing import Any

import numpy as np

from pearl_core.errors import InvalidValueError
from pearl_core.replay.base import ReplayManager, check_td_errors
from pearl_core.replay.storage import Batch
from pearl_core.runtime.config import RunConfig, RuntimePlan
from pearl_core.runtime.procs import HostWatch
from pearl_core.runtime.shm import (
    BlockHandle,
    Control,
    PipeQueue,
    RingHandle,
    SlotRing,
    WeightBuffer,
    WeightHandle,
    put_while,
)

__all__ = [
    "LearnerSpec",
    "LocalRRQ",
    "ReplayServer",
    "batch_fields",
    "dump_blob",
    "load_blob",
    "run_colocated",
    "run_learner",
]

#: Learner updates between metric reports to the host.
METRICS_EVERY = 25


def batch_fields(spec) -> dict[str, tuple[tuple[int, ...], Any]]:
    """Per-row fields of a learner batch slot: the transition, its IS weight and its TD error."""
    return {
        "obs": (spec.obs_shape, spec.obs_dtype),
        "action": (spec.action_shape, spec.action_dtype),
        "reward": ((), np.float32),
        "next_obs": (spec.obs_shape, spec.obs_dtype),
        "done": ((), np.bool_),
        "weights": ((), np.float32),
        "td": ((), np.float64),
    }


def dump_blob(obj: Any) -> bytes:
    """Serialise a state dict (torch tensors, numpy arrays, plain values) to bytes.

    States cross process boundaries as bytes so that torch never moves tensors
    through its own shared-memory files.
    """
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def load_blob(blob: bytes) -> Any:
    """Inverse of :func:`dump_blob` (trusted data: produced by this run's own workers)."""
    import torch

    return torch.load(io.BytesIO(blob), weights_only=False)


@dataclasses.dataclass(frozen=True)
class LearnerSpec:
    """What a learner (setting 1) or co-located worker (setting 2) process needs.

    Attributes:
        config, plan: the run.
        control, weights: shared-memory handles.
        inbox: host -> learner queue (LAQ in setting 1; insertions in setting 2).
        outbox: learner -> host queue (LDQ).
        batch_ring: setting 1: the batch slots the host fills.
        actor_rings: setting 2: every actor's experience ring, by actor id.
        trainer_state: a :func:`dump_blob` of a trainer state to resume from.
        replay_state: setting 2: a :func:`dump_blob` of replay contents to resume from.
        metrics_every: updates between metric reports.
    """

    config: RunConfig
    plan: RuntimePlan
    control: BlockHandle
    weights: WeightHandle
    inbox: PipeQueue
    outbox: PipeQueue
    batch_ring: RingHandle | None = None
    actor_rings: tuple[RingHandle, ...] = ()
    trainer_state: bytes | None = None
    replay_state: bytes | None = None
    metrics_every: int = METRICS_EVERY


class _Base:
    def __init__(self, spec: LearnerSpec):
        import torch

        from pearl_core.runtime.wiring import build_trainer, make_env

        torch.set_num_threads(spec.plan.learner_threads)
        self.spec = spec
        self.host = HostWatch()  # is the host still alive? (pearl_core.runtime.procs)
        self.ctrl = Control.attach(spec.control)
        self.weights = WeightBuffer.attach(spec.weights)
        env = make_env(spec.config.env_id)
        self.spaces = (env.observation_space, env.action_space)
        env.close()
        # Same seed as the host's copy: identical initial networks. The host ran the checks.
        self.trainer = build_trainer(spec.config, *self.spaces, check=False,
                                     device=None if spec.plan.learner_device == "cpu" else spec.plan.learner_device)
        if spec.trainer_state is not None:
            self.trainer.load_state_dict(load_blob(spec.trainer_state))
        self.updates = self.ctrl.updates
        self.sync_every = spec.config.weight_sync_every
        self.learn_s = 0.0  # seconds spent in update_policy (reported to the host)

    def gone(self) -> bool:
        return self.host.gone()

    def send(self, msg) -> None:
        """Put on the LDQ; give up (and exit) if the host is gone or stopping."""
        if not put_while(self.spec.outbox, msg, lambda: not (self.gone() or self.ctrl.stop)):
            raise SystemExit(0)

    def after_update(self) -> None:
        self.updates += 1
        self.ctrl.updates = self.updates
        if self.updates % self.sync_every == 0:
            self.weights.publish(self.trainer.get_weights())

    def state_blob(self, with_replay: bool = False) -> bytes:
        return dump_blob({"trainer": self.trainer.state_dict(), "replay": None, "updates": self.updates})

    def fail(self) -> None:
        tb = traceback.format_exc()
        try:
            blob = self.state_blob()
        except Exception:
            blob = None
        put_while(self.spec.outbox, ("error", tb, blob), lambda: not self.gone())


def _quick_exit(code: int) -> None:
    """Leave without interpreter teardown (seconds for a process that imported torch)."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def _guard(cls, spec: LearnerSpec) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the host decides when to stop
    spec.inbox.close_sender()
    spec.outbox.close_receiver()
    worker = None
    try:
        worker = cls(spec)
        worker.send(("ready",))
        worker.loop()
        _quick_exit(0)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
        _quick_exit(0)
    except EOFError:  # the host closed its end: it is gone
        _quick_exit(0)
    except BaseException:
        try:
            if worker is not None:
                worker.fail()
            else:
                spec.outbox.put(("error", traceback.format_exc(), None), timeout=10.0)
        except Exception:
            pass
        os._exit(1)


# --------------------------------------------------------------------------- RRQ (replay manager side)


class ReplayServer:
    """The replay manager's side of the RRQ: one request in, one reply out.

    Requests (tuples) and replies:

    ============================================  ===================================
    request                                       reply
    ============================================  ===================================
    ``("insert", obs, action, reward, next_obs,   ``("inserted", slots)``: rows enter
    done)``                                       at the running max priority
    ``("sample", batch_size)``                    ``("sampled", SampledBatch)``
    ``("update", indices, td_errors)``            ``("updated", n)``: priorities
                                                  ``(|td| + eps) ** alpha``
    ============================================  ===================================

    Errors of the replay (bad input) propagate to the caller unchanged.
    """

    def __init__(self, replay: ReplayManager):
        self.replay = replay

    def handle(self, request: tuple) -> tuple:
        op = request[0]
        if op == "insert":
            return ("inserted", self.replay.add(*request[1:6]))
        if op == "sample":
            return ("sampled", self.replay.sample(request[1]))
        if op == "update":
            self.replay.update_priorities(request[1], request[2])
            return ("updated", len(request[1]))
        raise InvalidValueError(
            f"ReplayServer: unknown request {op!r}; expected 'insert', 'sample' or 'update'."
        )


class LocalRRQ:
    """The RRQ for a replay manager that lives in the host process.

    ``put(request)`` has the server answer at once and queues the reply;
    ``get()`` returns replies in request order. Bounded: more than ``maxsize``
    unread replies raise :class:`queue.Full`. A replay manager in another
    process or on a device would offer the same two calls over a real queue
    pair; the host loop does not change.
    """

    def __init__(self, server: ReplayServer, maxsize: int = 8):
        self.server = server
        self.maxsize = maxsize
        self._replies: collections.deque = collections.deque()

    def put(self, item: tuple, block: bool = True, timeout: float | None = None) -> None:
        if len(self._replies) >= self.maxsize:
            raise queue.Full
        self._replies.append(self.server.handle(item))

    def put_nowait(self, item: tuple) -> None:
        self.put(item, block=False)

    def get(self, block: bool = True, timeout: float | None = None) -> tuple:
        if not self._replies:
            raise queue.Empty
        return self._replies.popleft()

    def get_nowait(self) -> tuple:
        return self.get(block=False)

    def call(self, request: tuple) -> tuple:
        """``put`` then ``get``: one request, its reply."""
        self.put(request)
        return self.get()


# --------------------------------------------------------------------------- setting 1


class _Learner(_Base):
    def __init__(self, spec: LearnerSpec):
        super().__init__(spec)
        self.ring = SlotRing.attach(spec.batch_ring)
        b = self.ring.rows
        # Views built once per slot: the trainer reads the host's rows in place.
        self.batches = [
            Batch(obs=s["obs"], action=s["action"], reward=s["reward"], next_obs=s["next_obs"], done=s["done"])
            for s in (self.ring.slot(i) for i in range(self.ring.n_slots))
        ]
        self.batch_size = b

    def loop(self) -> None:
        inbox = self.spec.inbox
        every = self.spec.metrics_every
        while True:
            try:
                msg = inbox.get(timeout=0.5)
            except queue.Empty:
                if self.gone() or self.ctrl.stop:
                    return
                continue
            kind = msg[0]
            if kind == "train":
                seq = msg[1]
                slot = self.ring.slot(seq)
                t = time.perf_counter()
                result = self.trainer.update_policy(self.batches[seq % self.ring.n_slots], slot["weights"])
                self.learn_s += time.perf_counter() - t
                slot["td"][:] = check_td_errors(result.td_errors, self.batch_size, "Trainer.update_policy")
                self.after_update()
                metrics = dict(result.metrics) if self.updates % every == 0 else None
                self.send(("done", seq, metrics, self.learn_s))
            elif kind == "state":
                self.send(("state", self.state_blob()))
            elif kind == "stop":
                return


def run_learner(spec: LearnerSpec) -> None:
    """Process entry point of the setting-1 learner."""
    _guard(_Learner, spec)


# --------------------------------------------------------------------------- setting 2


class _Colocated(_Base):
    def __init__(self, spec: LearnerSpec):
        from pearl_core.replay import StorageSpec
        from pearl_core.runtime.wiring import build_replay

        super().__init__(spec)
        state = load_blob(spec.replay_state) if spec.replay_state is not None else None
        self.replay = build_replay(spec.config, spec.plan, StorageSpec.from_spaces(*self.spaces), state=state)
        self.rings = [SlotRing.attach(h) for h in spec.actor_rings]
        self.batch_size = spec.config.batch_size

    def state_blob(self, with_replay: bool = False) -> bytes:
        from pearl_core.runtime.wiring import replay_state

        replay = replay_state(self.replay) if with_replay else None
        return dump_blob({"trainer": self.trainer.state_dict(), "replay": replay, "updates": self.updates})

    def handle(self, msg) -> bool:
        kind = msg[0]
        if kind == "insert":
            _, actor, seq, n = msg
            ring = self.rings[actor]
            s = ring.slot(seq)
            self.replay.add(s["obs"][:n], s["action"][:n], s["reward"][:n], s["next_obs"][:n], s["done"][:n])
            ring.release(seq)
        elif kind == "state":
            self.send(("state", self.state_blob(bool(msg[1]))))
        elif kind == "stop":
            return False
        return True

    def loop(self) -> None:
        inbox, ctrl = self.spec.inbox, self.ctrl
        every = self.spec.metrics_every
        b = self.batch_size
        replay = self.replay
        trainer = self.trainer
        idle_checks = 0
        while True:
            can_train = self.updates < ctrl.update_budget and replay.size >= 1
            # Drain the host's messages; wait for one only when there is nothing to train.
            timeout = 0.0 if can_train else 0.01
            handled = False
            while inbox.poll(timeout):
                if not self.handle(inbox.get()):
                    return
                timeout, handled = 0.0, True
            if handled:  # a state request comes after the host's budget stop: no update after a snapshot
                can_train = self.updates < ctrl.update_budget and replay.size >= 1
            if not can_train:
                idle_checks += 1
                if idle_checks % 50 == 0 and (self.gone() or ctrl.stop):
                    return
                continue
            sampled = replay.sample(b)
            t = time.perf_counter()
            result = trainer.update_policy(sampled.batch, sampled.weights)
            self.learn_s += time.perf_counter() - t
            td = check_td_errors(result.td_errors, b, "Trainer.update_policy")
            if replay.keeps_priorities:  # uniform replay's update would only validate again
                replay.update_priorities(sampled.indices, td)
            self.after_update()
            if self.updates % every == 0:
                self.send(("metrics", self.updates, dict(result.metrics), self.learn_s))


def run_colocated(spec: LearnerSpec) -> None:
    """Process entry point of the setting-2 worker (replay manager + storage + learner)."""
    _guard(_Colocated, spec)

