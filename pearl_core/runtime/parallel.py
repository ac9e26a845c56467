"""The parallel runtime: actor processes, a learner (setting 1) or a co-located
replay + learner worker (setting 2), and the host loop that moves messages.

Processes and queues (every queue bounded; bulk data only in shared memory)::

    actor i (x n_actors)                     host (this process)                    learner / worker
    ──────────────────────                   ───────────────────                    ────────────────
    envs + policy copy ──DCQ_i (slot ids)──▶ count steps, episodes
      ▲  writes rows into ring_i (shm)       setting 1 (roles.ThroughHost):
      │                                        RRQ: replay manager in this process
      │                                        insert rows of ring_i, release slot
      │                                        sample ──▶ batch slot s (shm) ──LAQ──▶ LearnerStep.train(slot s)
      │                                        apply(idx, TD of s) ◀──────LDQ──── TD errors into slot s
      │                                      setting 2 (roles.Colocated):
      │                                        Forward(i, seq) ─────────LAQ──────▶ worker reads ring_i,
      │                                                                            inserts, LearnerStep.step()
      └──────── WeightBuffer (shm, seqlock) ◀──────────────────────────────────── publish every
                                                                                   weight_sync_every updates
    Control (shm): stop flag, per-actor step counters, env budget (actor throttle),
    learner update count, update budget (setting-2 throttle)

The pieces: :mod:`~pearl_core.runtime.host` (the host loop and its
:class:`~pearl_core.runtime.session.RunSession`), :mod:`~pearl_core.runtime.roles`
(what each setting adds), :mod:`~pearl_core.runtime.actors`,
:mod:`~pearl_core.runtime.learner`, :mod:`~pearl_core.runtime.messages` (the
protocol), :mod:`~pearl_core.runtime.shm` / :mod:`~pearl_core.runtime.shared` /
:mod:`~pearl_core.runtime.queues` (transport). Stop criteria, evaluation, logs,
progress and checkpoints are the serial runtime's, so both runtimes produce the
same :class:`~pearl_core.runtime.control.RunResult`.

Faults (:mod:`~pearl_core.runtime.hostfaults`): an actor that raises or dies is
restarted (``max_restarts`` times per actor slot) and logged; past that the run
fails with :class:`ActorError`. A learner that raises or dies ends the run with
:class:`LearnerError` (carrying the worker's traceback). Non-finite data from an
environment ends the run with :class:`DataError` (``RunConfig.on_nonfinite="stop"``)
or is dropped, counted and logged (``"drop"``); an update whose weights are
non-finite is never published nor checkpointed. A worker or an evaluation without
progress for ``stall_timeout_s`` ends the run with :class:`StallError`; a failing
evaluation with :class:`EvaluationError`; an error in the host loop itself with
:class:`HostError`. Every one of them comes after a checkpoint of what is sound
(the learner's state, or the weights last published when the learner cannot
answer). SIGINT / SIGTERM / SIGHUP (to the host) end the run cleanly with a final checkpoint
(``stop_reason`` ``"interrupted"``) within seconds even when a worker is frozen
(then a :class:`StallError` follows the checkpoint); a second SIGINT aborts at
once. Every child process is stopped and every shared-memory segment unlinked
before :meth:`ParallelRuntime.run` returns or raises.
"""

from __future__ import annotations

import dataclasses

import math
import os
from typing import Any, Sequence

from pearl_core.errors import (
    ActorError,
    DataError,
    EvaluationError,
    HostError,
    LearnerError,
    SpecError,
    StallError,
    WorkerError,
)
from pearl_core.runtime.checkpoint import Checkpoint
from pearl_core.runtime.config import RunConfig, RuntimePlan
from pearl_core.runtime.control import RunResult
from pearl_core.runtime.host import Host
from pearl_core.runtime.procs import install_stop_handlers, restore_stop_handlers
from pearl_core.runtime.session import Runtime, int_at_least

__all__ = ["DEFAULT_STALL_TIMEOUT_S", "ActorError", "DataError", "EvaluationError", "HostError", "LearnerError",
           "ParallelRuntime", "StallError", "WorkerError"]

#: Seconds without progress of a worker after which a run ends with :class:`StallError`.
DEFAULT_STALL_TIMEOUT_S = 120.0


class ParallelRuntime(Runtime):
    """Train with actor processes and a learner process; returns a :class:`RunResult`.

    Args:
        config, plan, resume_from, progress, tensorboard, plot, metrics_every,
            display_every_s: as :class:`~pearl_core.runtime.session.Runtime`. Of the
            plan it uses ``setting`` (a :class:`~pearl_core.runtime.config.Setting`),
            ``n_actors``, ``envs_per_actor``, ``insert_batch`` (rows per DCQ message),
            ``max_in_flight``, ``queue_size`` (slots per actor ring and queue
            capacities), ``learner_threads``, ``rm_backend``/``rm_threads``.
        max_restarts: restarts allowed per actor slot before the run fails.
        weight_check_every: actor vector steps between looks at the weight version.
        actor_slack: env steps actors may run ahead of what the learner has
            consumed (``None``: two DCQ batches per actor plus the env steps of two
            of the learner's progress reports, ``2 * METRICS_EVERY / replay_ratio``); never less than
            ``1 / replay_ratio`` plus one step of every environment, so the
            learner's next update is always reachable.
        stall_timeout_s: seconds a worker (actor or learner) or an evaluation may go
            without progress (a call into the environment or the trainer that does
            not return) before the run ends with :class:`StallError`; also how long
            the host waits for the learner's answer to a state request. ``None``
            disables the watchdog (state requests then wait up to 120 s). Raise it
            for updates, or ``save_replay`` checkpoints, that take longer.

    Attributes:
        faults: after (or during) a run, one ``(wall_s, who, what)`` entry per
            detected failure (worker, stall, bad data, host).
        dropped_nonfinite: after (or during) a run, the transitions dropped for
            non-finite values (``on_nonfinite="drop"``) over the whole run, resumed
            segments included; also in the checkpoint's ``extra["dropped_nonfinite"]``
            and logged (logger ``pearl_core.runtime.data``).

    Raises:
        SpecError: bad config/plan/arguments, an unknown environment, a trainer
            path that does not resolve, or a checkpoint that does not fit.
        TrainerError: the trainer breaks the contract (checked in this process
            before any worker starts).
        SpecError: (from :meth:`run`) the main script has no file (``python - < script.py``):
            workers could not start.
    """

    _actor_processes = True

    def __init__(self, config: RunConfig, plan: RuntimePlan | None = None, *,
                 resume_from: str | os.PathLike | Checkpoint | None = None, progress: bool | None = None,
                 tensorboard: bool | None = None, plot: bool = True, metrics_every: int = 1_000,
                 display_every_s: float = 10.0, max_restarts: int = 3, weight_check_every: int = 1,
                 actor_slack: int | None = None, stall_timeout_s: float | None = DEFAULT_STALL_TIMEOUT_S,
                 callbacks: Sequence[Any] = ()):
        super().__init__(config, plan, resume_from=resume_from, progress=progress, tensorboard=tensorboard,
                         plot=plot, metrics_every=metrics_every, display_every_s=display_every_s, callbacks=callbacks)
        int_at_least("ParallelRuntime", "max_restarts", max_restarts, 0)
        int_at_least("ParallelRuntime", "weight_check_every", weight_check_every, 1)
        if actor_slack is not None and (isinstance(actor_slack, bool) or not isinstance(actor_slack, int)
                                        or actor_slack < 1):
            raise SpecError(f"ParallelRuntime: actor_slack = {actor_slack!r}; expected None or an int >= 1.")
        if stall_timeout_s is not None and (isinstance(stall_timeout_s, bool) or not isinstance(
                stall_timeout_s, (int, float)) or not (math.isfinite(stall_timeout_s) and stall_timeout_s > 0)):
            raise SpecError(f"ParallelRuntime: stall_timeout_s = {stall_timeout_s!r}; expected None (no watchdog) "
                            f"or seconds > 0 (default {DEFAULT_STALL_TIMEOUT_S:g}).")
        self.max_restarts = max_restarts
        self.weight_check_every = weight_check_every
        self.actor_slack = actor_slack
        self.stall_timeout_s = None if stall_timeout_s is None else float(stall_timeout_s)
        self.faults: list[tuple[float, str, str]] = []
        self.dropped_nonfinite = 0
        self._host: Host | None = None

    def pids(self) -> dict[str, list[int]]:
        """Process ids of the live workers of the current run (``{"actors": [...], "learner": [...]}``)."""
        host = self._host
        if host is None:
            return {"actors": [], "learner": []}
        actors = [p.pid for p in host.actor_procs if p is not None and p.is_alive()]
        proc = host.learner_proc
        learner: list[int] = [proc.pid] if proc is not None and proc.is_alive() else []
        return {"actors": actors, "learner": learner}

    def run(self) -> RunResult:
        """Train until a stop criterion fires (or an interrupt); write logs, checkpoint and curve.

        Every error below comes after a checkpoint of what is sound (when the run progressed).

        Raises:
            ActorError: an actor slot failed more than ``max_restarts`` times.
            LearnerError: the learner failed (raised, died, or its update made the weights non-finite).
            DataError: an environment gave a NaN/inf observation or reward (``on_nonfinite="stop"``).
            StallError: a worker made no progress for ``stall_timeout_s``, or did not answer in time.
            EvaluationError: a greedy evaluation failed or stalled.
            HostError: the host loop itself failed.
            SpecError: the main script has no file (run it from a file, not stdin).
        """
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the host steps evaluation envs only; the cores belong to the workers
        try:
            host = Host(self)
        except BaseException:
            torch.set_num_threads(threads)
            raise
        self._host = host
        handlers = install_stop_handlers(host)
        try:
            result = host.loop()
            return dataclasses.replace(result, dropped_nonfinite=int(self.dropped_nonfinite))
        finally:
            try:
                host.close()
            finally:
                restore_stop_handlers(handlers)
                torch.set_num_threads(threads)
                self._host = None
