"""End-to-end SAC and TD3: PEARL's runtimes vs stable-baselines3 and SBX at the zoo's settings.

Every contestant trains SAC or TD3 with rl-baselines3-zoo's hyper-parameters for the
environment (:data:`ZOO`: ``hyperparams/sac.yml`` / ``td3.yml`` on top of stable-baselines3's
defaults), one for one: network sizes, learning rate, batch, buffer size, learning_starts,
gamma, tau, train_freq / gradient_steps (PEARL: ``replay_ratio = gradient_steps / train_freq``
and ``train_every = train_freq``), TD3's Gaussian action noise, policy delay and target
smoothing, SAC's learned entropy coefficient (from 1, towards ``-|A|``).

Contestants (``--contestants``): ``sb3`` (stable-baselines3's SAC / TD3) and ``sbx``
(sbx-rl's, in JAX on the CPU), both with SB3's uniform replay buffer (neither has PER);
PEARL's serial runtime ``pearl-serial-{uniform,per}`` and its parallel runtime in setting 1
(replay manager in the host, learner in its own process) ``pearl-par1-{uniform,per}`` and
setting 2 (the two co-located) ``pearl-par2-{uniform,per}``, each with uniform or
prioritized replay (``RuntimePlan(n_actors=1, envs_per_actor=1, learner_threads=1,
rm_threads=1)``; ``--n-actors``, ``--envs-per-actor``, ``--learner-threads`` change it).

What a run records (every run takes the whole budget of env steps, default 20k on
Pendulum-v1 and 50k on HalfCheetah-v5; nobody evaluates, every figure comes from the
training episodes):

* **env steps/s, updates/s**: totals over the whole stopwatch, which runs from building
  the runtime (SB3 / SBX: the model) to ``run()`` (``learn()``) returning, as in
  ``e2e_dqn.py``: PEARL's process start-up and shutdown count, SB3's model construction does;
* **window env steps/s, window updates/s**: the same over a fixed window after learning
  starts, from the moment the run has taken ``learning_starts + --window-offset`` env steps
  (default offset 1000) to the moment it has taken the whole budget and done all its
  updates. PEARL: the rows of the run's ``metrics.csv`` (env steps, updates and run-clock
  time, a row every 100 env steps): the first row at or past the start, and the first row
  at the budget with the final update count (in the parallel runtime that is the final row,
  after the host quiesced the workers and wrote the final checkpoint). SB3 / SBX: a callback
  notes the time and the update count at the start step; the end is ``learn()`` returning;
* **return at marks**: the mean return of the last 20 training episodes finished by each
  mark (every ``--mark-every`` env steps, default 5k on Pendulum and 10k on HalfCheetah,
  and the end; fewer than 20 if fewer finished). PEARL's episodes come from its
  ``episodes.csv``; with one environment an episode ends at the running sum of the
  episode lengths (exact), with more at the host's count when it received the episode;
* **wall time to the threshold**: stopwatch time at the end of the first episode after
  which the mean of the last 20 training episodes (a full 20) is >= the threshold
  (Pendulum-v1 -200, HalfCheetah-v5 1500), or "not reached".

One-off costs of the Python process are paid before any stopwatch (:func:`warm_up`):
torch's optimizer machinery, PEARL's worker fork server, and for SBX ``import sbx`` and a
throwaway model per algorithm that trains once (XLA's first compiles); the jit compiles
of each FRESH SBX model stay in its run and COUNT, as in any SBX script. XLA's CPU thread
pool is JAX's default; torch and BLAS get ``--sb3-threads`` for SB3 and for SBX's replay
buffer (default: every core, SB3's own default); PEARL's learner runs on 1 thread unless
``--learner-threads`` says otherwise (parallel runtime).

Runs go seed-major (for each seed: each algorithm, each environment, each contestant),
so a change in the machine's load hits every contestant of a seed alike. Each finished
run is appended to ``--jsonl`` and the markdown report is rewritten to ``--out`` after
every run, so an interrupted sweep keeps its partial tables::

    python benchmarks/e2e_continuous.py --out /tmp/e2e_cont.md --jsonl /tmp/e2e_cont.jsonl
    python benchmarks/e2e_continuous.py --envs Pendulum-v1,HalfCheetah-v5 --algos td3 --seeds 0
    python benchmarks/e2e_continuous.py --quick --contestants pearl-serial-uniform,pearl-par2-per  # smoke

A contestant whose library is missing (``stable-baselines3``, ``sbx-rl``: ``pip install -e
'.[rl,bench]'``) and an environment that cannot be built (HalfCheetah-v5 needs ``pip install
'gymnasium[mujoco]'``) are skipped with a line saying so in the report. The report's notes
say where a contestant cannot follow the zoo (e.g. the uniform-random warm-up).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # e2e_common, also when this file is loaded by path

from e2e_common import PEARL, drop_missing_peers, fmt, import_sbx, keep_run, machine, median
from e2e_common import fraction_cell, parse_learner_threads, pick_contestants, report_head
from e2e_common import speedup_cell, timed_learn, timed_pearl_run, warm_up_process

PEERS = ("sb3", "sbx")  # other libraries, each optional
CONTESTANTS = (*PEERS, *PEARL)
ALGOS = ("sac", "td3")
TRAINERS = {"sac": "pearl_core.algorithms:SAC", "td3": "pearl_core.algorithms:TD3"}

#: Targets of the summary's env steps/s ratios: PEARL vs SB3 and vs SBX.
TARGETS = {"sb3": 3.0, "sbx": 1.5}
RETURN_WINDOW = 20      # training episodes in the mean at marks and for the threshold
METRICS_EVERY = 100     # env steps between rows of PEARL's metrics.csv (the window's clock)
WINDOW_OFFSET = 1_000   # the window starts this many env steps after learning_starts

# SB3's defaults that every run of an algorithm gets explicitly (the zoo leaves them as they are).
SAC_FIXED = {"ent_coef": "auto", "target_entropy": "auto"}  # alpha learnt from 1, towards -|A|
TD3_FIXED = {"policy_delay": 2, "target_policy_noise": 0.2, "target_noise_clip": 0.5}


@dataclasses.dataclass(frozen=True)
class Hyper:
    """One (algorithm, environment) entry of the zoo, SB3's defaults filled in."""

    net: tuple[int, ...]        # hidden layers of the actor and of each critic (SB3's net_arch)
    lr: float                   # every optimizer: actor, critics, SAC's entropy coefficient
    batch: int
    buffer: int
    learning_starts: int
    gamma: float
    tau: float
    train_freq: int             # env steps between trainings ...
    gradient_steps: int         # ... of this many updates
    noise_std: float | None     # TD3: N(0, std^2) action noise in [-1, 1] units; SAC: None
    source: str


_SB3_SAC = "SB3 SAC defaults otherwise (lr 3e-4, buffer 1e6, learning_starts 100, batch 256, tau 0.005, " \
           "gamma 0.99, train_freq 1, gradient_steps 1, net_arch [256, 256])"
_SB3_TD3 = "SB3 TD3 defaults otherwise (buffer 1e6, batch 256, tau 0.005, gamma 0.99)"

#: rl-baselines3-zoo (github.com/DLR-RM/rl-baselines3-zoo, master of 2026-04-23, commit 22e3ff2):
#: its entries for Pendulum-v1 and HalfCheetah-v4 (the zoo has no -v5 entry; v5 is v4's
#: successor in gymnasium 1.x) on top of stable-baselines3 2.9's defaults.
ZOO: dict[tuple[str, str], Hyper] = {
    ("sac", "Pendulum-v1"): Hyper(
        net=(256, 256), lr=1e-3, batch=256, buffer=1_000_000, learning_starts=100, gamma=0.99, tau=0.005,
        train_freq=1, gradient_steps=1, noise_std=None,
        source=f"sac.yml Pendulum-v1: n_timesteps 2e4, learning_rate 1e-3; {_SB3_SAC}"),
    ("sac", "HalfCheetah-v5"): Hyper(
        net=(256, 256), lr=3e-4, batch=256, buffer=1_000_000, learning_starts=10_000, gamma=0.99, tau=0.005,
        train_freq=1, gradient_steps=1, noise_std=None,
        source=f"sac.yml HalfCheetah-v4 (&mujoco-defaults): n_timesteps 1e6, learning_starts 1e4; {_SB3_SAC}"),
    ("td3", "Pendulum-v1"): Hyper(
        net=(400, 300), lr=1e-3, batch=256, buffer=200_000, learning_starts=10_000, gamma=0.98, tau=0.005,
        train_freq=1, gradient_steps=1, noise_std=0.1,
        source="td3.yml Pendulum-v1: n_timesteps 2e4, gamma 0.98, buffer_size 2e5, learning_starts 1e4, "
               "noise normal 0.1, train_freq 1, gradient_steps 1, learning_rate 1e-3, net_arch [400, 300]; "
               "SB3 TD3 defaults otherwise (batch 256, tau 0.005)"),
    ("td3", "HalfCheetah-v5"): Hyper(
        net=(400, 300), lr=1e-3, batch=256, buffer=1_000_000, learning_starts=10_000, gamma=0.99, tau=0.005,
        train_freq=1, gradient_steps=1, noise_std=0.1,
        source="td3.yml HalfCheetah-v4 (&mujoco-defaults): n_timesteps 1e6, learning_starts 1e4, noise normal "
               f"0.1, train_freq 1, gradient_steps 1, learning_rate 1e-3, batch 256, net_arch [400, 300]; {_SB3_TD3}"),
}


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    budget: int         # env steps per run (default)
    threshold: float    # the mean of the last 20 training episodes to reach
    mark_every: int     # env steps between the return marks


ENVS = {
    "Pendulum-v1": EnvSpec(budget=20_000, threshold=-200.0, mark_every=5_000),      # the zoo's n_timesteps
    "HalfCheetah-v5": EnvSpec(budget=50_000, threshold=1500.0, mark_every=10_000),  # 5% of the zoo's 1e6
}

#: ``--quick``: a smoke run (no learning expected): these replace the zoo's values.
QUICK = {"net": (32, 32), "batch": 32, "buffer": 10_000, "learning_starts": 500}
QUICK_RUN = {"budget": 2_000, "mark_every": 1_000, "window_offset": 500}


@dataclasses.dataclass(frozen=True)
class Case:
    """One (algorithm, environment) of a sweep, as it runs."""

    algo: str
    env_id: str
    hp: Hyper
    budget: int
    marks: tuple[int, ...]
    window_start: int
    threshold: float

    @property
    def title(self) -> str:
        return f"{self.algo.upper()} on {self.env_id}"


def make_case(algo: str, env_id: str, *, quick: bool, budget: int | None, mark_every: int | None,
              window_offset: int | None) -> Case:
    """The case as it runs: the zoo's entry (``--quick``: with :data:`QUICK`'s values), the budget,
    the return marks and the window's start (``None`` options: the env's / quick mode's defaults)."""
    hp, spec = ZOO[(algo, env_id)], ENVS[env_id]
    if quick:
        hp = dataclasses.replace(hp, **QUICK)
    budget = budget or (QUICK_RUN["budget"] if quick else spec.budget)
    every = mark_every or (QUICK_RUN["mark_every"] if quick else spec.mark_every)
    offset = window_offset if window_offset is not None else (QUICK_RUN["window_offset"] if quick else WINDOW_OFFSET)
    marks = tuple(range(every, budget, every)) + (budget,)
    return Case(algo, env_id, hp, budget, marks, hp.learning_starts + offset, spec.threshold)


# -- what every run yields -------------------------------------------------------------------------
def mean_last(episodes: list[tuple[int, float, float]], upto: int, window: int = RETURN_WINDOW) -> float | None:
    """Mean return of the last ``window`` episodes ``(env_steps, t, return)`` finished by env step ``upto``."""
    rets = [r for steps, _, r in episodes if steps <= upto][-window:]
    return sum(rets) / len(rets) if rets else None


def first_reach(episodes: list[tuple[int, float, float]], threshold: float,
                window: int = RETURN_WINDOW) -> tuple[int, float] | None:
    """``(env_steps, t)`` at the end of the first episode after which the mean of the last ``window``
    episodes (a full window) is >= ``threshold``; ``None`` if it never is."""
    rets: list[float] = []
    for steps, t, r in episodes:
        rets.append(r)
        if len(rets) >= window and sum(rets[-window:]) / window >= threshold:
            return steps, t
    return None


def measures(case: Case, episodes: list[tuple[int, float, float]], start: tuple[int, int, float] | None,
             end: tuple[int, int, float] | None, env_steps: int, updates: int, wall: float) -> dict:
    """A run's figures from its episodes ``(env_steps, stopwatch s, return)`` and the window's
    ends ``(env_steps, updates, stopwatch s)``; totals over the whole stopwatch ``wall``."""
    w_sps = w_ups = None
    if start is not None and end is not None and end[2] > start[2]:
        dt = end[2] - start[2]
        w_sps, w_ups = (end[0] - start[0]) / dt, (end[1] - start[1]) / dt
    reach = first_reach(episodes, case.threshold)
    return {
        "env_steps": env_steps,
        "updates": updates,
        "wall_s": wall,
        "env_steps_per_s": env_steps / wall,
        "updates_per_s": updates / wall,
        "window": None if start is None or end is None else [start[0], end[0]],
        "window_env_steps_per_s": w_sps,
        "window_updates_per_s": w_ups,
        "returns_at": {str(m): mean_last(episodes, m) for m in case.marks},
        "episodes": len(episodes),
        "reached_at": None if reach is None else reach[0],
        "wall_to_threshold_s": None if reach is None else reach[1],
    }


# -- PEARL ---------------------------------------------------------------------------------------------
def pearl_trainer_kwargs(algo: str, hp: Hyper) -> dict:
    """The zoo's entry as the PEARL trainer's arguments (the same values SB3 and SBX get)."""
    kw = {"actor_hidden": list(hp.net), "critic_hidden": list(hp.net), "actor_lr": hp.lr, "critic_lr": hp.lr,
          "gamma": hp.gamma, "tau": hp.tau}
    if algo == "sac":
        return {**kw, "alpha_lr": hp.lr, "ent_coef": SAC_FIXED["ent_coef"], "target_entropy": None}  # None: -|A|
    return {**kw, "noise_std": hp.noise_std, "policy_delay": TD3_FIXED["policy_delay"],
            "target_noise": TD3_FIXED["target_policy_noise"], "target_noise_clip": TD3_FIXED["target_noise_clip"]}


def _csv_rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def run_pearl(name: str, case: Case, seed: int, log_root: Path, n_actors: int, envs_per_actor: int,
              learner_threads: dict[int, int], train_every: int | None, weight_sync_every: int) -> dict:
    from pearl_core.runtime.config import ReplayConfig, RunConfig, StopCriteria

    hp = case.hp
    cfg = RunConfig(
        env_id=case.env_id,
        trainer=TRAINERS[case.algo],
        trainer_kwargs=pearl_trainer_kwargs(case.algo, hp),
        replay=ReplayConfig(kind=PEARL[name][1], capacity=hp.buffer),
        batch_size=hp.batch,
        learning_starts=hp.learning_starts,
        random_steps=hp.learning_starts,  # the zoo's warm-up: uniformly random actions until learning starts
        replay_ratio=hp.gradient_steps / hp.train_freq,
        train_every=train_every or hp.train_freq,
        weight_sync_every=weight_sync_every,
        stop=StopCriteria(max_env_steps=case.budget, window=RETURN_WINDOW),
        seed=seed,
        log_dir=str(log_root / f"{case.algo}-{case.env_id}-{name}-seed{seed}"),
    )
    res, wall, before, plan = timed_pearl_run(cfg, name, n_actors, envs_per_actor, learner_threads,
                                              metrics_every=METRICS_EVERY)
    # The logs' wall_s is the run clock; ``before`` + it is the stopwatch's time. An episode's env_steps
    # in the log is the count when the host recorded it: in the parallel runtime that is the end of
    # the actor's message holding the episode's last step (up to insert_batch - 1 steps late). With
    # one environment (the serial runtime; the parallel one with one actor and one env) the exact
    # step is the running sum of the episode lengths, as SB3's count at its episode ends.
    log_dir = Path(res.log_dir)
    logged = _csv_rows(log_dir / "episodes.csv")
    one_env = plan.get("serial") or n_actors * envs_per_actor == 1
    ends = itertools.accumulate(int(r["length"]) for r in logged) if one_env else (int(r["env_steps"]) for r in logged)
    episodes = [(end, before + float(r["wall_s"]), float(r["return"])) for end, r in zip(ends, logged)]
    rows = [(int(r["env_steps"]), int(r["updates"]), before + float(r["wall_s"]))
            for r in _csv_rows(log_dir / "metrics.csv")]
    start = next((r for r in rows if r[0] >= case.window_start), None)
    end = next((r for r in rows if r[0] >= case.budget and r[1] >= res.updates), rows[-1] if rows else None)
    out = measures(case, episodes, start, end, res.env_steps, res.updates, wall)
    return {**out, "startup_s": round(before, 3), "run_clock_s": res.wall_time_s, "plan": plan}


# -- stable-baselines3 and SBX ------------------------------------------------------------------------
def _progress_callback(window_start: int, t0: float):
    """An SB3 callback (SB3 and SBX alike) that notes every finished training episode (SB3's
    Monitor wrapper's ``info["episode"]``) and the time and update count at ``window_start``."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Progress(BaseCallback):
        def __init__(self):
            super().__init__()
            self.episodes: list[tuple[int, float, float]] = []
            self.start: tuple[int, int, float] | None = None

        def _on_step(self) -> bool:
            n, t = self.num_timesteps, time.perf_counter() - t0
            for info in self.locals.get("infos", ()):
                if "episode" in info:
                    self.episodes.append((n, t, float(info["episode"]["r"])))
            if self.start is None and n >= window_start:
                self.start = (n, self.model._n_updates, t)
            return True

    return Progress()


def peer_kwargs(case: Case, seed: int, n_actions: int, learning_starts: int | None = None,
                device: str = "cpu") -> dict:
    """The zoo's entry as SB3's (and SBX's) keyword arguments (``device``: torch's, SB3's network and buffer)."""
    import numpy as np

    hp = case.hp
    kw = dict(learning_rate=hp.lr, buffer_size=hp.buffer, batch_size=hp.batch, tau=hp.tau, gamma=hp.gamma,
              learning_starts=hp.learning_starts if learning_starts is None else learning_starts,
              train_freq=hp.train_freq, gradient_steps=hp.gradient_steps,
              policy_kwargs={"net_arch": list(hp.net)}, seed=seed, device=device, verbose=0)
    if case.algo == "sac":
        return {**kw, **SAC_FIXED}
    from stable_baselines3.common.noise import NormalActionNoise

    noise = NormalActionNoise(mean=np.zeros(n_actions), sigma=hp.noise_std * np.ones(n_actions))
    return {**kw, **TD3_FIXED, "action_noise": noise}


def peer_model(name: str, case: Case, seed: int, learning_starts: int | None = None, buffer: int | None = None,
               device: str = "cpu"):
    """A fresh ``stable_baselines3`` (``name="sb3"``) or ``sbx`` SAC / TD3 model on a new env (``device``:
    torch's; SBX computes where ``JAX_PLATFORMS`` says)."""
    import gymnasium as gym

    lib = import_sbx() if name == "sbx" else importlib.import_module("stable_baselines3")
    cls = {"sac": lib.SAC, "td3": lib.TD3}[case.algo]
    env = gym.make(case.env_id)
    kw = peer_kwargs(case, seed, int(env.action_space.shape[0]), learning_starts, device)
    if buffer is not None:
        kw["buffer_size"] = buffer
    return cls("MlpPolicy", env, **kw)


def run_peer(name: str, case: Case, seed: int, threads: int) -> dict:
    # The stopwatch covers the model's construction (and, for SBX, the fresh model's jit compiles).
    model, cb, wall = timed_learn(lambda: peer_model(name, case, seed),
                                  lambda t0: _progress_callback(case.window_start, t0), case.budget, threads)
    steps, updates = model.num_timesteps, model._n_updates
    out = measures(case, cb.episodes, cb.start, (steps, updates, wall), steps, updates, wall)
    return {**out, "plan": {name: True, "threads": threads}}


# -- report --------------------------------------------------------------------------------------------
def _k(steps: int) -> str:
    return f"{steps // 1000}k" if steps % 1000 == 0 else str(steps)


def hyper_table(cases: list[Case]) -> str:
    lines = ["| algo | env | net | lr | batch | buffer | learning_starts | gamma | tau | train_freq / gradient_steps "
             "| PEARL replay_ratio / train_every | action noise | budget | threshold | source |", "|" + "---|" * 15]
    for c in cases:
        h = c.hp
        noise = f"N(0, {h.noise_std}^2)" if h.noise_std is not None else "- (SAC samples; alpha auto)"
        lines.append(f"| {c.algo} | {c.env_id} | {'-'.join(map(str, h.net))} | {h.lr:g} | {h.batch} | {h.buffer:g} | "
                     f"{h.learning_starts} | {h.gamma} | {h.tau} | {h.train_freq} / {h.gradient_steps} | "
                     f"{h.gradient_steps / h.train_freq:g} / {h.train_freq} | {noise} | {c.budget} | {c.threshold:g} | "
                     f"{h.source} |")
    return "\n".join(lines)


def table(case: Case, rows: list[dict]) -> str:
    marks = "".join(f" return @{_k(m)} |" for m in case.marks)
    lines = [f"| contestant | seed | env steps | wall s | env steps/s | updates/s | window env steps/s | "
             f"window updates/s |{marks} threshold reached at (env steps) | wall-to-threshold s |",
             "|" + "---|" * (10 + len(case.marks))]
    for r in rows:
        rets = "".join(f" {fmt(r['returns_at'][str(m)], '.1f')} |" for m in case.marks)
        reached = str(r["reached_at"]) if r["reached_at"] is not None else "not reached"
        lines.append(f"| {r['contestant']} | {r['seed']} | {r['env_steps']} | {r['wall_s']:.1f} | "
                     f"{r['env_steps_per_s']:.0f} | {r['updates_per_s']:.0f} | {fmt(r['window_env_steps_per_s'])} | "
                     f"{fmt(r['window_updates_per_s'])} |{rets} {reached} | {fmt(r['wall_to_threshold_s'], '.1f')} |")
    return "\n".join(lines)


def summary(case: Case, rows: list[dict]) -> str:
    """Medians per contestant; ratios vs SB3 and vs SBX, each where that peer ran (runs that never
    reached the threshold are left out of the wall-to-threshold median)."""
    names = [c for c in CONTESTANTS if any(r["contestant"] == c for r in rows)]
    end = str(case.marks[-1])
    med = {}
    for c in names:
        rs = [r for r in rows if r["contestant"] == c]
        med[c] = {"n": len(rs), "reached": sum(r["reached_at"] is not None for r in rs),
                  **{k: median([r[k] for r in rs]) for k in ("wall_to_threshold_s", "env_steps_per_s", "updates_per_s",
                                                             "window_env_steps_per_s", "window_updates_per_s")},
                  "ret": median([r["returns_at"][end] for r in rs])}
    bases = [b for b in PEERS if b in med]
    head = ("| contestant | runs | reached | median wall-to-threshold s | median env steps/s | median updates/s | "
            "median window env steps/s | median window updates/s | median return at end |")
    for b in bases:
        label, target = b.upper(), TARGETS[b]
        head += (f" env steps/s vs {label} (target >= {target:g}x) | window env steps/s vs {label} "
                 f"(target >= {target:g}x) | wall-to-threshold vs {label} |")
    lines = [head, "|" + "---|" * (9 + 3 * len(bases))]
    for c in names:
        m = med[c]
        line = (f"| {c} | {m['n']} | {m['reached']}/{m['n']} | {fmt(m['wall_to_threshold_s'], '.1f')} | "
                f"{fmt(m['env_steps_per_s'])} | {fmt(m['updates_per_s'])} | {fmt(m['window_env_steps_per_s'])} | "
                f"{fmt(m['window_updates_per_s'])} | {fmt(m['ret'], '.1f')} |")
        for b in bases:
            base = med[b] if b != c else {"env_steps_per_s": None, "window_env_steps_per_s": None,
                                          "wall_to_threshold_s": None}
            line += (f" {speedup_cell(m['env_steps_per_s'], base['env_steps_per_s'], TARGETS[b])} |"
                     f" {speedup_cell(m['window_env_steps_per_s'], base['window_env_steps_per_s'], TARGETS[b])} |"
                     f" {fraction_cell(m['wall_to_threshold_s'], base['wall_to_threshold_s'])} |")
        lines.append(line)
    return "\n".join(lines)


def notes_for(args, names: list[str], cases: list[Case]) -> list[str]:
    """The report's notes on where a contestant cannot follow the zoo one for one."""
    out = []
    peers = [n for n in PEERS if n in names]
    pearl = [n for n in names if n in PEARL]
    if pearl:
        starts = ", ".join(f"{c.algo} {c.env_id} {c.hp.learning_starts}" for c in cases)
        who = f" (here {' and '.join(peers)})" if peers else ""
        out.append(f"warm-up: SB3's off-policy algorithms, so the zoo's runs and SB3 and SBX{who}, act uniformly at "
                   f"random for the first learning_starts env steps (`_sample_action`; {starts}); so do PEARL's "
                   "actors (`RunConfig.random_steps = learning_starts`: each env's own seeded action space). "
                   "No contestant updates before learning_starts.")
    if "sbx" in names:
        out.append("sbx: `sbx.SAC` / `sbx.TD3` on JAX's CPU backend with SB3's arguments above, one for one (sbx's "
                   "own defaults that differ from SB3's, e.g. `sbx.TD3`'s learning_rate 3e-4, are overridden by "
                   "them); its per-model jit compiles count in its wall time.")
    if any(n.startswith("pearl-par") for n in names):
        out.append(f"pearl-par*: the parallel runtime trains continuously at the replay ratio (its actors are "
                   f"throttled to keep it) instead of after every env step, and its actors act with weights "
                   f"published every {args.weight_sync_every} learner updates (`--weight-sync-every`), not the "
                   "latest ones as SB3's single process does.")
    if pearl and args.train_every is not None:
        out.append(f"pearl-serial-*: `--train-every {args.train_every}`: bursts of {args.train_every} x replay "
                   "ratio updates every that many env steps, instead of the zoo's train_freq (the same replay ratio).")
    if peers:
        out.append(f"threads: {' and '.join(peers)} run torch and BLAS on {args.sb3_threads} thread(s) "
                   "(`--sb3-threads`; JAX's XLA pool is its default); PEARL's learner on "
                   f"{'1 (serial), ' if any(n.startswith('pearl-serial') for n in pearl) else ''}"
                   f"`--learner-threads {args.learner_threads}` (parallel). On a busy machine more torch threads "
                   "than free cores can slow SB3 down many-fold: check the load average above.")
    if any(c.algo == "sac" for c in cases) and pearl:
        out.append("SAC: one update's order differs in detail: SB3 and SBX step alpha first, on the actions they "
                   "then use for the actor loss; PEARL steps the critics, then the actor and alpha on a fresh sample.")
    if any(c.env_id != "Pendulum-v1" for c in cases):
        out.append("HalfCheetah-v5 runs the zoo's HalfCheetah-v4 entry (the zoo has none for v5).")
    if args.quick:
        out.append(f"--quick: smoke settings, not the zoo's: {QUICK} for every case, "
                   f"{cases[0].budget if cases else QUICK_RUN['budget']} env steps (no learning expected).")
    return out


def report(args, cases: list[Case], rows: list[dict], started: str, load_start: str, done: bool,
           notes: list[str]) -> str:
    parts = [f"# End-to-end SAC / TD3: PEARL vs stable-baselines3 and SBX\n\n"
             f"{report_head(started, load_start, len(rows), done)}"
             f"## Hyper-parameters (rl-baselines3-zoo; every contestant gets them one for one)\n\n"
             f"{hyper_table(cases)}\n\nSAC also: {SAC_FIXED}; TD3 also: {TD3_FIXED} (SB3's defaults, given "
             f"to every contestant). Window: from the env step given under each title (learning_starts + "
             f"`--window-offset`) to the budget with all updates done; returns: mean of the last {RETURN_WINDOW} "
             f"training episodes; threshold: a full {RETURN_WINDOW}-episode mean >= it (module docstring)."]
    for case in cases:
        rs = [r for r in rows if r["algo"] == case.algo and r["env"] == case.env_id]
        parts.append(f"## {case.title}\n\nbudget {case.budget} env steps, window from env step {case.window_start} "
                     f"(learning_starts {case.hp.learning_starts}), threshold {case.threshold:g}\n\n"
                     f"{table(case, rs)}\n\n{summary(case, rs)}")
    if notes:
        parts.append("## Notes\n\n" + "\n\n".join(notes))
    return "\n\n".join(parts) + "\n"


# -- main ------------------------------------------------------------------------------------------------
def warm_up(names: list[str], cases: list[Case]) -> None:
    """One-off costs of the process before any stopwatch (:func:`e2e_common.warm_up_process`, the
    libraries' imports) and, for SBX, a throwaway model per algorithm that trains once and acts,
    so JAX's import and XLA's first compiles are paid here (a fresh model's own compiles stay in
    its run; module docstring)."""
    warm_up_process(names)
    import pearl_core.algorithms  # noqa: F401

    if "sb3" in names or "sbx" in names:
        import stable_baselines3  # noqa: F401
    if "sbx" in names:
        for algo in dict.fromkeys(c.algo for c in cases):
            case = next(c for c in cases if c.algo == algo)
            model = peer_model("sbx", case, 0, learning_starts=1, buffer=1_000)
            model.learn(total_timesteps=3)
            model.predict(model.env.reset(), deterministic=True)


def usable_envs(env_ids: list[str]) -> tuple[list[str], list[str]]:
    """The environments gymnasium can build here, and a ``skipped ...`` line for each other one."""
    import gymnasium as gym

    ok, notes = [], []
    for env_id in env_ids:
        try:
            gym.make(env_id).close()
            ok.append(env_id)
        except Exception as exc:  # noqa: BLE001 - e.g. mujoco missing: skip the environment, never crash
            why = f"{type(exc).__name__}: {exc}"
            print(f"cannot build {env_id} ({why}); skipping it", file=sys.stderr)
            notes.append(f"skipped {env_id}: gymnasium cannot build it ({why}); HalfCheetah-v5 needs "
                         "`pip install 'gymnasium[mujoco]'`")
    return ok, notes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algos", default="sac,td3", help="comma list of sac, td3 (default both)")
    p.add_argument("--envs", default="Pendulum-v1", help=f"comma list of {', '.join(ENVS)} (default Pendulum-v1)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--contestants", default="all",
                   help=f"comma list of {', '.join(CONTESTANTS)}; 'all' (default), 'pearl' (all PEARL ones)")
    p.add_argument("--budget", type=int, default=None,
                   help="env steps per run (default per env: " + ", ".join(f"{e} {s.budget}" for e, s in ENVS.items())
                   + f"; --quick {QUICK_RUN['budget']})")
    p.add_argument("--mark-every", type=int, default=None, help="env steps between the return marks (default per env)")
    p.add_argument("--window-offset", type=int, default=None,
                   help=f"the rate window starts this many env steps after learning_starts (default {WINDOW_OFFSET})")
    p.add_argument("--n-actors", type=int, default=1, help="parallel runtime: actor processes")
    p.add_argument("--envs-per-actor", type=int, default=1, help="parallel runtime: envs per actor")
    p.add_argument("--learner-threads", default="1:1,2:1", metavar="S:T,...",
                   help="parallel runtime: learner threads per setting (default 1:1,2:1)")
    p.add_argument("--weight-sync-every", type=int, default=10,
                   help="parallel runtime: learner updates between weight pushes to the actors (default 10, "
                        "RunConfig's default)")
    p.add_argument("--train-every", type=int, default=None,
                   help="PEARL serial runtime: env steps between bursts of updates (default: the zoo's train_freq)")
    p.add_argument("--sb3-threads", type=int, default=os.cpu_count() or 1,
                   help="torch (and BLAS) threads for SB3 and for SBX's replay-buffer side (default: every core)")
    p.add_argument("--quick", action="store_true",
                   help=f"smoke run: {QUICK_RUN['budget']} env steps, {QUICK}; no learning expected")
    p.add_argument("--out", type=Path, default=None, help="write the markdown report here (after every run)")
    p.add_argument("--jsonl", type=Path, default=None, help="append one JSON line per finished run")
    p.add_argument("--log-root", type=Path, default=None, help="PEARL run logs (default: a temp dir)")
    args = p.parse_args(argv)

    algos = [a.strip().lower() for a in args.algos.split(",") if a.strip()]
    env_ids = [e.strip() for e in args.envs.split(",") if e.strip()]
    if not algos or any(a not in ALGOS for a in algos):
        p.error(f"--algos {args.algos!r}: choose from {', '.join(ALGOS)}")
    if not env_ids or any(e not in ENVS for e in env_ids):
        p.error(f"--envs {args.envs!r}: choose from {', '.join(ENVS)}")
    names = pick_contestants(p, args.contestants, CONTESTANTS)
    learner_threads = parse_learner_threads(p, args.learner_threads)
    notes = drop_missing_peers(names, "sb3", "sbx")
    env_ids, env_notes = usable_envs(env_ids)
    notes += env_notes
    cases = [make_case(a, e, quick=args.quick, budget=args.budget, mark_every=args.mark_every,
                       window_offset=args.window_offset) for a in algos for e in env_ids]
    notes += notes_for(args, names, cases)

    warm_up(names, cases)
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    load_start = machine()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="pearl_e2e_cont_") as tmp:
        log_root = args.log_root or Path(tmp)
        for seed in args.seeds:
            for case in cases:
                for name in names:
                    print(f"[e2e] {case.title}: {name} seed {seed} ...", file=sys.stderr, flush=True)
                    if name in PEERS:
                        r = run_peer(name, case, seed, args.sb3_threads)
                    else:
                        r = run_pearl(name, case, seed, log_root, args.n_actors, args.envs_per_actor,
                                      learner_threads, args.train_every, args.weight_sync_every)
                    keep_run(rows, {"contestant": name, "seed": seed, "algo": case.algo, "env": case.env_id, **r},
                             args.jsonl, args.out, lambda: report(args, cases, rows, started, load_start, False, notes))
    text = report(args, cases, rows, started, load_start, True, notes)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
