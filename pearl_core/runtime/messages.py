"""The parallel runtime's protocol messages, one type each, named after the paper's queues.

Bulk data never travels in a message: transitions, batches and TD errors sit in
shared-memory slots (:class:`~pearl_core.runtime.shm.SlotRing`), and a message
names the slot. Every queue is bounded (:class:`~pearl_core.runtime.queues.PipeQueue`).

========  ========================  =============================================
queue     direction                 messages
========  ========================  =============================================
DCQ       actor -> host             :class:`ActorReady`, :class:`Experience`,
                                    :class:`ActorFailed`
LAQ       host -> learner           :class:`Train` (setting 1), :class:`Forward`
                                    (setting 2: an actor's slot to insert),
                                    :class:`StateRequest`, :class:`Stop`
LDQ       learner -> host           :class:`LearnerReady`, :class:`Trained`
                                    (setting 1), :class:`Progress` (setting 2),
                                    :class:`StateReply`, :class:`LearnerFailed`
RRQ       host <-> replay manager   in process, a direct call
                                    (:mod:`pearl_core.runtime.rrq`)
========  ========================  =============================================

Receivers dispatch on the message's type (``type(msg)``), never on a position.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

__all__ = [
    "ActorFailed",
    "ActorReady",
    "Experience",
    "Forward",
    "LearnerFailed",
    "LearnerReady",
    "Progress",
    "StateReply",
    "StateRequest",
    "Stop",
    "Train",
    "Trained",
]


# ------------------------------------------------------------------ DCQ: actor -> host
class ActorReady(NamedTuple):
    """The actor built its environments and policy and is about to step."""

    actor: int


class Experience(NamedTuple):
    """Slot ``seq`` of the actor's ring holds ``rows`` transitions and ``episodes`` finished-episode records."""

    actor: int
    seq: int
    rows: int
    episodes: int


class ActorFailed(NamedTuple):
    """The actor's loop raised; it exits with code 1 after sending this."""

    actor: int
    traceback: str


# ------------------------------------------------------------------ LAQ: host -> learner
class Train(NamedTuple):
    """Setting 1: batch slot ``seq`` of the learner's ring is filled; train on it."""

    seq: int


class Forward(NamedTuple):
    """Setting 2: insert the first ``rows`` rows of slot ``seq`` of actor ``actor``'s ring, then release it."""

    actor: int
    seq: int
    rows: int


class StateRequest(NamedTuple):
    """Send the trainer's state (and, if ``with_replay`` and the worker holds it, the replay's contents)."""

    with_replay: bool


class Stop(NamedTuple):
    """Leave the loop and exit."""


# ------------------------------------------------------------------ LDQ: learner -> host
class LearnerReady(NamedTuple):
    """The learner (or the setting-2 worker) is built and waiting."""


class Trained(NamedTuple):
    """Setting 1: the TD errors of batch slot ``seq`` are in the slot.

    ``metrics`` come every ``metrics_every`` updates (else ``None``);
    ``learner_s`` is the learner's total time in ``update_policy``.
    """

    seq: int
    metrics: Mapping[str, float] | None
    learner_s: float


class Progress(NamedTuple):
    """Setting 2: ``updates`` updates done so far, the latest metrics and the total learner time."""

    updates: int
    metrics: Mapping[str, float]
    learner_s: float


class StateReply(NamedTuple):
    """The answer to :class:`StateRequest`: a :func:`~pearl_core.runtime.learner.dump_blob` of
    ``{"trainer": state_dict, "replay": contents or None, "updates": n}``."""

    blob: bytes


class LearnerFailed(NamedTuple):
    """The learner raised. ``blob``: its trainer state if it could still be saved, else ``None``."""

    traceback: str
    blob: bytes | None


Message = Any  # any of the above
