"""The host's two roles, one per protocol setting, over the host's shared parts.

The host (:mod:`pearl_core.runtime.host`) starts the processes, reads the actors'
DCQs, keeps the budgets, evaluates, checkpoints and shuts down the same way in
both settings. What differs is where the replay manager lives and so what the
host does with an actor's slot and with the learner's replies:

* :class:`ThroughHost` (setting 1): the replay manager is in the host, behind
  the RRQ. An actor's rows are inserted and its slot released at once; the host
  samples batches into the learner's slots (at most ``max_in_flight + 1`` at the
  learner), and applies each :class:`~pearl_core.runtime.messages.Trained`
  batch's TD errors as priorities.
* :class:`Colocated` (setting 2): the replay manager lives with the learner. An
  actor's slot is forwarded (:class:`~pearl_core.runtime.messages.Forward`) and
  the worker releases it; the host only sets the update budget and reads
  :class:`~pearl_core.runtime.messages.Progress`.
"""

from __future__ import annotations

import collections
import queue
from typing import Any, Callable, Mapping

import numpy as np

from pearl_core.errors import PearlError
from pearl_core.replay.storage import transition_rows
from pearl_core.runtime.checkpoint import dump_blob
from pearl_core.runtime.learner import run_colocated, run_learner
from pearl_core.runtime.messages import Forward, Progress, Train, Trained
from pearl_core.runtime.rrq import make_rrq
from pearl_core.runtime.shm import SlotRing
from pearl_core.runtime.step import LearnerStep
from pearl_core.runtime.wiring import build_replay, replay_state

__all__ = ["Colocated", "HostRole", "ThroughHost", "batch_fields"]


def batch_fields(spec) -> dict[str, tuple[tuple[int, ...], Any]]:
    """Per-row fields of a learner batch slot: the transition fields, the IS weight and the TD error."""
    return {**spec.fields(), "weights": ((), np.float32), "td": ((), np.float64)}


class HostRole:
    """What one protocol setting adds to the host. Subclasses implement every method.

    A role is handed its :class:`~pearl_core.runtime.host.Host` (not imported here:
    the host imports the roles) and reads its shared parts: ``cfg``, ``plan``,
    ``spec``, ``arena``, ``rings``, ``ctrl``, ``inbox``, ``session``, ``accepting``,
    ``learn_s0`` and :meth:`~pearl_core.runtime.host.Host.owed`.
    """

    #: Entry point of the learner-side process.
    target: Callable[[Any], None]

    def __init__(self, host: Any):
        self.host = host

    def build(self, checkpoint) -> dict[str, Any]:
        """Make this setting's shared parts; returns the extra :class:`LearnerSpec` fields."""
        raise NotImplementedError

    def updates(self) -> int:
        """Completed learner updates."""
        raise NotImplementedError

    def busy(self) -> bool:
        """Work still in flight (batches at the learner, forwards not yet sent)."""
        raise NotImplementedError

    def in_flight(self) -> bool:
        """Batches at the learner whose priorities are not back yet."""
        return False

    def reads_actors(self) -> bool:
        """Whether the host may take more actor slots now."""
        return True

    def deliver(self, actor: int, seq: int, rows: int) -> None:
        """The host took ``rows`` rows of slot ``seq`` of ``actor``'s ring (episodes already recorded)."""
        raise NotImplementedError

    def on_reply(self, msg) -> bool:
        """Handle a setting-specific LDQ message; ``False`` if it is not one."""
        return False

    def after_pump(self) -> None:
        """Called after every pump."""

    def feed(self) -> None:
        """Keep the learner supplied (called every loop iteration)."""

    def set_update_budget(self, owed: int) -> None:
        """The updates the inserted env steps owe."""

    def quiesce(self) -> None:
        """The run is ending: no new updates."""

    def pump_timeout(self) -> float:
        return 0.02

    # The setting-2 journal (see Colocated.build); the host's own replay needs none.
    def journal_mark(self) -> int:
        return 0

    def checkpointed(self, mark: int) -> None:
        """A checkpoint with the replay was written, covering the forwards up to ``mark``."""

    def journal_rows(self) -> tuple[np.ndarray, ...] | None:
        return None

    def unsent(self) -> bool:
        """Rows the host counted but has not yet sent to the learner side (setting 2's pending forwards)."""
        return False

    def learner_holds_replay(self) -> bool:
        """Whether the replay's contents come from the learner's state reply."""
        return False

    def replay_contents(self) -> Mapping[str, Any] | None:
        """The replay's contents for a checkpoint, where the host holds them."""
        return None


class ThroughHost(HostRole):
    """Setting 1: the replay manager in the host, batches and priorities through it."""

    target = staticmethod(run_learner)

    def build(self, checkpoint) -> dict[str, Any]:
        h = self.host
        cfg, plan = h.cfg, h.plan
        self.replay = build_replay(cfg, plan, h.spec, state=checkpoint.replay if checkpoint is not None else None)
        self.rrq = make_rrq(plan, LearnerStep(None, self.replay, cfg.batch_size, updates=h.session.state.updates))
        self.ring = SlotRing.create(h.arena, batch_fields(h.spec), n_slots=plan.max_in_flight + 1,
                                    rows=cfg.batch_size, tag="laq")
        self.slots = [self.ring.slot(i) for i in range(self.ring.n_slots)]
        self.inflight: collections.deque = collections.deque()  # (seq, indices)
        self.next_seq = 0
        self.cap = plan.max_in_flight + 1
        return {"batch_ring": self.ring.handle}

    def updates(self) -> int:
        return self.rrq.updates

    def busy(self) -> bool:
        return bool(self.inflight)

    def in_flight(self) -> bool:
        return bool(self.inflight)

    def deliver(self, actor: int, seq: int, rows: int) -> None:
        ring = self.host.rings[actor]
        if rows:
            self.host.doing = "inserting an actor's rows into the replay (replay manager)"
            self.rrq.insert(ring.slot(seq), rows)
        ring.release(seq)

    def on_reply(self, msg) -> bool:
        if type(msg) is not Trained:
            return False
        want, indices = self.inflight.popleft()
        if want != msg.seq:
            raise PearlError(f"LDQ out of order: got batch {msg.seq}, expected {want}.")
        self.host.doing = f"applying the priorities of trained batch {msg.seq} (replay manager)"
        self.rrq.update(indices, self.slots[msg.seq % self.cap]["td"])
        self.host.session.record_metrics(msg.metrics, self.host.learn_s0 + msg.learner_s)
        return True

    def feed(self) -> None:
        """Keep up to ``max_in_flight + 1`` sampled batches at the learner."""
        h = self.host
        if not h.accepting:  # the run is ending
            return
        owed = h.owed(h.session.state.env_steps)
        rrq, inflight = self.rrq, self.inflight
        while len(inflight) < self.cap and rrq.updates + len(inflight) < owed and rrq.size:
            seq = self.next_seq
            self.next_seq += 1
            inflight.append((seq, rrq.sample_into(self.slots[seq % self.cap])))
            h.inbox.put(Train(seq))  # never blocks: the queue holds more than cap

    def pump_timeout(self) -> float:
        return 0.002 if self.inflight else 0.02

    def replay_contents(self) -> Mapping[str, Any] | None:
        return replay_state(self.replay)


class Colocated(HostRole):
    """Setting 2: replay manager, Data Storage and learner in one worker; the host forwards slots."""

    target = staticmethod(run_colocated)

    def build(self, checkpoint) -> dict[str, Any]:
        self.pending: collections.deque = collections.deque()  # forwards not yet sent
        # With save_replay the host keeps a copy of every row it forwards since the last checkpoint that
        # holds the worker's replay (a write-ahead journal): if the worker dies with the replay, that
        # checkpoint plus the journal is everything the run counted (Host.fail, pearl_core.runtime.hostfaults).
        self.journal: list[tuple[np.ndarray, ...]] | None = [] if self.host.cfg.save_replay else None
        self.sent = 0  # forwards put on the LAQ
        self.journal_base = 0  # forwards before journal[0] (already in a checkpoint)
        blob = dump_blob(checkpoint.replay) if checkpoint is not None and checkpoint.replay is not None else None
        return {"replay_state": blob}

    def journal_mark(self) -> int:
        """Forwards the worker has been sent so far (a state request sent now covers them)."""
        return self.sent

    def checkpointed(self, mark: int) -> None:
        """A checkpoint holds the worker's replay up to forward ``mark``: drop those journal entries."""
        if self.journal is not None and mark > self.journal_base:
            del self.journal[:mark - self.journal_base]
            self.journal_base = mark

    def journal_rows(self) -> tuple[np.ndarray, ...] | None:
        """Every row forwarded since the last checkpoint with the worker's replay, per field (None: none)."""
        return tuple(np.concatenate(parts) for parts in zip(*self.journal)) if self.journal else None

    def unsent(self) -> bool:
        return bool(self.pending)

    def updates(self) -> int:
        return self.host.ctrl.updates

    def busy(self) -> bool:
        return bool(self.pending)

    def reads_actors(self) -> bool:
        return not self.pending  # backpressure: read actors only once forwards flowed

    def deliver(self, actor: int, seq: int, rows: int) -> None:
        if self.journal is not None and rows:
            self.journal.append(tuple(np.array(r) for r in transition_rows(self.host.rings[actor].slot(seq), rows)))
        self.pending.append(Forward(actor, seq, rows))
        self.after_pump()

    def on_reply(self, msg) -> bool:
        if type(msg) is not Progress:
            return False
        self.host.session.record_metrics(msg.metrics, self.host.learn_s0 + msg.learner_s)
        if msg.phases:
            self.host.session.learner_phases = dict(msg.phases)
        return True

    def after_pump(self) -> None:
        pending, inbox = self.pending, self.host.inbox
        while pending:
            try:
                inbox.put_nowait(pending[0])
            except (queue.Full, OSError):  # full; or the worker is gone (its exit is reported by the pump)
                return
            if pending.popleft().rows:
                self.sent += 1

    def set_update_budget(self, owed: int) -> None:
        self.host.ctrl.update_budget = owed

    def quiesce(self) -> None:
        self.host.ctrl.update_budget = 0

    def learner_holds_replay(self) -> bool:
        return True
