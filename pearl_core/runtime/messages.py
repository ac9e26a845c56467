"""The parallel runtime's protocol messages, one type each, named after the paper's queues.

Bulk data never travels in a message: transitions, batches and TD errors sit in
shared-memory slots (:class:`~pearl_core.runtime.shm.SlotRing`), and a message
names the slot. Every queue is bounded (:class:`~pearl_core.runtime.queues.PipeQueue`).

========  ========================  =============================================
queue     direction                 messages
========  ========================  =============================================
DCQ       actor -> host             :class:`ActorReady`, :class:`Experience`,
                                    :class:`Dropped`, :class:`ActorFailed`
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

Besides messages, every worker tells the host what it is doing through two
shared word (:class:`~pearl_core.runtime.shared.Heartbeat`): a heartbeat
counter and a :class:`Phase`; the host's stall watchdog reads it.
"""

from __future__ import annotations

import enum
from typing import Any, Mapping, NamedTuple

__all__ = [
    "ALL_ENVS",
    "ActorFailed",
    "ActorReady",
    "Dropped",
    "Experience",
    "Forward",
    "LearnerFailed",
    "LearnerReady",
    "Phase",
    "Progress",
    "StateReply",
    "StateRequest",
    "Stop",
    "Train",
    "Trained",
]


#: ``Phase.ENV_STEP`` / ``ENV_RESET`` argument of a vector back end stepping or resetting every env at once
#: (the largest 32-bit argument a heartbeat carries, so it reads back unchanged).
ALL_ENVS = 0xFFFFFFFF


class Phase(enum.IntEnum):
    """What a worker is doing, as it tells the host (with an argument, e.g. an environment index).

    :meth:`describe` turns a phase and its argument into the words of a stall report.
    """

    STARTING = 0
    THROTTLED = 1  # waiting for its env budget
    GET_ACTION = 2
    ENV_STEP = 3  # arg: the environment's index (ALL_ENVS: a vector back end stepping them all)
    ENV_RESET = 4  # arg: the environment's index
    SLOT_WAIT = 5  # waiting for a free experience slot
    SENDING = 6  # waiting for room in its queue to the host
    WAITING = 7  # waiting for the host's messages
    UPDATE = 8  # arg: the update's number
    INSERTING = 9
    STATE = 10  # answering a state request
    PUBLISHING = 11  # arg: the update's number

    def describe(self, arg: int = 0) -> str:
        return {
            Phase.STARTING: "starting",
            Phase.THROTTLED: "waiting for its env budget",
            Phase.GET_ACTION: "in trainer.get_action",
            Phase.ENV_STEP: "in a vector env step (all environments)" if arg == ALL_ENVS
            else f"in env.step of environment {arg}",
            Phase.ENV_RESET: "in a vector env reset (all environments)" if arg == ALL_ENVS
            else f"in env.reset of environment {arg}",
            Phase.SLOT_WAIT: "waiting for a free experience slot",
            Phase.SENDING: "waiting for room in its queue to the host",
            Phase.WAITING: "waiting for the host's messages",
            Phase.UPDATE: f"in trainer.update_policy (update {arg})",
            Phase.INSERTING: "inserting experience into the replay",
            Phase.STATE: "answering a state request (trainer.state_dict)",
            Phase.PUBLISHING: f"publishing the weights of update {arg} (trainer.get_weights)",
        }[self]


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


class Dropped(NamedTuple):
    """The actor dropped transitions with non-finite values (``on_nonfinite="drop"``).

    ``total`` is the actor slot's count so far (also in the shared control words);
    ``detail`` describes the latest drop. Sent for the first drop, then at most
    every few seconds, never blocking the actor.
    """

    actor: int
    total: int
    detail: str


class ActorFailed(NamedTuple):
    """The actor's loop raised; it exits with code 1 after sending this.

    ``data_error``: the message of a :class:`~pearl_core.errors.DataError` (non-finite
    data from the environment with ``on_nonfinite="stop"``), which ends the run
    instead of restarting the actor; ``""`` for any other failure.
    """

    actor: int
    traceback: str
    data_error: str = ""


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
    """Setting 2: ``updates`` updates done so far, the latest metrics and the total learner time.

    ``phases`` is where the worker's time went this segment, in seconds per phase
    (:data:`pearl_core.runtime.learner.PHASES`).
    """

    updates: int
    metrics: Mapping[str, float]
    learner_s: float
    phases: Mapping[str, float] | None = None


class StateReply(NamedTuple):
    """The answer to :class:`StateRequest`: a :func:`~pearl_core.runtime.learner.dump_blob` of
    ``{"trainer": state_dict, "replay": contents or None, "updates": n}``."""

    blob: bytes


class LearnerFailed(NamedTuple):
    """The learner raised. ``blob``: its trainer state if it could still be saved and is finite,
    else ``None``; ``error``: ``"ExceptionType: message"`` of what it raised."""

    traceback: str
    blob: bytes | None
    error: str = ""


Message = Any  # any of the above
