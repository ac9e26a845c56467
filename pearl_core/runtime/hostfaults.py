"""How the parallel runtime's host ends a run that failed: every failure ends like a worker failure.

A failure anywhere — an actor past its restarts, bad data from an environment, the
learner raising or dying, a worker that stalls, an evaluation that fails, an error
in the host loop itself — becomes a :class:`HostStop` carrying a
:class:`~pearl_core.errors.PearlError` that names the component. The host then
(:meth:`HostFaults.fail`):

1. stops the actors (env budget 0) and restarts nothing more;
2. checkpoints what is sound: the learner's own state when it can still answer
   (bounded waits), else the state the learner sent with its failure if it is
   finite, else the host's copy of the trainer with the weights last published to
   the actors (checked finite before every publication);
3. raises the error; :meth:`HostFaults.close` then stops every child with bounded
   waits (politely, then SIGTERM, then SIGKILL; a worker known frozen at once).

No wait of the host on a worker is unbounded: state requests and quiescing give up
after the stall timeout, or :data:`INTERRUPT_WAIT_S` once Ctrl-C / SIGTERM arrived.
"""

from __future__ import annotations

import logging
import queue
import signal
import time
from pathlib import Path

from pearl_core.errors import ActorError, DataError, EvaluationError, LearnerError, PearlError, StallError, \
    TransportError
from pearl_core.runtime.checkpoint import CHECKPOINT_NAME, load_blob
from pearl_core.runtime.messages import LearnerFailed, Progress, Stop, Trained

__all__ = ["FAIL_QUIESCE_S", "INTERRUPT_WAIT_S", "JOIN_TIMEOUT_S", "REPLY_TIMEOUT_S", "STARTUP_TIMEOUT_S", "HostFaults",
           "HostStop"]

log = logging.getLogger("pearl_core.runtime.parallel")

#: Seconds to wait for a child to exit on its own before terminating it.
JOIN_TIMEOUT_S = 5.0
#: Seconds the workers may take to import, build their environments and trainer, and report ready.
STARTUP_TIMEOUT_S = 300.0
#: Seconds the host waits for the learner's answer when no stall timeout is set.
REPLY_TIMEOUT_S = 120.0
#: Seconds a failed run waits for the batches in flight at the learner before it asks for its state.
FAIL_QUIESCE_S = 5.0
#: After Ctrl-C / SIGTERM: seconds the host waits for in-flight work and the learner's state, in all.
INTERRUPT_WAIT_S = 10.0
#: Seconds ``close`` waits for a running evaluation after asking it to stop.
EVAL_CLOSE_WAIT_S = 10.0

#: The tail of the error for a worker that died before PEARL's code ran in it.
_STARTUP_FIX = ("Its traceback is on stderr. Fix for the common start-up failure: run the code that starts a run "
                "under `if __name__ == \"__main__\":`, since workers re-import your script.")
_STALL_FIX = ("Fix: find what blocks there (an environment or trainer call that never returns: I/O, a lock, a "
              "remote service, a deadlock), or raise ParallelRuntime(stall_timeout_s=...) if it is only slow.")


def _died_starting(code: int | None) -> str:
    """Why a worker that exited before it was ready did: a signal (killed), or an exit of its own at start-up."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return (f"the process was killed by {name} while it was starting (building its environments and "
                "policy): not an import problem, which exits with a traceback. Fix: find what sent it (the "
                "out-of-memory killer: dmesg; a job scheduler; a user), give the run the memory it needs, then run "
                "again.")
    return f"it failed while starting, before PEARL's code ran. {_STARTUP_FIX}"


class HostStop(Exception):
    """A failure ends the host loop (carries the error to raise and, if sent, the trainer's state).

    ``learner_answers``: whether the learner can still be asked for its state (``False``
    when it is frozen or gone). ``checkpointed``: the run's final checkpoint was written before the
    failure showed (a message lost in its last seconds): :meth:`HostFaults.fail` keeps it as it is.
    """

    def __init__(self, error: PearlError, trainer_blob: bytes | None = None, *, learner_answers: bool = True,
                 checkpointed: bool = False):
        super().__init__(str(error))
        self.error = error
        self.trainer_blob = trainer_blob
        self.learner_answers = learner_answers
        self.checkpointed = checkpointed


class HostFaults:
    """The failure half of :class:`~pearl_core.runtime.host.Host` (a base class; it uses the host's parts)."""

    # -- bounded waits -------------------------------------------------------------------
    def reply_deadline(self) -> float:
        """When the host stops waiting for the learner: the stall timeout from now, or sooner after Ctrl-C."""
        patience = self.rt.stall_timeout_s or REPLY_TIMEOUT_S
        deadline = time.monotonic() + patience
        return self.capped(deadline)

    def capped(self, deadline: float) -> float:
        """``deadline``, or the end of the interrupt's grace period if that comes first (at once for a
        learner that has not beaten for that long already)."""
        if self.interrupted_at is not None:
            deadline = min(deadline, self.interrupted_at + INTERRUPT_WAIT_S)
            if self.watchdog is not None and self.watchdog.idle_s(self.ctrl.learner_slot) > INTERRUPT_WAIT_S:
                deadline = min(deadline, time.monotonic())
        return deadline

    def learner_doing(self) -> tuple[str, float]:
        """What the learner last said it was doing, and for how many seconds it has not beaten."""
        wd, slot = self.watchdog, self.ctrl.learner_slot
        if wd is None:
            return "(not known)", 0.0
        return wd.doing(slot), wd.idle_s(slot)

    def no_answer(self, what: str) -> HostStop:
        """The learner did not answer ``what`` in time: a :class:`StallError` (the learner cannot be asked again)."""
        proc = self.learner_proc
        pid = proc.pid if proc is not None else None
        doing, idle = self.learner_doing()
        after = f" after {self.interrupted}" if self.interrupted else ""
        if pid is not None:
            self.frozen.add(pid)
        return HostStop(StallError(
            f"the learner (pid {pid}) did not answer {what}{after} in time; it was last {doing} ({idle:.0f} s "
            "without progress). The checkpoint holds the weights last published to the actors instead of the "
            f"learner's state. {_STALL_FIX}", role="learner", pid=pid, doing=doing, stalled_s=idle),
            learner_answers=False)

    # -- the watchdog --------------------------------------------------------------------
    def watch(self) -> None:
        """Look at the heartbeats (rate-limited); raise :class:`HostStop` for a stalled worker or evaluation."""
        wd = self.watchdog
        if wd is None or self.failing:
            return
        live = [a for a, p in enumerate(self.actor_procs) if p is not None]
        if self.learner_proc is not None:
            live.append(self.ctrl.learner_slot)
        hit = wd.look(live)
        if hit is not None:
            raise self.stalled(*hit)
        self.watch_eval()

    def stalled(self, worker: int, idle: float, started: bool) -> HostStop:
        learner = worker == self.ctrl.learner_slot
        role = "learner" if learner else f"actor {worker}"
        proc = self.learner_proc if learner else self.actor_procs[worker]
        pid = proc.pid if proc is not None else None
        doing = self.watchdog.doing(worker)
        self.frozen.add(pid)
        if started:
            env = "" if learner or "env." not in doing else f" ({self.cfg.env_id!r})"
            what = (f"the {role} (pid {pid}) made no progress for {idle:.0f} s (stall_timeout_s="
                    f"{self.rt.stall_timeout_s:g}); it was last {doing}{env}")
        else:
            what = f"the {role} (pid {pid}) did not finish starting within {idle:.0f} s after a restart"
        saved = ("the checkpoint holds the weights last published to the actors" if learner
                 else "the checkpoint holds the learner's state")
        self.rt.faults.append((self.session.wall(), role, what))
        return HostStop(StallError(f"{what}. The run was stopped; {saved}. {_STALL_FIX}", role=role, pid=pid,
                                   doing=doing, stalled_s=idle), learner_answers=not learner)

    def watch_eval(self) -> None:
        """A running evaluation that takes no env step for ``stall_timeout_s`` ends the run."""
        job, ev, limit = self.eval_job, self.session.evaluator, self.rt.stall_timeout_s
        if job is None or ev is None or limit is None or job.done():
            return
        now = time.monotonic()
        seen, since = self.eval_seen
        if ev.progress != seen or since is None:
            self.eval_seen = (ev.progress, now)
        elif now - since > limit:
            self.eval_frozen = True
            raise HostStop(EvaluationError(
                f"the greedy evaluation of the policy at env step {job.steps} (a host thread) made no progress for "
                f"{now - since:.0f} s (stall_timeout_s={limit:g}); it was last {ev.doing} of {ev.env_id!r}. The run "
                f"was stopped; the checkpoint holds the learner's state. {_STALL_FIX}"))

    # -- actors and the learner ------------------------------------------------------------
    def on_actor_failed(self, a: int, msg) -> None:
        """An actor reported a failure: kept for its exit, or (bad data) the end of the run."""
        self.last_error[a] = msg.traceback
        if msg.data_error and not self.failing:
            self.rt.faults.append((self.session.wall(), f"actor {a}", msg.data_error))
            raise HostStop(DataError(msg.data_error, component=f"actor {a}", env_id=self.cfg.env_id))

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
        self.rt.faults.append((self.session.wall(), f"actor {a}", what + (f"\n{tb}" if tb else "")))
        if self.failing or not self.accepting:
            return  # the run is ending: nothing is restarted
        if not tb and not self.actor_ready[a]:
            # It never started: a restart would fail the same way.
            raise HostStop(ActorError(f"{what} before it was ready: {_died_starting(code)}", tb, code))
        if self.restarts[a] >= self.rt.max_restarts:
            raise HostStop(ActorError(
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

    def learner_failed(self, msg) -> HostStop:
        code = self.learner_proc.exitcode if self.learner_proc is not None else None
        head = "TransportError: "
        if msg.error.startswith(head):  # the LAQ lost (or repeated) a message: the transport's fault, not the learner's
            q = self.inbox
            self.rt.faults.append((self.session.wall(), "transport", msg.error))
            return HostStop(TransportError(
                f"the learner (setting {int(self.plan.setting)}) stopped: {msg.error[len(head):]}", msg.traceback,
                code, transport=getattr(q, "transport", ""), queue="LAQ"), msg.blob, learner_answers=False)
        head = f": {msg.error}" if msg.error else ""
        kept = "" if msg.blob is not None else (
            " Its state was not usable (it holds NaN/inf, or could not be saved): the checkpoint holds the "
            "weights last published to the actors.")
        return HostStop(LearnerError(
            f"the learner failed (setting {int(self.plan.setting)}){head}.{kept} Its traceback:\n{msg.traceback}",
            msg.traceback, code), msg.blob, learner_answers=False)

    def learner_exited(self) -> None:
        proc = self.learner_proc
        proc.join(1.0)
        code = proc.exitcode
        why = (_died_starting(code) if not self.learner_ready else
               "killed by a signal or out of memory, or it failed before PEARL's code ran. " + _STARTUP_FIX)
        if self.learner_ready and code is not None and code < 0:
            why = _died_starting(code).replace("while it was starting (building its environments and policy): "
                                               "not an import problem, which exits with a traceback", "")
        raise HostStop(LearnerError(
            f"the learner process (pid {proc.pid}) exited with code {code} without reporting an error: {why}",
            "", code), learner_answers=False)

    # -- the end of a failed run ------------------------------------------------------------
    def fail(self, stop: HostStop) -> None:
        """Write what can be saved before the error propagates (nothing if the run never progressed,
        so a failed start cannot overwrite the checkpoint it was resuming from)."""
        log.error("%s", stop.error)
        self.failing = True
        if stop.checkpointed:  # the final checkpoint holds the learner's state after its last update
            return
        self.session.state.updates = self.current_updates()
        if not self.session.progressed():
            return
        try:
            self.ctrl.env_budget = 0
            state = load_blob(stop.trainer_blob)["trainer"] if stop.trainer_blob is not None else None
            alive = self.learner_proc is not None and self.learner_proc.is_alive()
            if state is None and stop.learner_answers and alive:
                try:
                    deadline = self.reply_deadline()
                    # A lost message leaves work counted in flight that will never come back: no wait for it. Nor
                    # is a failed host's count of work in flight to be trusted (a reply it took but did not apply
                    # is never sent again): in-flight batches get FAIL_QUIESCE_S, then the state is asked for (a
                    # priority update missed on the way to a checkpoint after a failure loses no experience).
                    self._quiesce(time.monotonic() if isinstance(stop.error, TransportError)
                                  else min(deadline, time.monotonic() + FAIL_QUIESCE_S))
                    self.save(deadline=deadline)  # the learner's own state (and the worker's replay if asked)
                    return
                except (HostStop, PearlError) as exc:
                    if isinstance(exc, HostStop) and exc.trainer_blob is not None:  # it failed, state attached
                        state = load_blob(exc.trainer_blob)["trainer"]
                    else:
                        log.warning("after the failure the learner could not send its state (%s); the checkpoint "
                                    "holds the weights last published to the actors instead.",
                                    exc.error if isinstance(exc, HostStop) else exc)
            replay = None
            if self.cfg.save_replay and self.role.learner_holds_replay():
                # Setting 2: the replay lived in the worker and went with it. Rebuild it from the last
                # checkpoint and the host's journal of every row forwarded since; if that cannot account
                # for every counted row, keep the last checkpoint as it is (never counters ahead of rows).
                replay = self._replay_from_journal()
                if replay is None:
                    self._keep_last_checkpoint(stop)
                    return
            if state is None:
                # The learner cannot answer: keep the weights the actors last received (checked finite).
                self.sync_host_trainer()
                state = self.trainer.state_dict()
            self.save(state, replay=replay)
        except Exception as exc:  # noqa: BLE001 - the original error matters more
            log.error("could not write a checkpoint after the failure: %s", exc)

    def _replay_from_journal(self):
        """The replay contents the dead setting-2 worker held: the last checkpoint's replay (empty for a
        run that has none yet) plus every row the host forwarded since, inserted as the worker inserted
        them; ``None`` when they do not add up to the env steps counted (nothing is made up)."""
        from pearl_core.runtime.checkpoint import load_checkpoint
        from pearl_core.runtime.config import RuntimePlan
        from pearl_core.runtime.wiring import build_replay, replay_state

        ck_path = Path(self.cfg.log_dir) / CHECKPOINT_NAME
        base_state, base_steps = None, 0
        if ck_path.exists():
            prev = load_checkpoint(ck_path)
            if prev.replay is None:
                return None
            base_state, base_steps = prev.replay, prev.state.env_steps
        elif self.rt.checkpoint is not None:  # resumed, and no checkpoint written here yet
            if self.rt.checkpoint.replay is None:
                return None
            base_state, base_steps = self.rt.checkpoint.replay, self.rt.checkpoint.state.env_steps
        else:
            base_steps = 0
        rows = self.role.journal_rows()
        n = 0 if rows is None else int(rows[0].shape[0])
        if base_steps + n != self.session.state.env_steps:
            log.error("the setting-2 journal holds %d rows after the last checkpoint (env step %s); the run counted "
                      "%d env steps: it cannot rebuild the replay", n, base_steps, self.session.state.env_steps)
            return None
        replay = build_replay(self.cfg, RuntimePlan(), self.spec, state=base_state)
        if n:
            replay.add(*rows)
        log.warning("the co-located worker died with the replay: rebuilt from the last checkpoint and the host's "
                    "journal of the %d rows forwarded since (priorities of rows it had updated since are those "
                    "of that checkpoint; new rows enter at the running maximum)", n)
        return replay_state(replay)

    def _keep_last_checkpoint(self, stop: HostStop) -> None:
        """Say on the error what survives when the co-located worker's replay is gone: the last checkpoint."""
        ck = Path(self.cfg.log_dir) / CHECKPOINT_NAME
        if ck.exists():
            note = (f" The co-located worker held the replay (save_replay=True) and could not send it, so the "
                    f"last checkpoint ({ck}) is kept as it was: it holds the replay and the counters it was "
                    "saved with; the experiences collected after it are lost. Fix: resume from it "
                    "(ParallelRuntime(config, plan, resume_from=...)).")
        else:
            note = (" The co-located worker held the replay (save_replay=True) and could not send it, and no "
                    "checkpoint was written yet: nothing of this run can be resumed. Fix: set checkpoint_every "
                    "to keep what a run has collected.")
        log.error("%s", note.strip())
        err = stop.error
        err.args = ((str(err.args[0]) if err.args else str(err)) + note,) + tuple(err.args[1:])

    # -- shutdown ------------------------------------------------------------------------
    def stop_workers(self) -> HostStop | None:
        """Stop every child (politely, then by force), then the LDQ's end-of-run check: what the learner sent
        last is read and the counts compared (:meth:`~pearl_core.runtime.queues.SequencedQueue.settle`).

        Returns the failure that shows, if any: a message lost in the run's last seconds on the LDQ, or the
        learner's report that the LAQ lost one (its own end-of-run check, :meth:`_Worker.settle
        <pearl_core.runtime.learner>`), or another failure it reported while stopping. Idempotent, bounded
        (the learner gets the transport's grace period on top of :data:`JOIN_TIMEOUT_S` for its check).
        """
        # pid is None for a process whose start() failed (e.g. a script without the
        # ``if __name__ == "__main__":`` guard): there is nothing to join, and joining would
        # hide the original error behind an AssertionError.
        learner = self.learner_proc if self.learner_proc is not None and self.learner_proc.pid is not None else None
        actors = [p for p in self.actor_procs if p is not None and p.pid is not None]
        for p in ([learner] if learner is not None else []) + actors:
            if not p.is_alive() and p.exitcode not in (0, None):  # died before it was told to stop: say so
                who = "the learner" if p is learner else f"actor process {p.pid}"
                log.warning("%s (pid %d) exited with code %s before the run stopped its workers (after the run's "
                            "last state was taken: what the run did is in its final checkpoint)", who, p.pid,
                            p.exitcode)
        if learner is not None and learner.is_alive():
            # The Stop goes before the stop flag: whichever the learner sees first, the Stop is counted as sent
            # by then, so its loss is seen by the learner's end-of-run check instead of going unnoticed.
            try:
                self.inbox.put_nowait(Stop())
            except (queue.Full, OSError, ValueError):
                pass
        if self.arena is not None and self.ctrl is not None:
            self.ctrl.request_stop()
        procs = actors + ([learner] if learner is not None else [])
        for p in procs:
            if p.pid in self.frozen and p.is_alive():
                p.terminate()  # frozen: waiting for it to stop by itself would be in vain
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for p in actors:
            p.join(max(0.0, deadline - time.monotonic()))
        if learner is not None:
            grace = getattr(self.inbox, "grace_s", 0.0)
            learner.join(max(0.0, deadline + grace - time.monotonic()))
        forced = set()
        for p in procs:
            if p.is_alive():
                forced.add(p.pid)
                p.terminate()
                p.join(2.0)
            if p.is_alive():
                p.kill()
                p.join(2.0)
        stop = None
        if learner is not None and learner.pid not in forced and learner.pid not in self.frozen:
            stop = self._settle_ldq()  # it ended by itself: everything it sent is readable now
        for p in procs:
            try:
                p.close()
            except ValueError:
                pass
        self.learner_proc = None
        self.actor_procs = []
        return stop

    def _settle_ldq(self) -> HostStop | None:
        """The LDQ's end-of-run check, once the learner has exited: its last messages are handled, and a
        message it counted as sent that never arrived is a :class:`TransportError`."""
        q = self.outbox
        if q is None:
            return None
        items, error = q.settle()
        found: HostStop | None = None
        for msg in items:
            kind = type(msg)
            if kind is LearnerFailed:  # e.g. its own check found that the LAQ lost a message
                stop = self.learner_failed(msg)
                if found is None:
                    found = stop
                else:
                    log.error("%s", stop.error)
            elif kind is Progress or (kind is Trained and self.role.in_flight()):
                try:  # as during the run: its metrics, a batch's priorities (after the last checkpoint)
                    self.role.on_reply(msg)
                except PearlError as exc:
                    log.warning("a message the learner sent last could not be handled at shutdown: %s", exc)
            else:
                log.debug("at shutdown the learner's %s was read; nobody waits for it any more", kind.__name__)
        if error is not None:
            self.rt.faults.append((self.session.wall(), "transport", str(error)))
            if found is not None:
                log.error("%s", found.error)
            found = HostStop(error, learner_answers=False)
        return found

    def close(self) -> None:
        """Stop every child (politely, then by force) and unlink every segment. Idempotent, bounded.

        A failure the end-of-run check finds here (:meth:`stop_workers`) comes after another error, or after
        the run already ended without one (:meth:`~pearl_core.runtime.host.Host._final_save` checks first):
        it is logged and kept in ``faults``, the first error being the one raised.
        """
        try:
            stop = self.stop_workers()
            if stop is not None:
                log.error("while stopping the workers: %s", stop.error)
                if not isinstance(stop.error, TransportError):  # a transport's fault is in faults already
                    self.rt.faults.append((self.session.wall(), "learner", str(stop.error)))
            for q in [self.inbox, self.outbox, *self.dcqs]:
                if q is not None:
                    q.close()
        finally:
            try:
                self._close_eval()
                self.session.close()
            finally:
                self.rt.dropped_nonfinite = total = self.dropped_total()
                self.drops.summary(total)
                if self.arena is not None:
                    self.arena.close()
                    self.arena = None

    def _close_eval(self) -> None:
        job, ev = self.eval_job, self.session.evaluator
        if job is None or ev is None:
            return
        ev.cancelled = True  # it stops at its next step
        if not job.wait(0.0 if self.eval_frozen else EVAL_CLOSE_WAIT_S):
            log.warning("the evaluation thread is still running (frozen in %s); its environments are left open.",
                        ev.doing)
            self.session.evaluator = None  # not closed under a thread that is still in them
        self.eval_job = None
