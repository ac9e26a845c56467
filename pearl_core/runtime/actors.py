"""Actor processes: step a few environments together, act with a local policy copy,
ship experience through a shared-memory slot ring.

One actor process runs ``plan.envs_per_actor`` gymnasium environments in lock
step with the serial runtime's :class:`~pearl_core.runtime.acting.Collector`
(one batched ``get_action`` per step) and its own trainer copy::

    loop until the host says stop (or the host process is gone):
        wait while sum(actor_steps) >= env_budget             # replay-ratio throttle
        every weight_check_every steps: pull newer weights from the WeightBuffer
        trainer.env_steps = sum(actor_steps)                   # global exploration schedule
        out = collector.step(trainer, explore=True)            # every env steps once
        copy out's transition rows into the current slot,
        record finished episodes (return, length) in the slot
        slot full -> ring.commit(); DCQ.put(Experience(actor, seq, rows, episodes))

``done`` is gymnasium's ``terminated`` (a time-limit truncation still bootstraps),
and ``next_obs`` is the true last observation of an episode, never the reset one
(the Collector's rules, so serial and parallel runs store the same rows).

With ``replay.n_step > 1`` the Collector ships n-step transitions (its
:class:`~pearl_core.runtime.acting.NStepAggregator`): an actor's rows, and the
host's env-step count made of them, lag its environments by at most ``n - 1``
steps each, and the windows still open when the run stops are not shipped (the
host no longer takes rows then), so the count equals the rows stored.

The DCQ is a :class:`~pearl_core.runtime.queues.PipeQueue` per actor; its messages
(:mod:`pearl_core.runtime.messages`) hold only slot numbers: ``ActorReady`` once
built, ``Experience(actor, seq, rows, episodes)``, ``ActorFailed(actor, traceback)``. A full ring (the host is
behind) blocks the actor: that is the backpressure. When the actor has been
throttled for ``SHIP_PARTIAL_AFTER_S`` (the learner used up what was delivered,
or the run is ending) it ships its partly filled slot, so no transition waits
long for a full slot; the host's budget slack (two slots per actor) keeps the
learner busy meanwhile.

Errors: an exception in the loop is sent to the host as ``ActorFailed`` and the
process exits with code 1; the host decides whether to
restart it. An actor exits by itself when the host's stop flag is set or the
host process is gone (:class:`~pearl_core.runtime.procs.HostWatch`).

Data sanity: the collector checks every transition for NaN/inf. With
``on_nonfinite="stop"`` the actor first ships the good rows of its slot, then
reports the :class:`~pearl_core.errors.DataError` (``ActorFailed.data_error``):
the host ends the run instead of restarting it. With ``"drop"`` the bad rows are
left out (not counted as env steps), the slot's count ``Control.dropped[i]``
grows, and a :class:`~pearl_core.runtime.messages.Dropped` note reaches the host
(the first drop, then at most every ``DROP_NOTE_EVERY_S``).

Heartbeat: before every ``get_action``, ``env.step`` and ``env.reset`` and in every
wait the actor marks what it does (``Control.heartbeat``); the host's stall watchdog
ends the run when the mark stops moving (a frozen ``env.step``).
"""

from __future__ import annotations

import dataclasses
import os
import queue
import time
import traceback
from typing import Any

import numpy as np

from pearl_core.runtime.vector import make_vector_envs
from pearl_core.errors import DataError
from pearl_core.replay.storage import copy_rows
from pearl_core.runtime.acting import Collector, actor_env_seeds
from pearl_core.runtime.config import RunConfig
from pearl_core.runtime.messages import ActorFailed, ActorReady, Dropped, Experience, Phase
from pearl_core.runtime.procs import HostWatch, ignore_stop_signals, quick_exit
from pearl_core.runtime.queues import PipeQueue, put_while
from pearl_core.runtime.shared import Control, WeightBuffer, WeightHandle
from pearl_core.runtime.shm import BlockHandle, RingHandle, SlotRing
from pearl_core.runtime.wiring import build_trainer, load_trainer_class

__all__ = ["ActorSpec", "DROP_NOTE_EVERY_S", "SHIP_PARTIAL_AFTER_S", "actor_seeds", "experience_fields",
           "run_actor"]

#: A throttled actor ships its partly filled slot after waiting this long (seconds).
SHIP_PARTIAL_AFTER_S = 0.02
#: Seconds between two :class:`Dropped` notes of one actor (the count itself is exact, in shared memory).
DROP_NOTE_EVERY_S = 2.0


def experience_fields(spec, rows: int, n_envs: int) -> dict[str, tuple[tuple[int, ...], Any]]:
    """Per-row fields of an experience slot for a :class:`~pearl_core.replay.StorageSpec`.

    Transition fields have ``rows`` rows; the episode records (``ep_return``,
    ``ep_length``) have ``rows + n_envs`` rows, enough for every episode that can
    end while one slot fills. :class:`SlotRing` gives all fields the same row
    count, so the ring is built with ``rows + n_envs`` rows and only the first
    ``rows`` carry transitions.
    """
    return {**spec.fields(), "ep_return": ((), np.float64), "ep_length": ((), np.int64)}


@dataclasses.dataclass(frozen=True)
class ActorSpec:
    """Everything an actor process needs (picklable, passed at spawn).

    Attributes:
        actor_id: the actor's slot ``0 <= i < n_actors`` (kept across restarts).
        incarnation: 0 for the first start, ``k`` for the ``k``-th restart.
        config: the run configuration (environment, trainer, seed).
        n_actors: actors in the run (for seeding).
        n_envs: environments stepped together.
        batch_rows: transitions per DCQ message (``plan.insert_batch``).
        ring, control, weights: shared-memory handles.
        dcq: the actor's queue to the host.
        weight_check_every: vector steps between looks at the weight version.
        env_seed_offset: added to every environment index (a resumed run passes
            its env-step count, as the serial runtime does, so it starts new episodes).
        vector_backend: how the actor steps its environments (``RuntimePlan.vector_backend``).
    """

    actor_id: int
    incarnation: int
    config: RunConfig
    n_actors: int
    n_envs: int
    batch_rows: int
    ring: RingHandle
    control: BlockHandle
    weights: WeightHandle
    dcq: PipeQueue
    weight_check_every: int = 1
    env_seed_offset: int = 0
    vector_backend: str = "loop"


def run_actor(spec: ActorSpec) -> None:
    """Process entry point of one actor (target of ``Process``)."""
    # Ctrl-C in a terminal (or its closing: SIGHUP) reaches the whole process group; the host alone
    # decides when to stop, and tells the actors through the control block.
    ignore_stop_signals()
    spec.dcq.close_receiver()  # the host reads; if it dies, our next put fails instead of blocking
    try:
        import torch

        torch.set_num_threads(1)
        _Actor(spec).run()
        quick_exit(0)
    except SystemExit as exc:
        if exc.code in (0, None):
            quick_exit(0)
        _report(spec)
    except DataError as exc:  # bad data from the environment: the run ends, no restart
        _report(spec, str(exc))
    except BaseException:  # noqa: BLE001 - a worker reports any failure to the host, KeyboardInterrupt too
        _report(spec)


def _report(spec: ActorSpec, data_error: str = "") -> None:
    try:
        spec.dcq.put(ActorFailed(spec.actor_id, traceback.format_exc(), data_error), timeout=5.0)
    except Exception:  # noqa: BLE001 - the host may be gone; the worker exits 1 either way
        pass
    os._exit(1)


def actor_seeds(config: RunConfig, actor_id: int, incarnation: int, n_actors: int, n_envs: int,
                offset: int = 0) -> tuple[list[int], int]:
    """Reset seeds of an actor's environments and the seed of its exploration stream.

    Environment ``j`` of actor ``i`` is global environment ``i * n_envs + j`` and
    is reset with :func:`~pearl_core.runtime.acting.actor_env_seeds` of that
    index, so one actor with ``n`` environments replays the serial runtime's
    ``n`` environments exactly. A restarted actor (``incarnation k``) takes the
    next unused block of indices, so it never replays its predecessor's episodes.
    Actor 0's first incarnation explores with ``config.seed`` (as the serial
    runtime's trainer does); other actors derive distinct streams from it.
    """
    first = offset + (incarnation * n_actors + actor_id) * n_envs
    trainer_seed = int(config.seed) if (actor_id, incarnation) == (0, 0) else int(
        np.random.SeedSequence([int(config.seed), actor_id, incarnation]).generate_state(1)[0]
    )
    return actor_env_seeds(config, n_envs, first=first), trainer_seed


class _Actor:
    def __init__(self, spec: ActorSpec):
        self.spec = spec
        self.ctrl = Control.attach(spec.control)
        self.ring = SlotRing.attach(spec.ring)
        self.weights = WeightBuffer.attach(spec.weights)
        env_seeds, trainer_seed = actor_seeds(
            spec.config, spec.actor_id, spec.incarnation, spec.n_actors, spec.n_envs, spec.env_seed_offset
        )
        me, ctrl = spec.actor_id, self.ctrl
        self.mark = ctrl.heartbeat(me)  # mark(phase, arg): alive, and what it is doing (the host's watchdog)
        # The trainer's module first: a package that registers its environments on import works here too.
        load_trainer_class(spec.config.trainer)
        envs = make_vector_envs(spec.vector_backend, spec.config.env_id, env_seeds, spec.config.env_options,
                                mark=self.mark)
        self.collector = Collector(envs, env_seeds, env_id=spec.config.env_id, on_nonfinite=spec.config.on_nonfinite,
                                   where=f"actor {me}", mark=self.mark, n_step=spec.config.replay.n_step,
                                   random_steps=spec.config.random_steps)
        # The host checked the trainer class already; actors skip the smoke test.
        self.trainer = build_trainer(
            spec.config, envs.observation_space, envs.action_space, seed=trainer_seed, check=False
        )
        self._w = self.weights.empty_like()
        self.version = 0
        self.host = HostWatch()  # is the host still alive? (pearl_core.runtime.procs)
        self._note_at = 0.0  # when the next Dropped note may go

    def stopping(self) -> bool:
        return self.ctrl.stop or self.host.gone()

    def waiting(self, phase: Phase) -> bool:
        """A wait's poll: still alive, doing ``phase``; whether to give up (the run is stopping)."""
        self.mark(phase)
        return self.stopping()

    def dropped(self, k: int) -> None:
        """``k`` transitions of the last step were dropped: count them, note the host now and then."""
        me = self.spec.actor_id
        self.ctrl.dropped[me] += k
        now = time.monotonic()
        if now >= self._note_at:
            try:  # a note never blocks the actor: if the queue is full, the next one tells
                self.spec.dcq.put_nowait(Dropped(me, int(self.ctrl.dropped[me]), self.collector.last_drop))
                self._note_at = now + DROP_NOTE_EVERY_S
            except queue.Full:
                pass

    def pull_weights(self) -> None:
        v = self.weights.read_into(self._w, newer_than=self.version)
        if v is not None:
            self.trainer.set_weights(self._w)
            self.version = v

    def run(self) -> None:
        spec, ctrl, ring, trainer, collector = self.spec, self.ctrl, self.ring, self.trainer, self.collector
        rows = spec.batch_rows
        me = spec.actor_id
        fill = 0  # transitions already in the current slot
        n_eps = 0  # episode records in the current slot
        slot: dict[str, np.ndarray] | None = None
        vec_steps = 0
        check = max(1, spec.weight_check_every)
        self.pull_weights()
        self.mark(Phase.SENDING)
        if not put_while(spec.dcq, ActorReady(me), lambda: not self.waiting(Phase.SENDING)):
            return
        throttled = 0
        throttled_at = 0.0

        def ship() -> None:
            nonlocal fill, n_eps, slot
            seq = ring.commit()  # head moves before the message: a death in between only skips seq
            if not put_while(spec.dcq, Experience(me, seq, fill, n_eps), lambda: not self.waiting(Phase.SENDING)):
                raise SystemExit(0)
            fill, n_eps, slot = 0, 0, None

        while True:
            if self.stopping():
                return
            # Throttle: the host keeps env_budget a little ahead of what the learner can use. A vector step
            # is taken while any of the budget is left (it may pass the budget by up to n - 1 rows, which
            # the host does not take past max_env_steps): "total + n <= budget" could leave a run one row
            # short of its budget for ever, a vector step after an episode's reset adding fewer than n rows.
            if ctrl.total_steps() >= ctrl.env_budget:
                if throttled == 0:
                    throttled_at = time.monotonic()
                # A partly filled slot is shipped only after a real wait (the learner has caught up
                # with everything delivered, or the run is ending): in the steady state the budget
                # grows every learner update, and shipping then would send a message per update
                # holding a row or two, costing the actor, the host and the learner each a message.
                if (fill or n_eps) and time.monotonic() - throttled_at > SHIP_PARTIAL_AFTER_S:
                    ship()
                throttled += 1
                self.mark(Phase.THROTTLED)
                time.sleep(0.0005 if throttled < 50 else 0.002)  # poll fast at first, then back off
                continue
            throttled = 0
            if vec_steps % check == 0:
                self.pull_weights()
            trainer.env_steps = ctrl.total_steps()
            try:
                out = collector.step(trainer, explore=True)
            except DataError:
                if fill or n_eps:  # the rows collected before the bad step are good: deliver them first
                    ship()
                raise
            vec_steps += 1
            kept = len(out.reward)  # a dropped transition is not an env step of the run
            ctrl.actor_steps[me] += kept
            if out.dropped:
                self.dropped(out.dropped)

            # Copy the kept rows into the slot(s), splitting at the slot boundary.
            start = 0
            while start < kept:
                if slot is None:
                    if not ring.wait_writable(stop=lambda: self.waiting(Phase.SLOT_WAIT)):
                        return
                    slot = ring.slot(ring.head)
                k = min(kept - start, rows - fill)
                copy_rows(slot, out, dst_start=fill, src_start=start, n=k)
                fill += k
                start += k
                if fill == rows and start < kept:
                    ship()
            if out.episodes and slot is None:  # every row of this step was dropped; episodes still count
                if not ring.wait_writable(stop=lambda: self.waiting(Phase.SLOT_WAIT)):
                    return
                slot = ring.slot(ring.head)
            for ep in out.episodes:  # at most n per step; the slot has rows + n records
                slot["ep_return"][n_eps] = ep.episode_return
                slot["ep_length"][n_eps] = ep.length
                n_eps += 1
            if fill == rows or n_eps > rows:  # full, or (rows dropped) no room for another step's episodes
                ship()
