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

Faults: an actor that raises or dies is restarted (``max_restarts`` times per
actor slot) and logged; past that the run fails with :class:`ActorError`. A
learner that raises or dies ends the run with :class:`LearnerError` (carrying
the worker's traceback) after a checkpoint. SIGINT / SIGTERM end the run
cleanly with a final checkpoint (``stop_reason`` ``"interrupted"``); a second
SIGINT aborts at once. Every child process is stopped and every shared-memory
segment unlinked before :meth:`ParallelRuntime.run` returns or raises.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from pearl_core.errors import ActorError, LearnerError, SpecError, WorkerError
from pearl_core.runtime.checkpoint import Checkpoint
from pearl_core.runtime.config import RunConfig, RuntimePlan
from pearl_core.runtime.control import RunResult
from pearl_core.runtime.host import Host
from pearl_core.runtime.session import Runtime, int_at_least

__all__ = ["ActorError", "LearnerError", "ParallelRuntime", "WorkerError"]


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
        super().__init__(config, plan, resume_from=resume_from, progress=progress, tensorboard=tensorboard,
                         plot=plot, metrics_every=metrics_every, display_every_s=display_every_s)
        int_at_least("ParallelRuntime", "max_restarts", max_restarts, 0)
        int_at_least("ParallelRuntime", "weight_check_every", weight_check_every, 1)
        if actor_slack is not None and (isinstance(actor_slack, bool) or not isinstance(actor_slack, int)
                                        or actor_slack < 1):
            raise SpecError(f"ParallelRuntime: actor_slack = {actor_slack!r}; expected None or an int >= 1.")
        self.max_restarts = max_restarts
        self.weight_check_every = weight_check_every
        self.actor_slack = actor_slack
        self.faults: list[tuple[float, str, str]] = []
        self._host: Host | None = None

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
        host = Host(self)
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


def _install_signal_handlers(host: Host) -> dict[int, Any]:
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
