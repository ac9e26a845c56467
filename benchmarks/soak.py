"""Soak benchmark of the parallel runtime: inject faults for a long time, prove nothing is lost.

A chain of *segments* runs until ``--minutes`` have elapsed. Each segment is one
:class:`~pearl_core.runtime.parallel.ParallelRuntime` run of DQN on CartPole-v1
(MLP 32-32, prioritized replay, ``save_replay=True``, a checkpoint every
``--checkpoint-every`` env steps) in a subprocess of its own (this file, run as
``python benchmarks/soak.py --segment SPEC.json``), resumed from the checkpoint
the previous segment left. Segments alternate protocol setting 1 and setting 2.

While a segment runs, a fault injector in this process acts at random (seeded)
times on the segment's process tree (found in ``/proc``)::

    actor-kill    SIGKILL an actor process   -> the runtime restarts it (max_restarts is high)
    actor-stop    SIGSTOP an actor, SIGCONT it 0.2-2 s later -> the run goes on
    learner-kill  SIGKILL the learner        -> LearnerError after a checkpoint; the soak resumes
    sigint        SIGINT the host (its pid, or its process group like a terminal's Ctrl-C)
                                             -> clean stop with a checkpoint; the soak resumes
    sighup        SIGHUP the host (its pid, or its process group like a closed terminal)
                                             -> the same (the workers ignore it; the host stops the run)
    enospc        the disk fills: every fsync of the host (logs) or only a checkpoint's fails with ENOSPC
                                             -> FileWriteError / CheckpointWriteError (or a HostError naming
                                                it) with the path and the fix; the last whole checkpoint is kept
    transport-drop  the LAQ is a FaultyTransport (soak_faults._DropNext, from the CPU backend's make_transport)
                    that loses one message
                                             -> TransportError naming it, after a checkpoint
    checkpoint-kill SIGKILL the host while it writes a checkpoint (its temp file exists)
                                             -> the previous whole checkpoint is kept; the next start removes
                                                the temp file and resumes from it

The ENOSPC and transport faults are installed disarmed in the segment's host
(``benchmarks/soak_faults.py``) and armed by the soak's SIGUSR1 at the planned time.
Every segment ends one of seven ways: a learner kill, a SIGINT, a SIGHUP, a full
disk, a lost message, a kill during a checkpoint write, or its env-step budget (a
normal finish); each of the seven, in a seeded order, ends a setting-1 segment and
then a setting-2 one, so fourteen segments cover every (ending, setting) pair
(``--endings`` picks the kinds and their order). Actor faults come on top, one or more per segment, at seeded times. A
SIGINT is sometimes sent while the workers are still starting. Workers are told
apart by the shared memory they map (``/proc/<pid>/maps``: an actor maps its own
ring ``dcq<i>``, the learner the batch ring or every actor's ring), and the
learner must also be the oldest worker; a fault whose target is unclear is not
injected (and says why).

A segment that logs no new env step for ``--stall-seconds`` (default 60) is
reported *stalled* and sent SIGINT; one still running two stall periods after
its ending fault gets a second SIGINT (which aborts a run at once).

After each segment the soak checks, and counts:

* the checkpoint loads (``load_checkpoint``), and the next segment resumes from
  it (a resume that fails is a failed load too);
* experiences: the replay capacity is larger than every env step the soak can
  take, so every env step the runtime counted (``state.env_steps``) must be in
  the checkpoint's replay (``replay["size"]``); the deficit that appears in a
  segment is that segment's *lost experiences*. Across a resume the counters
  only grow and the rows stored before are unchanged (compared row by row),
  the cursor is ``size % capacity``, and no stored row is blank (all-zero
  observations: a slot counted but never written). The same count is checked,
  while the segment runs, on the first checkpoint written after each actor
  fault, so a loss is pinned on the fault before it;
* progress: env steps the segment logged (``metrics.csv``, ``episodes.csv``)
  past the checkpoint it left are *lost progress* (a fault ended it before a
  checkpoint could be written);
* orphans: every process seen under the segment (fork server, resource tracker,
  actors, learner) must be gone within 30 s of its exit (then killed, by pid);
* temp files: no ``.*.tmp`` of an atomic write left in the run directory, except
  the one of a checkpoint write killed by a checkpoint-kill, which the next
  segment's start must remove (and the checkpoint must be the previous whole one);
* explained losses: a full disk or a kill during a checkpoint write loses the
  env steps logged after the last whole checkpoint; that progress is reported
  as explained by the error, not as lost;
* leaks: ``/dev/shm/pearl_*`` segments (``SHM_PREFIX``) named after, or mapped
  by, any of those processes, and multiprocessing semaphores
  (``/dev/shm/sem.mp-*``) they mapped, still there after it exits (then unlinked).

An ending fault (learner kill, SIGINT, SIGHUP) is *survived* when its segment ended as
it must (``LearnerError`` reporting the SIGKILL; ``stop_reason "interrupted"``
and exit 0), its last checkpoint loaded, and nothing was lost, orphaned or
leaked. An actor fault is survived when the run went on to its planned end (a
killed actor was reported and restarted), the first checkpoint after it lost
nothing (with none before the ending fault, a loss is the ending's), and
nothing was orphaned or leaked. The report (stdout and ``--out``, default
``benchmarks/results/soak.md``) lists every segment and every fault injected;
the exit status is 1 when anything was lost (experiences or progress), leaked or
orphaned, a checkpoint failed to load, or a segment ended or stalled unexpectedly::

    .venv/bin/python benchmarks/soak.py                   # 30 minutes
    .venv/bin/python benchmarks/soak.py --minutes 2 --seed 1 --out /tmp/soak.md
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import platform
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_OUT = HERE / "results" / "soak.md"

HIDDEN = [32, 32]
N_ACTORS = 2
ENVS_PER_ACTOR = 2
METRICS_EVERY = 250
MAX_RESTARTS = 1_000_000
ENDINGS = ("learner-kill", "sigint", "sighup", "budget", "enospc", "transport-drop", "checkpoint-kill")
FAULT_KINDS = ("actor-kill", "actor-stop", "learner-kill", "sigint", "sighup", "enospc", "transport-drop",
               "checkpoint-kill")
#: Ending faults armed inside the host (benchmarks/soak_faults.py) by SIGUSR1 at the planned time.
ARMED = ("enospc", "transport-drop")
#: Every ending fault (the run ends because of it).
ENDING_FAULTS = ("learner-kill", "sigint", "sighup", "enospc", "transport-drop", "checkpoint-kill")
#: The rate (env steps/s) an ending segment's safety-net budget assumes at least: a first segment on a fast,
#: quiet machine reached the 1,500/s guess's budget before its ending fault (the smoke's setting-1 drop).
ENDING_RATE_FLOOR = 10_000.0
#: How often an ending fault that found the workers' roles unclear is tried again (a second apart).
ENDING_RETRIES = 15
#: What the runtime logs for a worker killed after the run's last state was taken (the final checkpoint's write).
LATE_KILL = "before the run stopped its workers (after the run's last state was taken"
#: How a segment ended by each of these must end: its status (the error's type name) and what the error says.
EXPECTED_ERROR = {"enospc": (("FileWriteError", "CheckpointWriteError", "HostError"),
                             ("ENOSPC", "No space left", "disk is full")),
                  "transport-drop": (("TransportError",), ("soak_faults._DropNext",))}
#: Ending faults whose error (or kill) accounts for the env steps logged after the last whole checkpoint.
EXPLAINS_PROGRESS = ("enospc", "checkpoint-kill")
#: Seconds a checkpoint kill waits for the next checkpoint write to begin.
CHECKPOINT_KILL_WAIT_S = 30.0
#: The endings by a stop signal to the host (a clean stop with a checkpoint).
SIGNALS = {"sigint": signal.SIGINT, "sighup": signal.SIGHUP}
#: Faults the soak sends to the host itself (no worker roles needed).
HOST_FAULTS = (*SIGNALS, *ARMED, "checkpoint-kill")
#: Seconds a segment may take to start (imports, fork server) on a loaded machine.
STARTUP_ALLOWANCE_S = 240.0
#: Seconds the processes of a finished segment get to disappear before they count as orphans.
ORPHAN_GRACE_S = 30.0


# =========================================================================== the segment (child process)


def run_segment(spec_path: str) -> int:
    """One ParallelRuntime run (fresh or resumed); writes ``result.json`` next to the spec."""
    import logging

    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["result"])
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    result: dict[str, Any] = {"status": "started", "pid": os.getpid()}
    t0 = time.perf_counter()
    code = 6
    rt = None
    try:
        import soak_faults

        from pearl_core.errors import ActorError, LearnerError, PearlError, SpecError
        from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
        from pearl_core.runtime.parallel import ParallelRuntime

        cfg = RunConfig(
            env_id="CartPole-v1",
            trainer="pearl_core.algorithms:DQN",
            trainer_kwargs={"hidden_sizes": spec["hidden"], "eps_decay_steps": 10_000},
            replay=ReplayConfig(kind="prioritized", capacity=spec["capacity"]),
            batch_size=32,
            learning_starts=500,
            replay_ratio=0.5,
            stop=StopCriteria(max_env_steps=spec["max_env_steps"]),
            seed=spec["seed"],
            log_dir=spec["log_dir"],
            checkpoint_every=spec["checkpoint_every"],
            save_replay=True,
        )
        plan = RuntimePlan(setting=spec["setting"], n_actors=N_ACTORS, envs_per_actor=ENVS_PER_ACTOR,
                           insert_batch=16, queue_size=4, learner_threads=1, rm_threads=1)
        kw = dict(progress=False, plot=False, tensorboard=False, metrics_every=METRICS_EVERY,
                  max_restarts=MAX_RESTARTS)
        soak_faults.install(spec.get("armed"))  # disarmed until the soak's SIGUSR1
        try:
            rt = ParallelRuntime(cfg, plan, resume_from=spec["resume"], **kw)
        except SpecError as exc:
            result.update(status="resume-failed" if spec["resume"] else "config-failed", error=str(exc)[:4000])
            code = 5
            return code
        try:
            res = rt.run()
            result.update(status=res.stop_reason, env_steps=res.env_steps, updates=res.updates,
                          checkpoint=res.checkpoint_path)
            code = 0
        except (LearnerError, ActorError) as exc:
            result.update(status=type(exc).__name__, error=str(exc)[:4000], exitcode=getattr(exc, "exitcode", None))
            code = 3
        except PearlError as exc:  # a full disk, a transport that lost a message: named, after a checkpoint
            result.update(status=type(exc).__name__, error=str(exc)[:4000], armed=soak_faults.armed())
            code = 3
    except BaseException as exc:  # noqa: BLE001 - anything else is reported, not hidden
        import traceback

        result.update(status=f"crashed:{type(exc).__name__}", error=traceback.format_exc()[-4000:])
        code = 6
    finally:
        # A SIGUSR1 that arrives as the interpreter shuts down (a fault armed after the run ended) would kill the
        # process by the default action once Python's handlers are gone: ignored from here on.
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        result["faults"] = [list(f) for f in (rt.faults if rt is not None else [])]
        result["wall_s"] = round(time.perf_counter() - t0, 3)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        os.replace(tmp, out)
    return code


# =========================================================================== /proc helpers


def _read(path: str, mode: str = "r") -> Any:
    with open(path, mode) as fh:
        return fh.read()


def proc_table() -> dict[int, tuple[int, int, str, str]]:
    """pid -> (ppid, start time in clock ticks, state, cmdline) of every process."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = _read(f"/proc/{entry}/stat")
            cmd = _read(f"/proc/{entry}/cmdline", "rb").replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(entry)] = (int(fields[1]), int(fields[19]), fields[0], cmd)
    return out


def descendants(root: int, table: dict[int, tuple[int, int, str, str]]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_rest) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def alive(pid: int, start: int) -> bool:
    """The process ``pid`` started at ``start`` still exists and is not a zombie."""
    try:
        stat = _read(f"/proc/{pid}/stat")
    except OSError:
        return False
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19]) == start and fields[0] not in ("Z", "X")


def worker_role(pid: int) -> tuple[str, int | None] | None:
    """``("actor", i)``, ``("learner", None)`` or ``None`` (not attached yet), from the shared-memory
    segments the process maps: an actor maps its own ``dcq<i>`` ring only; the learner maps the
    ``laq`` batch ring (setting 1) or every actor's ring (setting 2)."""
    from pearl_core.runtime.shm import SHM_PREFIX

    try:
        maps = _read(f"/proc/{pid}/maps")
    except OSError:
        return None
    rings, laq = set(), False
    for line in maps.splitlines():
        i = line.find("/dev/shm/" + SHM_PREFIX)
        if i < 0:
            continue
        parts = line[i + 9:].split("_")
        for tag in parts:
            if tag.startswith("dcq") and tag[3:].isdigit():
                rings.add(int(tag[3:]))
            elif tag == "laq":
                laq = True
    if laq or len(rings) > 1:
        return ("learner", None)
    if len(rings) == 1:
        return ("actor", rings.pop())
    return None


def mapped_shm(pid: int) -> set[str]:
    """Names of the ``/dev/shm`` files ``pid`` maps (PEARL segments, multiprocessing's named semaphores)."""
    try:
        maps = _read(f"/proc/{pid}/maps")
    except OSError:
        return set()
    out = set()
    for line in maps.splitlines():
        i = line.find("/dev/shm/")
        if i >= 0:
            out.add(line[i + 9:].split(" ", 1)[0].strip())
    return out


def pearl_segments() -> set[str]:
    from pearl_core.runtime.shm import list_segments

    return set(list_segments())


def mp_semaphores() -> set[str]:
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("sem.mp-")}
    except FileNotFoundError:
        return set()


def last_logged_env_steps(log_dir: Path) -> int:
    """Highest env-step count in ``metrics.csv`` / ``episodes.csv`` (0 if none)."""
    best = 0
    for name in ("metrics.csv", "episodes.csv"):
        try:
            with open(log_dir / name, encoding="utf-8") as fh:
                next(fh, None)
                for line in fh:
                    head = line.split(",", 1)[0]
                    if head.isdigit():
                        best = max(best, int(head))
        except OSError:
            pass
    return best


def tail_env_steps(path: Path) -> int | None:
    """env steps of the last complete row of ``metrics.csv`` (cheap: reads the tail)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 2048))
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines[1:] if len(lines) > 1 else lines):
        head = line.split(",", 1)[0]
        if head.isdigit():
            return int(head)
    return None


# =========================================================================== the soak (parent process)


@dataclasses.dataclass
class Fault:
    segment: int
    kind: str
    at_s: float  # planned: seconds after training started (startup faults: after the workers appeared)
    phase: str = "training"  # or "startup"
    stop_for_s: float = 0.0
    fired: bool = False
    t_soak: float | None = None  # seconds since the soak started
    pid: int | None = None
    target: str = ""
    detail: str = ""
    fired_ns: int = 0  # time.time_ns() when it fired (to match checkpoints written after it)
    seen_by_runtime: bool | None = None
    checked: str = ""  # the first checkpoint written after it, as checked during the segment
    lost_after: int | None = None  # experiences lost at that checkpoint (None: not checked)
    survived: bool | None = None
    note: str = ""
    retries: int = 0  # an ending fault tried again after finding the workers' roles unclear


@dataclasses.dataclass
class Segment:
    index: int
    setting: int
    ending: str
    seconds: float
    start_env_steps: int
    max_env_steps: int
    pid: int | None = None
    status: str = "not run"
    returncode: int | None = None
    error: str = ""
    output: str = ""  # the segment's output.log (the runtime's warnings)
    wall_s: float = 0.0
    train_s: float | None = None
    expected: str = ""
    ok: bool = False
    ck_loaded: bool | None = None
    ck_error: str = ""
    ck_written: bool = False
    env_steps: int | None = None
    updates: int | None = None
    stored: int | None = None
    lost: int = 0
    progress_lost: int = 0
    progress_explained: bool = False  # its ending fault's error (or kill) accounts for the progress lost
    logged_env_steps: int = 0
    actor_restarts: list[int] = dataclasses.field(default_factory=list)
    runtime_faults: list[str] = dataclasses.field(default_factory=list)
    orphans: list[str] = dataclasses.field(default_factory=list)
    leaked: list[str] = dataclasses.field(default_factory=list)
    semaphores_left: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)
    processes_seen: int = 0
    mid_checks: int = 0
    last_checked: tuple[int, int] | None = None  # (env steps, rows stored) of the last checkpoint checked during it
    stalled: bool = False  # the soak stopped it (SIGINT) after it made no progress
    armed: str | None = None  # the fault installed in its host (soak_faults.KINDS), armed by SIGUSR1
    explained: str = ""  # what its ending fault's error accounts for (progress or experiences it lost)
    temps_left: list[str] = dataclasses.field(default_factory=list)  # atomic writes' temp files left in the run dir
    killed_temp: str = ""  # the temp file of the checkpoint write a checkpoint kill interrupted
    killed_ck_mtime: int | None = None  # the checkpoint's mtime when that write was interrupted
    start_deficit: int = 0
    checked_deficit: int = 0  # deficit at the last checkpoint checked during the segment
    end_lost: int = 0  # experiences lost past the last checkpoint checked during the segment


class Soak:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.rng = random.Random(args.seed)
        self.t0 = time.monotonic()
        self.work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="pearl-soak-"))
        self.run_dir = self.work / "run"
        self.segments: list[Segment] = []
        self.faults: list[Fault] = []
        self.rate = 1500.0  # env steps per second of training; re-estimated after every budget segment
        self.prev: dict[str, Any] | None = None  # the last checkpoint's counts and replay rows
        self.deficit = 0  # env steps counted but not stored, as of the last checkpoint
        self.ck_ok = 0
        self.ck_failed = 0
        self.stopped_early = ""
        self.load_start = os.getloadavg()
        self.started_at = _dt.datetime.now(_dt.timezone.utc)
        self.endings: list[str] = []
        self.stale_temp = ""  # the temp file a checkpoint kill left, for the next start to remove
        self.stopped: dict[int, tuple[int, float]] = {}  # pid -> (start ticks, SIGCONT due)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    # -- planning ------------------------------------------------------------------------
    def next_ending(self) -> str:
        """Endings in blocks: each kind, in a seeded order, in setting 1 then in setting 2 (``--endings``: the
        kinds given, in that order, one segment each, round and round)."""
        if not self.endings:
            if self.args.endings:
                self.endings = list(self.args.endings)
            else:
                block = list(ENDINGS)
                self.rng.shuffle(block)
                self.endings = [e for e in block for _ in (1, 2)]
        return self.endings.pop(0)

    def plan(self, k: int, seconds: float, e0: int) -> tuple[Segment, list[Fault]]:
        ending = self.next_ending()
        setting = 1 if k % 2 == 0 else 2
        rng = self.rng
        budget_steps = max(2_000, int(self.rate * seconds))
        if ending != "budget":  # a safety net: the fault should end it first, even where the rate is unknown yet
            budget_steps = max(20_000, 5 * int(max(self.rate, ENDING_RATE_FLOOR) * seconds))
        seg = Segment(k, setting, ending, seconds, e0, min(e0 + budget_steps, self.args.capacity - 1))
        faults = []
        t = rng.uniform(0.1, 0.35) * seconds
        end_at = rng.uniform(0.55, 0.95) * seconds if ending != "budget" else 0.9 * seconds
        while t < end_at:
            if rng.random() < 0.5:
                faults.append(Fault(k, "actor-kill", t))
            else:
                faults.append(Fault(k, "actor-stop", t, stop_for_s=rng.uniform(0.2, 2.0)))
            t += rng.expovariate(4.0 / seconds)
        if ending in ("learner-kill", "transport-drop", "checkpoint-kill"):
            faults.append(Fault(k, ending, end_at))
        elif ending == "enospc":
            f = Fault(k, ending, end_at)
            f.target = "logs" if rng.random() < 0.5 else "checkpoint"
            faults.append(f)
        elif ending in SIGNALS:
            if rng.random() < 0.2:
                faults.append(Fault(k, ending, rng.uniform(0.0, 1.5), phase="startup"))
            else:
                faults.append(Fault(k, ending, end_at))
        for f in faults:
            if f.kind in SIGNALS:
                f.target = "host group" if rng.random() < 0.5 else "host"
            elif f.kind == "enospc":
                seg.armed = f"enospc-{f.target}"
            elif f.kind == "transport-drop":
                f.target, seg.armed = "LAQ", "transport-drop"
            elif f.kind == "checkpoint-kill":
                f.target = "host"
        return seg, faults

    # -- one segment -------------------------------------------------------------------------
    def run_segment(self, seg: Segment, faults: list[Fault]) -> None:
        a = self.args
        seg_dir = self.work / f"segment-{seg.index:03d}"
        seg_dir.mkdir(parents=True, exist_ok=True)
        ck_path = self.run_dir / "checkpoint.pt"
        resume = str(ck_path) if self.prev is not None else None
        spec = {
            "result": str(seg_dir / "result.json"), "log_dir": str(self.run_dir), "resume": resume,
            "setting": seg.setting, "max_env_steps": seg.max_env_steps, "capacity": a.capacity,
            "checkpoint_every": a.checkpoint_every, "seed": a.seed, "hidden": HIDDEN, "armed": seg.armed,
        }
        (seg_dir / "spec.json").write_text(json.dumps(spec, indent=1))
        ck_before = _mtime(ck_path)
        seg.start_deficit = seg.checked_deficit = self.deficit
        shm_before = pearl_segments()
        log = open(seg_dir / "output.log", "w")
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        # The run rewrites metrics.csv when it starts (kept up to the checkpoint it resumes from): rows logged
        # past that checkpoint by a killed segment are not this segment's training.
        metrics_before = _inode(self.run_dir / "metrics.csv")
        t_start = time.monotonic()
        cmd = [sys.executable, str(Path(__file__).resolve()), "--segment", str(seg_dir / "spec.json")]
        proc = subprocess.Popen(cmd,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=str(ROOT), env=env)
        seg.pid = proc.pid
        seen: dict[int, tuple[int, str]] = {}  # pid -> (start ticks, cmdline) of every descendant seen
        t_workers = t_train = None
        metrics = self.run_dir / "metrics.csv"
        pending = sorted(faults, key=lambda f: (f.phase != "startup", f.at_s))
        awaiting: list[Fault] = []  # actor faults whose next checkpoint is still to be checked
        deadline = t_start + STARTUP_ALLOWANCE_S + 6 * seg.seconds + 120
        hung = stalled = False
        last_e, last_change = None, time.monotonic()
        polls = 0
        mapped: set[str] = set()
        ended = slow_exit = False
        ended_at = 0.0
        try:
            while proc.poll() is None:
                now = time.monotonic()
                table = proc_table()
                for pid in descendants(proc.pid, table):
                    start, cmd = table[pid][1], table[pid][3]
                    if pid not in seen or seen[pid][0] != start:
                        seen[pid] = (start, cmd)
                workers = self._workers(proc.pid, table)
                polls += 1
                if polls % 10 == 1:  # about once a second: what the segment's processes map in /dev/shm
                    for pid in (proc.pid, *seen):
                        mapped |= mapped_shm(pid)
                if t_workers is None and len(workers) >= 1 + N_ACTORS:
                    t_workers = now
                e = tail_env_steps(metrics)
                if t_train is None and e is not None and e > seg.start_env_steps and \
                        _inode(metrics) != metrics_before:
                    t_train = now
                if e != last_e:
                    last_e, last_change = e, now
                elif (t_train is not None and not self.stopped and not stalled and not ended
                      and now - last_change > a.stall_seconds):
                    stalled = seg.stalled = True
                    seg.problems.append(f"stalled: no new env step logged for {a.stall_seconds:g} s (last logged "
                                        f"{e}, max_env_steps {seg.max_env_steps}): sent the host SIGINT")
                    try:
                        os.kill(proc.pid, signal.SIGINT)
                    except ProcessLookupError:
                        pass
                self._resume_stopped(now)
                while pending:
                    f = pending[0]
                    base = t_workers if f.phase == "startup" else t_train
                    if base is None or now < base + f.at_s:
                        break
                    pending.pop(0)
                    self._fire(f, proc, workers, table, seg)
                    if (not f.fired and f.kind in ENDING_FAULTS and f.retries < ENDING_RETRIES
                            and f.note.startswith(("not injected: roles unclear", "not injected: a worker has not"))):
                        # an ending that finds the workers changing (an actor restarting) tries again a second
                        # later: a segment whose ending is never injected runs to its whole budget
                        f.retries, f.at_s, f.note = f.retries + 1, f.at_s + 1.0, ""
                        pending.append(f)
                        pending.sort(key=lambda g: (g.phase != "startup", g.at_s))
                    if f.fired and f.kind.startswith("actor"):
                        awaiting.append(f)
                if not ended and any(f.fired and f.kind in ENDING_FAULTS for f in faults):
                    ended, ended_at = True, now
                if ended and not slow_exit and now - ended_at > 2 * a.stall_seconds:
                    slow_exit = True  # a second SIGINT aborts the run at once
                    seg.problems.append(f"still running {2 * a.stall_seconds:g} s after its ending fault: sent the "
                                        "host SIGINT")
                    try:
                        os.kill(proc.pid, signal.SIGINT)
                    except ProcessLookupError:
                        pass
                if awaiting and not ended:
                    self._mid_check(seg, ck_path, awaiting)
                if now > deadline:
                    hung = True
                    break
                time.sleep(0.1)
        except KeyboardInterrupt:
            self.stopped_early = "interrupted by the user (Ctrl-C)"
            try:
                os.kill(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        finally:
            self._resume_stopped(float("inf"))
        if hung:
            seg.problems.append(f"the segment did not end within {deadline - t_start:.0f} s: sent it SIGINT")
            try:
                os.kill(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            seg.problems.append("the segment did not exit within 120 s: killed it (SIGKILL)")
            proc.kill()
            proc.wait()
        log.close()
        seg.returncode = proc.returncode
        seg.wall_s = time.monotonic() - t_start
        seg.train_s = None if t_train is None else time.monotonic() - t_train
        seg.processes_seen = len(seen)
        for f in pending:
            f.note = "not injected: the segment ended first"
        self._check_processes(seg, proc.pid, seen, shm_before, mapped)
        # -- what the segment says happened
        try:
            result = json.loads((seg_dir / "result.json").read_text())
        except (OSError, ValueError):
            result = {"status": f"no result (exit code {proc.returncode})"}
        seg.status = result.get("status", "?")
        seg.error = result.get("error", "") or ""
        seg.output = (seg_dir / "output.log").read_text(errors="replace")
        seg.runtime_faults = [f[2].splitlines()[0] for f in result.get("faults", [])]
        if not seg.error and seg.status not in ("max_env_steps", "interrupted"):
            seg.error = seg.output[-1500:]
        if seg.status == "resume-failed":
            self.ck_failed += 1
            seg.problems.append(f"the checkpoint did not resume: {seg.error[:500]}")
        seg.logged_env_steps = last_logged_env_steps(self.run_dir)
        self._check_temps(seg)
        explains = next((f.kind for f in faults if f.fired and f.kind in EXPLAINS_PROGRESS), None)
        self._check_checkpoint(seg, ck_path, ck_before, explains)
        self._judge(seg, faults)

    def _check_temps(self, seg: Segment) -> None:
        """Temporary files of atomic writes left in the run directory: a leak, except the one of a checkpoint
        write this segment's host was killed in, which the next start must remove (checked after it)."""
        temps = sorted(p.name for p in self.run_dir.glob(".*.tmp"))
        if self.stale_temp and self.stale_temp in temps:
            seg.problems.append(f"the start did not remove {self.stale_temp}, the temp file of the checkpoint "
                                "write killed in the previous segment")
        elif self.stale_temp:
            seg.explained = (seg.explained + "; " if seg.explained else "") + (
                f"its start removed {self.stale_temp} (the killed checkpoint write's temp file)")
        self.stale_temp = seg.killed_temp if seg.killed_temp in temps else ""
        if seg.killed_temp and not self.stale_temp:
            seg.problems.append(f"{seg.killed_temp}, the temp file of the killed checkpoint write, was not there "
                                "after the kill")
        seg.temps_left = [t for t in temps if t != self.stale_temp]
        if seg.temps_left:
            seg.problems.append(f"{len(seg.temps_left)} temp file(s) left in the run directory: "
                                + ", ".join(seg.temps_left))

    def _workers(self, host: int, table) -> list[int]:
        """Children of the segment's fork server (or of the host, under spawn), helpers left out."""
        out = []
        for pid, (ppid, _s, state, cmd) in table.items():
            if state == "Z" or "resource_tracker" in cmd:
                continue
            if ppid == host and "forkserver" not in cmd:
                out.append(pid)
            elif ppid in table and table[ppid][0] == host and "forkserver" in table[ppid][3]:
                out.append(pid)
        return out

    @staticmethod
    def _roles(workers: list[int], table) -> tuple[dict[int, tuple[str, int | None]], str]:
        """Each worker's role, read now from the segments it maps, or why the roles are unclear.

        The learner must also be the oldest worker (the host starts it first; actors
        restarted later are younger), and every actor index must appear once.
        """
        roles = {pid: worker_role(pid) for pid in workers}
        if any(r is None for r in roles.values()):
            return {}, "a worker has not attached its shared memory yet"
        learners = [p for p, r in roles.items() if r[0] == "learner"]
        actors = sorted(r[1] for r in roles.values() if r[0] == "actor")
        oldest = min(workers, key=lambda p: (table[p][1], p)) if workers else None
        if len(learners) != 1 or learners[0] != oldest or actors != list(range(N_ACTORS)):
            return {}, (f"roles unclear (learner(s) {learners}, oldest worker {oldest}, actor indices {actors})")
        return roles, ""

    def _fire(self, f: Fault, proc: subprocess.Popen, workers: list[int], table, seg: Segment) -> None:
        f.t_soak = round(self.elapsed(), 2)
        if proc.poll() is not None:
            f.note = "not injected: the segment ended first"
            return
        live, why = ({}, "") if f.kind in HOST_FAULTS else self._roles(workers, table)
        if f.kind not in HOST_FAULTS and not live:
            f.note = f"not injected: {why}"
            return
        try:
            if f.kind in ("actor-kill", "actor-stop"):
                # a stopped actor can be killed (SIGKILL works on it), not stopped again
                actors = sorted(p for p, r in live.items() if r[0] == "actor"
                                and (f.kind == "actor-kill" or p not in self.stopped))
                if not actors:
                    f.note = "not injected: no running actor found"
                    return
                pid = self.rng.choice(actors)
                f.pid, f.target = pid, f"actor {live[pid][1]}"
                if f.kind == "actor-kill":
                    f.detail = "SIGKILL" + (" (it was stopped)" if pid in self.stopped else "")
                    os.kill(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGSTOP)
                    self.stopped[pid] = (table[pid][1], time.monotonic() + f.stop_for_s)
                    f.detail = f"SIGSTOP, SIGCONT after {f.stop_for_s:.2f} s"
            elif f.kind == "learner-kill":
                learners = [p for p, r in live.items() if r[0] == "learner"]
                f.pid, f.target, f.detail = learners[0], "learner", "SIGKILL"
                os.kill(learners[0], signal.SIGKILL)
            elif f.kind in SIGNALS:
                f.pid, sig, name = proc.pid, SIGNALS[f.kind], f.kind.upper()
                if f.target == "host group":
                    os.killpg(proc.pid, sig)
                    f.detail = f"{name} to the process group (like " + (
                        "Ctrl-C)" if f.kind == "sigint" else "a closed terminal)")
                else:
                    os.kill(proc.pid, sig)
                    f.detail = f"{name} to the host"
                if f.phase == "startup":
                    f.detail += ", while the workers were starting"
            elif f.kind in ARMED:
                f.pid = proc.pid
                os.kill(proc.pid, signal.SIGUSR1)
                f.detail = {"enospc-logs": "SIGUSR1: every fsync of the host fails with ENOSPC from now on",
                            "enospc-checkpoint": "SIGUSR1: the fsync of a checkpoint write fails with ENOSPC",
                            "transport-drop": "SIGUSR1: the LAQ (FaultyTransport) loses the next message the "
                                              "host puts"}[seg.armed or ""]
            elif f.kind == "checkpoint-kill":
                if not self._checkpoint_kill(f, proc, seg):
                    return
        except ProcessLookupError:
            f.note = "not injected: the process was gone"
            return
        f.fired = True
        f.fired_ns = time.time_ns()

    def _checkpoint_kill(self, f: Fault, proc: subprocess.Popen, seg: Segment) -> bool:
        """SIGKILL the host while it writes a checkpoint (its temporary file exists), once a whole checkpoint
        exists to fall back on. Returns whether it was injected."""
        ck = self.run_dir / "checkpoint.pt"
        deadline = time.monotonic() + CHECKPOINT_KILL_WAIT_S
        f.pid = proc.pid
        while proc.poll() is None and time.monotonic() < deadline:
            self._resume_stopped(time.monotonic())
            temps = sorted(self.run_dir.glob(".checkpoint.pt.*.tmp")) if ck.exists() else []
            if temps:
                before = _mtime(ck)
                os.kill(proc.pid, signal.SIGKILL)
                if temps[0].exists():
                    seg.killed_temp, seg.killed_ck_mtime = temps[0].name, before
                    f.detail = f"SIGKILL to the host while it wrote {temps[0].name}"
                else:
                    f.detail = "SIGKILL to the host just after a checkpoint write ended (the temp file was gone)"
                return True
            time.sleep(0.002)
        f.note = (f"not injected: no checkpoint write began within {CHECKPOINT_KILL_WAIT_S:g} s"
                  if proc.poll() is None else "not injected: the segment ended first")
        return False

    def _resume_stopped(self, now: float) -> None:
        for pid, (start, due) in list(self.stopped.items()):
            if now >= due:
                if alive(pid, start):
                    try:
                        os.kill(pid, signal.SIGCONT)
                    except ProcessLookupError:
                        pass
                del self.stopped[pid]

    def _mid_check(self, seg: Segment, ck_path: Path, awaiting: list[Fault]) -> None:
        """Check the first checkpoint written after each actor fault, while the segment runs."""
        from pearl_core.runtime.checkpoint import load_checkpoint

        m = _mtime(ck_path)
        covered = [f for f in awaiting if m is not None and m > f.fired_ns + 300_000_000]  # 0.3 s after it
        if not covered:
            return
        try:
            ck = load_checkpoint(ck_path)
        except Exception as exc:  # noqa: BLE001
            if _mtime(ck_path) != m:
                return  # replaced while it was read: the next one is checked instead
            self.ck_failed += 1
            for f in covered:
                f.checked = f"the checkpoint written after it failed to load: {type(exc).__name__}: {exc}"[:300]
                awaiting.remove(f)
            seg.problems.append(f"a checkpoint written during the segment failed to load: {exc}"[:400])
            return
        self.ck_ok += 1
        seg.mid_checks += 1
        e = int(ck.state.env_steps)
        s = int(ck.replay["size"]) if ck.replay is not None else 0
        lost = (e - s) - seg.checked_deficit
        seg.checked_deficit = e - s
        seg.last_checked = (e, s)
        for f in covered:
            f.lost_after = lost
            f.checked = f"checkpoint at env step {e}: {s} stored" + (f", {lost} LOST" if lost else "")
            awaiting.remove(f)
        if lost:
            seg.problems.append(f"{lost} experiences lost at the checkpoint of env step {e} written after "
                                + ", ".join(f"{f.kind} of {f.target} (pid {f.pid})" for f in covered))

    def _check_processes(self, seg: Segment, host: int, seen: dict[int, tuple[int, str]], shm_before: set[str],
                         mapped: set[str]) -> None:
        """Orphans (processes of the segment still alive) and leaked segments, counted, then cleaned up."""
        from pearl_core.runtime.shm import SHM_PREFIX

        deadline = time.monotonic() + ORPHAN_GRACE_S
        while True:
            left = {pid: v for pid, v in seen.items() if alive(pid, v[0])}
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        for pid, (start, cmd) in sorted(left.items()):
            seg.orphans.append(f"pid {pid}: {cmd[:120]}")
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)  # a process this segment started
            except ProcessLookupError:
                pass
        owners = {host, *seen}
        for name in sorted(pearl_segments() - shm_before):
            owner = name[len(SHM_PREFIX):].split("_", 1)[0]
            if (owner.isdigit() and int(owner) in owners) or name in mapped:
                seg.leaked.append(name)
                try:
                    os.unlink(f"/dev/shm/{name}")
                except OSError:
                    pass
        # multiprocessing's named semaphores (the queues' locks) that the segment's processes mapped
        seg.semaphores_left = sorted(n for n in mp_semaphores() & mapped)
        for name in seg.semaphores_left:
            try:
                os.unlink(f"/dev/shm/{name}")
            except OSError:
                pass

    # -- after a segment ---------------------------------------------------------------------
    def _check_checkpoint(self, seg: Segment, ck_path: Path, before: int | None, explains: str | None) -> None:
        import numpy as np

        from pearl_core.replay.storage import TRANSITION_FIELDS
        from pearl_core.runtime.checkpoint import load_checkpoint

        progressed = seg.logged_env_steps > seg.start_env_steps
        now = _mtime(ck_path)
        if now is None:
            seg.ck_loaded = None
            if progressed:
                seg.progress_lost = seg.logged_env_steps
                seg.problems.append(f"no checkpoint at all after logging {seg.logged_env_steps} env steps")
            return
        seg.ck_written = now != before
        if seg.killed_temp and now != seg.killed_ck_mtime:
            seg.problems.append("the checkpoint changed after its write was killed (expected the previous whole one)")
        if not seg.ck_written:  # the previous segment's checkpoint, already checked
            seg.ck_loaded = True
            p = self.prev or {}
            seg.env_steps, seg.updates, seg.stored = p.get("env_steps"), p.get("updates"), p.get("stored")
            if progressed:
                seg.progress_lost = seg.logged_env_steps - (seg.env_steps or 0)
                self._progress_lost(seg, explains, f"the segment logged {seg.logged_env_steps} env steps but "
                                    f"wrote no checkpoint (the last one holds {seg.env_steps})")
            return
        try:
            ck = load_checkpoint(ck_path)
        except Exception as exc:  # noqa: BLE001
            seg.ck_loaded = False
            seg.ck_error = f"{type(exc).__name__}: {exc}"[:1000]
            self.ck_failed += 1
            seg.problems.append(f"checkpoint failed to load: {seg.ck_error}")
            return
        seg.ck_loaded = True
        self.ck_ok += 1
        st = ck.state
        e, u = int(st.env_steps), int(st.updates)
        seg.env_steps, seg.updates = e, u
        seg.actor_restarts = list(ck.extra.get("actor_restarts", []))
        if ck.extra.get("setting") not in (None, seg.setting):
            seg.problems.append(f"the checkpoint says setting {ck.extra.get('setting')}, the segment ran {seg.setting}")
        rep = ck.replay
        s = int(rep["size"]) if rep is not None else 0
        seg.stored = s if rep is not None else None
        if rep is None:
            before = ""
            if seg.last_checked is not None:
                before = (f" (it replaced the checkpoint of env step {seg.last_checked[0]}, checked during the "
                          f"segment, which held {seg.last_checked[1]} rows)")
            seg.problems.append(f"the checkpoint holds no replay (save_replay=True): {e} env steps counted, none "
                                f"stored{before}")
        else:
            if int(rep["capacity"]) != self.args.capacity:
                seg.problems.append(f"replay capacity {rep['capacity']} != {self.args.capacity}")
            if int(rep["cursor"]) != s % self.args.capacity:
                seg.problems.append(f"replay cursor {rep['cursor']} != size {s} % capacity")
            if s:
                zero = ~np.any(rep["obs"].reshape(s, -1) != 0, axis=1) & ~np.any(rep["next_obs"].reshape(s, -1) != 0,
                                                                                 axis=1)
                if zero.any():
                    seg.problems.append(f"{int(zero.sum())} stored rows are blank (all-zero obs and next_obs), "
                                        f"first at row {int(np.argmax(zero))}")
        deficit = e - s
        seg.lost = deficit - self.deficit
        seg.end_lost = deficit - seg.checked_deficit
        if seg.lost < 0:
            seg.problems.append(f"{-seg.lost} more rows stored than env steps counted ({e} counted, {s} stored)")
        elif seg.end_lost > 0:
            seg.problems.append(f"{seg.end_lost} experiences lost at the segment's last checkpoint: {e} env steps "
                                f"counted, {s} stored (deficit {seg.checked_deficit} before)")
        seg.progress_lost = max(0, seg.logged_env_steps - e)
        if seg.progress_lost:
            self._progress_lost(seg, explains, f"the segment logged {seg.logged_env_steps} env steps, its last "
                                f"checkpoint holds {e}")
        p = self.prev
        if p is not None:
            if e < p["env_steps"] or u < p["updates"]:
                seg.problems.append(f"counters went back: env steps {p['env_steps']} -> {e}, updates "
                                    f"{p['updates']} -> {u}")
            if p["rows"] is not None and rep is not None:
                n = p["stored"]
                if s < n:
                    seg.problems.append(f"the replay shrank across the resume: {n} -> {s} rows")
                elif n:
                    changed = np.zeros(n, dtype=bool)
                    for name in TRANSITION_FIELDS:
                        changed |= np.any((p["rows"][name] != rep[name][:n]).reshape(n, -1), axis=1)
                    if changed.any():
                        seg.problems.append(f"{int(changed.sum())} of the {n} rows stored before the resume "
                                            f"changed (first at row {int(np.argmax(changed))})")
            elif p["rows"] is not None and p["stored"]:
                seg.problems.append(f"the {p['stored']} rows the previous checkpoint held are gone")
        self.deficit = deficit
        rows = {name: np.array(rep[name]) for name in TRANSITION_FIELDS} if rep is not None else None
        self.prev = {"env_steps": e, "updates": u, "stored": s, "rows": rows}
        if seg.train_s and e > seg.start_env_steps and seg.status == "max_env_steps":
            self.rate = max(200.0, (e - seg.start_env_steps) / max(seg.train_s, 1.0))

    @staticmethod
    def _progress_lost(seg: Segment, explains: str | None, what: str) -> None:
        """Progress lost is a problem, unless the segment's ending fault accounts for it: a full disk (no
        checkpoint could be written) or a kill during a checkpoint write (the run resumes from the last
        whole one) loses the env steps after the last whole checkpoint, and says so."""
        if explains is None:
            seg.problems.append(f"progress lost: {what}")
            return
        seg.progress_explained = True
        why = "the disk was full (ENOSPC)" if explains == "enospc" else "the host was killed during a checkpoint write"
        seg.explained = (seg.explained + "; " if seg.explained else "") + (
            f"{seg.progress_lost} env steps of progress lost because {why}: {what}")

    def _judge(self, seg: Segment, faults: list[Fault]) -> None:
        """Did the segment end as it should, and which faults did it survive?

        The ending fault (learner kill, SIGINT) survives when the segment ended
        as it must, its last checkpoint loaded and nothing was lost, orphaned or
        leaked. An actor fault survives when the run went on (the runtime saw a
        killed actor and restarted it), the first checkpoint written after it
        (checked during the segment) lost nothing, and nothing was orphaned or
        leaked; with no checkpoint after it, the segment's last checkpoint counts.
        """
        fired = [f for f in faults if f.fired]
        kinds = {f.kind for f in fired}
        errs = [k for k in EXPECTED_ERROR if k in kinds]
        if "learner-kill" in kinds:
            seg.expected = "LearnerError (or, for a kill after the run's last state was taken, a warning naming it)"
            ended_ok = (seg.status == "LearnerError" and "exited with code -9" in seg.error) or (
                seg.status == "max_env_steps" and seg.returncode == 0 and LATE_KILL in seg.output)
        elif errs:
            statuses, words = EXPECTED_ERROR[errs[0]]
            seg.expected = " or ".join(statuses)
            ended_ok = seg.status in statuses and seg.returncode == 3 and any(w in seg.error for w in words)
        elif "checkpoint-kill" in kinds:
            seg.expected = "killed (SIGKILL) during a checkpoint write"
            ended_ok = seg.returncode == -signal.SIGKILL
        elif kinds & set(SIGNALS):
            seg.expected = "interrupted"
            ended_ok = seg.status == "interrupted" and seg.returncode == 0
        elif seg.stalled:  # the stall is reported as a problem of its own; the soak's SIGINT must stop it cleanly
            seg.expected = "interrupted"
            ended_ok = seg.status == "interrupted" and seg.returncode == 0
        else:
            seg.expected = "max_env_steps"
            ended_ok = seg.status == "max_env_steps" and seg.returncode == 0
        if not ended_ok:
            err = [ln for ln in seg.error.strip().splitlines() if ln.strip()]
            line = (err[-1] if seg.status.startswith(("crashed", "no result")) else err[0]) if err else ""
            planned = ("" if seg.ending in kinds or seg.ending == "budget"
                       else f" (planned end {seg.ending}: not injected)")
            seg.problems.append(f"ended with {seg.status!r} (exit code {seg.returncode}); expected "
                                f"{seg.expected!r}{planned}" + (f": {line[:300]}" if line else ""))
        if seg.orphans:
            seg.problems.append(f"{len(seg.orphans)} orphan process(es) after the segment exited")
        if seg.leaked:
            seg.problems.append(f"{len(seg.leaked)} leaked shared-memory segment(s)")
        if seg.semaphores_left:
            seg.problems.append(f"{len(seg.semaphores_left)} leaked semaphore(s)")
        clean = not seg.orphans and not seg.leaked and not seg.semaphores_left and not seg.temps_left
        ending = [f for f in fired if f.kind in ENDING_FAULTS]
        ck_good = seg.ck_loaded is not False and (not seg.progress_lost or seg.progress_explained)
        for f in fired:
            if f.kind == "actor-kill":
                f.seen_by_runtime = any(f"(pid {f.pid}) exited with code -9" in r for r in seg.runtime_faults)
                if not f.seen_by_runtime and seg.status == "max_env_steps":
                    f.note = "the runtime did not report this actor's death"
                    seg.problems.append(f"the kill of actor pid {f.pid} is not in the runtime's faults")
            if f.kind in ("actor-kill", "actor-stop"):
                if f.lost_after is not None:
                    no_loss = f.lost_after == 0
                elif ending:  # no checkpoint between it and the ending fault: a loss there is the ending's
                    no_loss = True
                    f.checked = f.checked or "none before the segment's ending fault"
                else:
                    no_loss = seg.end_lost == 0 and ck_good
                    f.checked = f.checked or "the segment's last checkpoint"
                # a kill the runtime did not notice is fine only if another fault ended the run first
                noticed = f.seen_by_runtime is not False or bool(ending)
                f.survived = ended_ok and clean and no_loss and noticed
            else:
                f.survived = ended_ok and clean and ck_good and seg.end_lost == 0 and seg.lost >= 0
        seg.ok = not seg.problems

    # -- the whole soak ------------------------------------------------------------------------
    def run(self) -> int:
        a = self.args
        budget = a.minutes * 60.0
        k = e0 = failed_starts = 0
        while not self.stopped_early:
            left = budget - self.elapsed()
            if left <= 0 and not (a.endings and k < len(a.endings)):  # --endings: at least one round of them
                break
            seconds = min(a.segment_seconds, max(6.0, left - 10.0))
            if e0 + 2_000 >= a.capacity - 1:
                self.stopped_early = (f"the replay capacity ({a.capacity}) is nearly reached: more env steps "
                                      "would make 'lost' inexact")
                break
            seg, faults = self.plan(k, seconds, e0)
            self.segments.append(seg)
            self.faults.extend(faults)
            print(f"[soak {self.elapsed():6.1f}s] segment {k}: setting {seg.setting}, ends by {seg.ending}, "
                  f"{len(faults)} fault(s) planned, env steps {e0} -> <= {seg.max_env_steps}", file=sys.stderr,
                  flush=True)
            try:
                self.run_segment(seg, faults)
            except KeyboardInterrupt:  # outside the segment's own wait: report what there is
                self.stopped_early = "interrupted by the user (Ctrl-C)"
                seg.problems.append("the soak was interrupted while checking this segment")
                break
            fired = ", ".join(f"{f.kind}{'' if f.survived else ' (NOT survived)'}" for f in faults if f.fired)
            print(f"[soak {self.elapsed():6.1f}s]   -> {seg.status}, env steps {seg.env_steps}, stored "
                  f"{seg.stored}, lost {seg.lost}; faults: {fired or 'none'}"
                  + ("" if seg.ok else f"; PROBLEMS: {'; '.join(seg.problems)}"), file=sys.stderr, flush=True)
            if self.prev is not None:
                e0 = self.prev["env_steps"]
            failed_starts = failed_starts + 1 if seg.train_s is None and not seg.ok else 0
            if failed_starts >= 3:
                self.stopped_early = f"{failed_starts} segments in a row failed before training (see Findings)"
            k += 1
        return self.report()

    # -- report ----------------------------------------------------------------------------------
    def report(self) -> int:
        a = self.args
        segs = self.segments
        fired = [f for f in self.faults if f.fired]
        by_kind = {k: sum(1 for f in fired if f.kind == k) for k in FAULT_KINDS}
        surv = {k: sum(1 for f in fired if f.kind == k and f.survived) for k in FAULT_KINDS}
        skipped: dict[str, int] = {}
        for f in self.faults:
            if not f.fired:
                skipped[f.note or "not injected"] = skipped.get(f.note or "not injected", 0) + 1
        final = self.prev or {"env_steps": 0, "stored": 0}
        lost = sum(max(0, s.lost) for s in segs)
        extra_rows = sum(max(0, -s.lost) for s in segs)
        progress_lost = sum(s.progress_lost for s in segs if not s.progress_explained)
        progress_explained = sum(s.progress_lost for s in segs if s.progress_explained)
        orphans = sum(len(s.orphans) for s in segs)
        leaked = sum(len(s.leaked) for s in segs)
        sems = sum(len(s.semaphores_left) for s in segs)
        temps = sum(len(s.temps_left) for s in segs)
        bad = [s for s in segs if not s.ok]
        failed = bool(lost or extra_rows or progress_lost or orphans or leaked or sems or temps or self.ck_failed
                      or bad or not segs)
        load_end = os.getloadavg()
        cmd = " ".join(shlex.quote(x) for x in [".venv/bin/python", "benchmarks/soak.py", *sys.argv[1:]])
        dur = self.elapsed()
        L = ["# Soak: the parallel runtime under injected faults", ""]
        L.append(f"Run of {self.started_at:%Y-%m-%d %H:%M} UTC. Command: `{cmd}`")
        L.append("")
        L.append(f"Machine: {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}; "
                 f"load average {_load(self.load_start)} at the start, {_load(load_end)} at the end (1/5/15 min).")
        L.append("")
        L.append(f"Workload: CartPole-v1 DQN (MLP {'-'.join(map(str, HIDDEN))}, batch 32, replay ratio 0.5), "
                 f"prioritized replay of capacity {a.capacity} (more than the soak's env steps), save_replay, "
                 f"a checkpoint every {a.checkpoint_every} env steps; {N_ACTORS} actors x {ENVS_PER_ACTOR} envs; "
                 f"segments of about {a.segment_seconds:g} s of training, settings 1 and 2 alternating; seed {a.seed}.")
        L += ["", "## Summary", "", "| measure | value |", "|---|---|"]
        L.append(f"| duration | {dur:.0f} s ({dur / 60:.1f} min) |")
        by_setting = {s: sum(1 for x in segs if x.setting == s) for s in (1, 2)}
        L.append(f"| segments | {len(segs)} (setting 1: {by_setting[1]}, setting 2: {by_setting[2]}); "
                 f"{len(segs) - len(bad)} without a problem |")
        L.append("| faults injected | " + ", ".join(f"{k} {by_kind[k]}" for k in FAULT_KINDS)
                 + f" (total {len(fired)}) |")
        L.append("| faults survived | " + ", ".join(f"{k} {surv[k]}/{by_kind[k]}" for k in FAULT_KINDS)
                 + f" (total {sum(surv.values())}/{len(fired)}) |")
        L.append(f"| experiences produced (env steps the runtime counted, final checkpoint) | {final['env_steps']} |")
        L.append(f"| experiences stored (final checkpoint's replay) | {final['stored']} |")
        L.append(f"| experiences lost | **{lost}** |")
        if extra_rows:
            L.append(f"| rows stored beyond the env steps counted | **{extra_rows}** |")
        L.append(f"| progress lost (env steps a segment logged past its last checkpoint) | **{progress_lost}** |")
        L.append(f"| progress lost that the ending's error explains (ENOSPC: no checkpoint could be written; a kill "
                 f"during a checkpoint write: resumed from the last whole one) | {progress_explained} |")
        L.append(f"| orphan processes | **{orphans}** |")
        L.append(f"| leaked shared-memory segments (`/dev/shm/pearl_*`) | **{leaked}** |")
        L.append(f"| checkpoints loaded OK / failed (after each segment, and after actor faults during it) | "
                 f"{self.ck_ok} / **{self.ck_failed}** |")
        L.append(f"| leaked semaphores (`/dev/shm/sem.mp-*` the segment's processes mapped) | **{sems}** |")
        L.append(f"| temp files left in the run directory (atomic writes; a killed checkpoint write's until the next "
                 f"start) | **{temps}** |")
        L.append(f"| verdict | **{'FAIL' if failed else 'PASS'}** |")
        if skipped:
            L.append("")
            L.append("Planned but not injected: " + "; ".join(f"{n} ({why})" for why, n in skipped.items()) + ".")
        if self.stopped_early:
            L += ["", f"Stopped early: {self.stopped_early}."]
        L += ["", "## Segments", ""]
        L.append("| # | setting | planned end | outcome | wall s | train s | env steps | stored | lost | progress lost "
                 "| actor restarts | faults | checkpoint | explained | problems |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for s in segs:
            fs = [f for f in self.faults if f.segment == s.index and f.fired]
            kinds = ", ".join(f.kind for f in fs) or "-"
            ck = {True: "loaded", False: "FAILED", None: "none"}[s.ck_loaded] + ("" if s.ck_written else " (none new)")
            if s.mid_checks:
                ck += f"; {s.mid_checks} checked during it"
            L.append(f"| {s.index} | {s.setting} | {s.ending} | {s.status} | {s.wall_s:.1f} | "
                     f"{'-' if s.train_s is None else f'{s.train_s:.1f}'} | {s.start_env_steps} -> {s.env_steps} | "
                     f"{s.stored} | {s.lost} | {s.progress_lost} | {s.actor_restarts or '-'} | {kinds} | {ck} | "
                     f"{_cell(s.explained) or '-'} | {_cell('; '.join(s.problems)) or '-'} |")
        L += ["", "## Faults injected", ""]
        L.append("| soak s | segment | setting | kind | target | pid | what | seen by the runtime | next checkpoint "
                 "| survived | note |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for f in fired:
            seen = {True: "yes", False: "no", None: "-"}[f.seen_by_runtime]
            L.append(f"| {f.t_soak} | {f.segment} | {segs[f.segment].setting} | {f.kind} | {f.target or '-'} | "
                     f"{f.pid or '-'} | {f.detail or '-'} | {seen} | {_cell(f.checked) or '-'} | "
                     f"{'yes' if f.survived else '**no**'} | {_cell(f.note) or '-'} |")
        if bad:
            L += ["", "## Findings", ""]
            for s in bad:
                fs = ", ".join(f"{f.kind} ({f.target}, pid {f.pid}, at soak {f.t_soak} s)" for f in self.faults
                               if f.segment == s.index and f.fired) or "no fault"
                L.append(f"* Segment {s.index} (setting {s.setting}, env steps {s.start_env_steps} -> {s.env_steps}; "
                         f"faults: {fs}): " + "; ".join(s.problems) + ".")
                L += [f"  * orphan {o}" for o in s.orphans]
                L += [f"  * leaked `/dev/shm/{name}`" for name in [*s.leaked, *s.semaphores_left]]
                L += [f"  * temp file `{name}` left in the run directory" for name in s.temps_left]
        keep = failed or bool(a.work_dir)
        L.append("")
        L.append(f"Segment logs, specs and results: `{self.work}`." if keep else
                 "Segment logs were in a temporary directory, removed since the soak passed (`--work-dir` keeps them).")
        text = "\n".join(L) + "\n"
        print(text)
        out = Path(a.out) if a.out else DEFAULT_OUT
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(f"report written to {out}", file=sys.stderr)
        if not keep:
            shutil.rmtree(self.work, ignore_errors=True)
        return 1 if failed else 0


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return None


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None


def _load(t: tuple[float, float, float]) -> str:
    return "/".join(f"{x:.2f}" for x in t)



def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=(
        "The full soak runs 30 minutes (the default) and writes its figures to "
        f"{DEFAULT_OUT.relative_to(ROOT)} (and stdout):\n"
        "    .venv/bin/python benchmarks/soak.py --minutes 30 --seed 0\n"
        "A short smoke (tests/e2e/test_soak.py): --minutes 0.6 --out /tmp/soak.md. Fault kinds: "
        + ", ".join(FAULT_KINDS) + ". Exit status 1 when anything was lost, leaked or orphaned."))
    ap.add_argument("--minutes", type=float, default=30.0, help="soak duration (default 30)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the fault schedule and of the runs")
    ap.add_argument("--out", default=None, help=f"markdown report (default {DEFAULT_OUT.relative_to(ROOT)})")
    ap.add_argument("--segment-seconds", type=float, default=20.0, help="training seconds per segment (default 20)")
    ap.add_argument("--checkpoint-every", type=int, default=2_000, help="env steps between checkpoints")
    ap.add_argument("--capacity", type=int, default=None,
                    help="replay capacity; must exceed the soak's env steps (default: 4000 per second of soak, "
                         "at least 300k)")
    ap.add_argument("--stall-seconds", type=float, default=60.0,
                    help="a segment that logs no new env step for this long is reported stalled and sent SIGINT")
    ap.add_argument("--work-dir", default=None, help="where segment logs and the run go (default: a new temp dir)")
    ap.add_argument("--endings", default=None, type=lambda v: [e.strip() for e in v.split(",") if e.strip()],
                    help="the segments' ending faults, in this order, one segment each, round and round, at least "
                         "one round even past --minutes (default: every kind in a seeded order, each in setting 1 "
                         "then 2): " + ", ".join(ENDINGS))
    ap.add_argument("--segment", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.segment:
        return run_segment(args.segment)
    if args.endings is not None and (not args.endings or set(args.endings) - set(ENDINGS)):
        ap.error(f"--endings {','.join(args.endings)}: expected a comma-separated list of " + ", ".join(ENDINGS))
    if args.capacity is None:
        args.capacity = max(300_000, int(args.minutes * 60 * 4000))
    if args.minutes <= 0 or args.segment_seconds <= 0 or args.checkpoint_every < 1:
        ap.error("--minutes and --segment-seconds must be > 0, --checkpoint-every >= 1")
    if args.minutes < 3 and args.segment_seconds == 20.0:
        args.segment_seconds = 10.0  # a short soak still gets several segments
    return Soak(args).run()


if __name__ == "__main__":
    sys.exit(main())
