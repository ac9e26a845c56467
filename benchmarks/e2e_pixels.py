"""End-to-end DQN on pixels: PEARL's runtimes vs stable-baselines3 and SBX on MinAtar and Atari.

Every contestant trains DQN with rl-baselines3-zoo's Atari values (``hyperparams/dqn.yml``,
``atari:``; :data:`ZOO`) on every game: buffer 100k, lr 1e-4 (Adam, eps 1e-8), batch 32,
gamma 0.99, target copy every 1000 env steps, train_freq 4 with 1 gradient step, epsilon
1 -> 0.01 over the first 10% of the run, Huber loss, max_grad_norm 10 (SB3's default),
no double DQN. Only the run's length is not the zoo's: its 1e7 env steps and
learning_starts 100k are far out of reach of a CPU run, so each game has a small
default budget and learning_starts (:data:`FAMILIES`: MinAtar 50k env steps with
learning_starts 5k, Atari 100k with 10k; ``--budget``, ``--learning-starts``), and the
epsilon decay, 10% of the run, is 10% of that budget for everybody.

PEARL's DQN takes them as ``DQN(lr=1e-4, gamma=0.99, target_update_every=250, tau=1.0,
eps_final=0.01, eps_fraction=0.1, total_env_steps=budget, max_grad_norm=10)`` and
``RunConfig(batch_size=32, replay_ratio=0.25, train_every=4, learning_starts=...,
replay=ReplayConfig(kind, capacity=100_000))``. The target interval: SB3 counts
``target_update_interval`` in env steps and copies the online net into the target
during collection; at train_freq 4 with 1 gradient step that is a copy every
1000 / 4 = 250 gradient steps, each copy taken when the online net has made a whole
number of 250-update stretches (within one update: SB3's first copy after learning
starts comes at the next multiple of 1000 env steps, 249 updates after its first one
when learning_starts is a multiple of 1000). PEARL counts ``target_update_every`` in
learner updates (a hard copy before update 0, 250, 500, ...; the docstring of
``pearl_core.algorithms.dqn`` explains the same alignment for the CartPole
benchmark), hence 250.

**Identical inputs.** Every contestant trains on the environments of
``pearl_core.envs.make_env(env_id, seed)``, the id family's preset wrappers: for
``ALE/...`` the "atari" preset (no-op reset, frame skip 4 with max-pool, 84x84 grey,
4-frame stack, episodic life and sign-clipped rewards), ``(4, 84, 84)`` ``uint8``
channels first; for ``MinAtar/...`` the "minatar" preset, ``(C, 10, 10)`` ``uint8``
0/1. SB3 and SBX get the very env PEARL's actors build (their ``seed`` resets it).

**Identical networks** (their parameter counts are printed in the report's first table):

* Atari: PEARL's Nature-DQN encoder (32 8x8/4, 64 4x4/2, 64 3x3/1, ReLU) and FC 512, a
  linear Q head; inputs scaled by 1/255. SB3's ``CnnPolicy`` default is that network
  (``NatureCNN`` with features_dim 512, then ``net_arch=[]``: one linear layer), on a
  channels-first image space (no ``VecTransposeImage``) scaled by 1/255
  (``normalize_images=True``). SBX's ``CnnPolicy`` is the same stack in flax (its own
  ``NatureCNN``: the same three convolutions, ``Dense(512)``, ReLU, ``Dense(n_actions)``;
  channels first in, /255 inside) once it is given ``net_arch=[512]``: without it SBX's
  ``DQNPolicy`` sets the FC width to 256, overriding its CNN network's own 512.
* MinAtar: PEARL's small encoder (16 3x3/1, ReLU) and FC 128, a linear Q head; inputs
  0/1, not scaled. SB3's ``NatureCNN`` cannot take 10x10 grids (and wants ``high=255``):
  SB3 gets :class:`MinAtarExtractor`, the same layers as an SB3 features extractor, with
  ``normalize_images=False`` and ``net_arch=[]``. SBX gets :func:`sbx_minatar_policy`, a
  ``CnnPolicy`` subclass whose ``build`` puts the same layers in flax (SBX's CnnPolicy
  takes no features extractor; its fixed ``NatureCNN`` divides by 255 and cannot take
  10x10 either).

Initialisations are each library's own (torch's defaults for PEARL and SB3, flax's for SBX).

SBX has no ``max_grad_norm`` argument (its DQN does not clip): as in ``e2e_dqn.py`` the clip
goes in through the policy's ``optimizer_class``, ``optax.chain(clip_by_global_norm(10),
adam(lr))``.

**What a run records** (every run takes the whole budget):

* **env steps/s, updates/s**: over the whole stopwatch, from building the runtime (SB3 /
  SBX: the model) to ``run()`` (``learn()``) returning (:func:`e2e_common.timed_pearl_run`,
  :func:`e2e_common.timed_learn`);
* **window env steps/s, window updates/s**: from the moment the run has taken
  ``learning_starts + --window-offset`` env steps (default offset 1000) to the end (all
  env steps and updates done). PEARL: the rows of its ``metrics.csv`` (every 100 env
  steps); SB3 / SBX: a callback notes the time and update count at the start;
* **greedy return at marks**: every ``--mark-every`` env steps (and so at the budget when
  it is a multiple), the mean return of ``--eval-episodes`` greedy episodes on separate
  evaluation environments ``make_env(env_id, s, evaluation=True)`` (whole games, real
  scores), seeded ``seed + 1_000_003 + ...``. PEARL: its runtime's evaluator (StopCriteria
  with an unreachable ``eval_return``, so it evaluates at every mark and runs the whole
  budget); SB3 / SBX: a callback that runs the very same ``Evaluator`` class
  (``pearl_core.runtime.acting``: the same seeds, the episodes stepped side by side) with
  the model's deterministic ``predict``.
  Evaluation time COUNTS in every contestant's wall time and rates (the serial runtime
  and the peers evaluate inline, the parallel runtime in a host thread while training
  goes on, so it could not be taken out of its wall time alike); each run's seconds
  spent evaluating are in the table (``eval s``).

One-off costs of the Python process are paid before any stopwatch (:func:`warm_up`):
torch's optimizer machinery, PEARL's worker fork server, the environment families'
imports, and for SBX ``import sbx`` plus a throwaway model per game that trains once
(XLA's first compiles); the jit compiles of each FRESH SBX model stay in its run and
COUNT. Torch and BLAS get ``--sb3-threads`` for SB3 and SBX's replay side (default: every
core, SB3's own default); PEARL's serial learner runs on 1 thread, the parallel one on
``--learner-threads``.

Runs go seed-major (for each seed: each game, each contestant), so a change in the
machine's load hits every contestant of a seed alike. Each finished run is appended to
``--jsonl`` and the markdown report is rewritten to ``--out`` after every run::

    python benchmarks/e2e_pixels.py --out /tmp/e2e_px.md --jsonl /tmp/e2e_px.jsonl
    python benchmarks/e2e_pixels.py --envs MinAtar/Breakout-v1 --seeds 0 1 2 --budget 100000
    python benchmarks/e2e_pixels.py --quick --contestants pearl  # smoke: PEARL's contestants
    python benchmarks/e2e_pixels.py --quick --contestants sb3,sbx --envs ALE/Pong-v5

A contestant whose library is missing (``stable-baselines3``, ``sbx-rl``: ``pip install -e
'.[rl,bench]'``) is skipped with a line saying so; the games need the ``pixels`` extra
(``pip install -e '.[pixels]'``: ale-py, minatar, OpenCV).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # e2e_common, also when this file is loaded by path

from e2e_common import PEARL, drop_missing_peers, fmt, import_sbx, keep_run, machine, median
from e2e_common import parse_learner_threads, pick_contestants, report_head, speedup_cell
from e2e_common import timed_learn, timed_pearl_run, warm_up_process

PEERS = ("sb3", "sbx")  # other libraries, each optional
CONTESTANTS = (*PEERS, *PEARL)
#: Targets of the summary's env steps/s ratios: PEARL vs SB3 and vs SBX (as ``e2e_continuous.py``).
TARGETS = {"sb3": 3.0, "sbx": 1.5}
METRICS_EVERY = 100     # env steps between rows of PEARL's metrics.csv (the window's clock)
WINDOW_OFFSET = 1_000   # the window starts this many env steps after learning_starts
EVAL_EPISODES = 5
#: StopCriteria.eval_return for PEARL: never reached, so its runtime evaluates at every mark and runs the budget.
UNREACHABLE_RETURN = 1e9


@dataclasses.dataclass(frozen=True)
class Zoo:
    """rl-baselines3-zoo's ``dqn.yml`` ``atari:`` entry (github.com/DLR-RM/rl-baselines3-zoo) and the
    stable-baselines3 DQN defaults it leaves as they are."""

    buffer: int = 100_000
    lr: float = 1e-4
    adam_eps: float = 1e-8               # SB3: torch Adam's default; SBX: optax.adam's
    batch: int = 32
    learning_starts: int = 100_000       # the zoo's; runs here use the game's small default (FAMILIES)
    target_update_interval: int = 1_000  # env steps (SB3)
    train_freq: int = 4
    gradient_steps: int = 1
    exploration_fraction: float = 0.1
    exploration_initial_eps: float = 1.0
    exploration_final_eps: float = 0.01
    gamma: float = 0.99
    max_grad_norm: float = 10.0          # SB3's default
    n_timesteps: int = 10_000_000        # the zoo's run length

    @property
    def target_every_updates(self) -> int:
        """SB3's target interval in env steps as learner updates (module docstring): 1000 * 1 / 4 = 250."""
        return self.target_update_interval * self.gradient_steps // self.train_freq


ZOO = Zoo()


@dataclasses.dataclass(frozen=True)
class Family:
    budget: int             # env steps per run (default)
    learning_starts: int    # default (the zoo's 100k is beyond these budgets)
    mark_every: int         # env steps between greedy evaluations


FAMILIES = {
    "MinAtar/": Family(budget=50_000, learning_starts=5_000, mark_every=10_000),
    "ALE/": Family(budget=100_000, learning_starts=10_000, mark_every=25_000),
}
DEFAULT_ENVS = "MinAtar/Breakout-v1,ALE/Pong-v5"

#: ``--quick``: a smoke run (no learning expected); these replace the defaults above.
QUICK = {"budget": 600, "learning_starts": 200, "mark_every": 300, "window_offset": 100, "eval_episodes": 1,
         "buffer": 10_000}


def family(env_id: str) -> str | None:
    return next((f for f in FAMILIES if env_id.startswith(f)), None)


@dataclasses.dataclass(frozen=True)
class Case:
    """One game of a sweep, as it runs."""

    env_id: str
    budget: int
    learning_starts: int
    marks: tuple[int, ...]
    window_start: int
    eval_episodes: int
    buffer: int

    @property
    def mark_every(self) -> int:
        return self.marks[0]

    @property
    def atari(self) -> bool:
        return self.env_id.startswith("ALE/")


def make_case(env_id: str, *, quick: bool, budget: int | None = None, learning_starts: int | None = None,
              mark_every: int | None = None, window_offset: int | None = None,
              eval_episodes: int | None = None) -> Case:
    """The case as it runs (``None`` options: the family's / quick mode's defaults)."""
    fam = FAMILIES[family(env_id)]
    d = QUICK if quick else {"budget": fam.budget, "learning_starts": fam.learning_starts,
                             "mark_every": fam.mark_every, "window_offset": WINDOW_OFFSET,
                             "eval_episodes": EVAL_EPISODES, "buffer": ZOO.buffer}
    budget = budget or d["budget"]
    starts = d["learning_starts"] if learning_starts is None else learning_starts
    every = min(mark_every or d["mark_every"], budget)
    offset = d["window_offset"] if window_offset is None else window_offset
    marks = tuple(range(every, budget + 1, every))
    return Case(env_id, budget, starts, marks, starts + offset, eval_episodes or d["eval_episodes"], d["buffer"])


# -- what every run yields ---------------------------------------------------------------------------
def returns_at_marks(case: Case, evals: list[tuple[int, float]]) -> dict[str, float | None]:
    """Each mark's evaluation mean from ``(env_steps, mean)`` pairs: the first evaluation at or after the
    mark and before the next (the parallel runtime's evaluation starts at the first message past it)."""
    out: dict[str, float | None] = {}
    for m in case.marks:
        hit = next((mean for steps, mean in evals if m <= steps < m + case.mark_every), None)
        out[str(m)] = None if hit is None else round(hit, 2)
    return out


def measures(case: Case, evals: list[tuple[int, float]], start: tuple[int, int, float] | None,
             end: tuple[int, int, float] | None, env_steps: int, updates: int, wall: float, eval_s: float) -> dict:
    """A run's figures: the window's ends ``(env_steps, updates, stopwatch s)``, totals over the whole
    stopwatch ``wall`` (evaluation included, ``eval_s`` of it)."""
    w_sps = w_ups = None
    if start is not None and end is not None and end[2] > start[2]:
        dt = end[2] - start[2]
        w_sps, w_ups = (end[0] - start[0]) / dt, (end[1] - start[1]) / dt
    return {
        "env_steps": env_steps,
        "updates": updates,
        "wall_s": wall,
        "eval_s": eval_s,
        "env_steps_per_s": env_steps / wall,
        "updates_per_s": updates / wall,
        "window": None if start is None or end is None else [start[0], end[0]],
        "window_env_steps_per_s": w_sps,
        "window_updates_per_s": w_ups,
        "returns_at": returns_at_marks(case, evals),
    }


# -- PEARL ---------------------------------------------------------------------------------------------
def pearl_trainer_kwargs(case: Case) -> dict:
    """The zoo's values as PEARL DQN's arguments (the encoder and its FC head: DQN's defaults for the image)."""
    return {"encoder": "auto", "lr": ZOO.lr, "adam_eps": ZOO.adam_eps, "gamma": ZOO.gamma, "double_dqn": False,
            "huber_delta": 1.0, "max_grad_norm": ZOO.max_grad_norm, "target_update_every": ZOO.target_every_updates,
            "tau": 1.0, "eps_start": ZOO.exploration_initial_eps, "eps_final": ZOO.exploration_final_eps,
            "eps_fraction": ZOO.exploration_fraction, "total_env_steps": case.budget}


def pearl_config(name: str, case: Case, seed: int, log_dir: str):
    from pearl_core.runtime.config import ReplayConfig, RunConfig, StopCriteria

    return RunConfig(
        env_id=case.env_id,  # env_wrappers=None: the family's presets, the envs the peers get too
        trainer="pearl_core.algorithms:DQN",
        trainer_kwargs=pearl_trainer_kwargs(case),
        replay=ReplayConfig(kind=PEARL[name][1], capacity=case.buffer),
        batch_size=ZOO.batch,
        learning_starts=case.learning_starts,
        replay_ratio=ZOO.gradient_steps / ZOO.train_freq,
        train_every=ZOO.train_freq,
        stop=StopCriteria(eval_return=UNREACHABLE_RETURN, eval_every=case.mark_every,
                          eval_episodes=case.eval_episodes, max_env_steps=case.budget),
        seed=seed,
        log_dir=log_dir,
    )


def _csv_rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def run_pearl(name: str, case: Case, seed: int, log_root: Path, n_actors: int, envs_per_actor: int,
              learner_threads: dict[int, int]) -> dict:
    cfg = pearl_config(name, case, seed, str(log_root / f"{case.env_id.replace('/', '_')}-{name}-seed{seed}"))
    res, wall, before, plan = timed_pearl_run(cfg, name, n_actors, envs_per_actor, learner_threads,
                                              metrics_every=METRICS_EVERY)
    # metrics.csv's wall_s is the run clock; ``before`` + it is the stopwatch's time.
    rows = [(int(r["env_steps"]), int(r["updates"]), before + float(r["wall_s"]))
            for r in _csv_rows(Path(res.log_dir) / "metrics.csv")]
    start = next((r for r in rows if r[0] >= case.window_start), None)
    end = next((r for r in rows if r[0] >= case.budget and r[1] >= res.updates), rows[-1] if rows else None)
    evals = [(int(steps), float(mean)) for steps, mean, _ in res.eval_history]
    out = measures(case, evals, start, end, res.env_steps, res.updates, wall, res.eval_time_s)
    return {**out, "startup_s": round(before, 3), "run_clock_s": res.wall_time_s, "plan": plan}


def pearl_q_params(case: Case) -> int:
    """Parameters of PEARL's Q-network for the game (the trainer built as the runs build it)."""
    from pearl_core.algorithms import DQN
    from pearl_core.envs import env_spaces

    obs_space, act_space = env_spaces(case.env_id)
    trainer = DQN(obs_space, act_space, engine="torch", **pearl_trainer_kwargs(case))
    return sum(p.numel() for p in trainer.q_net.parameters())


# -- stable-baselines3 and SBX ------------------------------------------------------------------------
def minatar_extractor_class():
    """:class:`MinAtarExtractor`: PEARL's small encoder and FC 128 as an SB3 features extractor
    (built on first use: SB3 is optional)."""
    import torch
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from torch import nn

    class MinAtarExtractor(BaseFeaturesExtractor):
        """Conv2d(C, 16, 3) ReLU, Flatten, Linear(16 * (H-2) * (W-2), 128) ReLU: PEARL's "small" encoder
        and its default FC head, on unscaled 0/1 inputs (``normalize_images=False``)."""

        def __init__(self, observation_space, features_dim: int = 128):
            super().__init__(observation_space, features_dim)
            c, h, w = observation_space.shape
            self.net = nn.Sequential(nn.Conv2d(c, 16, 3, stride=1), nn.ReLU(), nn.Flatten(),
                                     nn.Linear(16 * (h - 2) * (w - 2), features_dim), nn.ReLU())

        def forward(self, observations: torch.Tensor) -> torch.Tensor:
            return self.net(observations)

    return MinAtarExtractor


def sb3_policy_kwargs(case: Case) -> dict:
    """SB3's ``CnnPolicy`` arguments: its default NatureCNN for Atari, :class:`MinAtarExtractor` for
    MinAtar; ``net_arch=[]`` (a linear Q head after the features) either way."""
    if case.atari:
        return {"net_arch": [], "normalize_images": True}  # NatureCNN(features_dim=512): the default
    return {"net_arch": [], "normalize_images": False, "features_extractor_class": minatar_extractor_class(),
            "features_extractor_kwargs": {"features_dim": 128}}


def sbx_minatar_policy():
    """An ``sbx`` ``CnnPolicy`` subclass whose Q-network is PEARL's MinAtar network in flax: Conv(16, 3x3,
    VALID) ReLU, Flatten, Dense(128) ReLU, Dense(n_actions), on unscaled 0/1 channels-first inputs.

    SBX's ``CnnPolicy`` takes no features extractor (its ``build`` makes a fixed NatureCNN, which divides
    by 255 and cannot take 10x10 grids), so ``build`` is overridden: the same train state, another module."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    from sbx.common.type_aliases import RLTrainState

    sbx = import_sbx()

    class MinAtarQNetwork(nn.Module):
        n_actions: int
        n_units: int = 128

        @nn.compact
        def __call__(self, x):
            x = jnp.transpose(x.astype(jnp.float32), (0, 2, 3, 1))  # (N, C, H, W) -> flax's (N, H, W, C)
            x = nn.relu(nn.Conv(16, kernel_size=(3, 3), strides=(1, 1), padding="VALID")(x))
            x = x.reshape((x.shape[0], -1))
            x = nn.relu(nn.Dense(self.n_units)(x))
            return nn.Dense(self.n_actions)(x)

    class MinAtarCnnPolicy(sbx.DQN.policy_aliases["CnnPolicy"]):
        def build(self, key, lr_schedule):
            key, qf_key = jax.random.split(key, 2)
            sample = jnp.array([self.observation_space.sample()])
            self.qf = MinAtarQNetwork(n_actions=int(self.action_space.n), n_units=self.n_units)
            params = self.qf.init({"params": qf_key}, sample)
            self.qf_state = RLTrainState.create(
                apply_fn=self.qf.apply, params=params, target_params=self.qf.init({"params": qf_key}, sample),
                tx=self.optimizer_class(learning_rate=lr_schedule(1), **self.optimizer_kwargs))
            self.qf.apply = jax.jit(self.qf.apply)
            return key

    return MinAtarCnnPolicy


def _clipped_adam():
    import optax

    def clipped_adam(learning_rate, **kwargs):
        return optax.chain(optax.clip_by_global_norm(ZOO.max_grad_norm), optax.adam(learning_rate, **kwargs))

    return clipped_adam


def peer_model(name: str, case: Case, seed: int, learning_starts: int | None = None, buffer: int | None = None,
               device: str = "cpu"):
    """A fresh stable-baselines3 (``name="sb3"``) or SBX DQN with the zoo's values on PEARL's env (``device``:
    torch's; SBX computes where ``JAX_PLATFORMS`` says)."""
    from pearl_core.envs import make_env

    env = make_env(case.env_id, seed)
    kw = dict(learning_rate=ZOO.lr, buffer_size=buffer or case.buffer, batch_size=ZOO.batch, gamma=ZOO.gamma, tau=1.0,
              learning_starts=case.learning_starts if learning_starts is None else learning_starts,
              target_update_interval=ZOO.target_update_interval, train_freq=ZOO.train_freq,
              gradient_steps=ZOO.gradient_steps, exploration_fraction=ZOO.exploration_fraction,
              exploration_initial_eps=ZOO.exploration_initial_eps, exploration_final_eps=ZOO.exploration_final_eps,
              seed=seed, device=device, verbose=0)
    if name == "sb3":
        from stable_baselines3 import DQN

        return DQN("CnnPolicy", env, max_grad_norm=ZOO.max_grad_norm, optimize_memory_usage=False,
                   policy_kwargs=sb3_policy_kwargs(case), **kw)
    sbx = import_sbx()
    policy = "CnnPolicy" if case.atari else sbx_minatar_policy()
    net = 512 if case.atari else 128
    return sbx.DQN(policy, env, policy_kwargs={"net_arch": [net], "optimizer_class": _clipped_adam()}, **kw)


def peer_q_params(name: str, case: Case) -> int:
    """Parameters of the peer's online Q-network (a throwaway model with a tiny buffer)."""
    model = peer_model(name, case, 0, buffer=1_000)
    if name == "sb3":
        return sum(p.numel() for p in model.q_net.parameters())
    import jax

    return sum(int(x.size) for x in jax.tree_util.tree_leaves(model.policy.qf_state.params))


class _Greedy:
    """A peer model as the ``get_action`` PEARL's ``Evaluator`` calls: deterministic ``predict``."""

    def __init__(self, model):
        self.model = model

    def get_action(self, obs, explore: bool):
        import numpy as np

        return np.asarray(self.model.predict(obs, deterministic=True)[0]).reshape(-1)


def _progress_callback(case: Case, seed: int, t0: float):
    """An SB3 callback (SB3 and SBX alike): the time and update count at the window's start, and a greedy
    evaluation at every mark by PEARL's ``Evaluator`` on ``evaluation=True`` envs (the same seeds)."""
    from stable_baselines3.common.callbacks import BaseCallback

    from pearl_core.envs import make_env
    from pearl_core.runtime.acting import EVAL_SEED_OFFSET, Evaluator

    class Progress(BaseCallback):
        def __init__(self):
            super().__init__()
            self.start: tuple[int, int, float] | None = None
            self.evaluator = Evaluator(case.env_id, case.eval_episodes, seed + EVAL_SEED_OFFSET,
                                       env_fn=lambda s: make_env(case.env_id, s, evaluation=True))
            self.next_mark = case.mark_every
            self.evals: list[tuple[int, float]] = []
            self.eval_s = 0.0

        def _on_step(self) -> bool:
            n = self.num_timesteps
            if self.start is None and n >= case.window_start:
                self.start = (n, self.model._n_updates, time.perf_counter() - t0)
            if n >= self.next_mark:
                self.next_mark += case.mark_every
                t = time.perf_counter()
                res = self.evaluator.evaluate(_Greedy(self.model))
                self.eval_s += time.perf_counter() - t
                self.evals.append((n, sum(res.returns) / len(res.returns)))
            return True

    return Progress()


def run_peer(name: str, case: Case, seed: int, threads: int) -> dict:
    # The stopwatch covers the model's construction (and, for SBX, the fresh model's jit compiles).
    model, cb, wall = timed_learn(lambda: peer_model(name, case, seed),
                                  lambda t0: _progress_callback(case, seed, t0), case.budget, threads)
    steps, updates = model.num_timesteps, model._n_updates
    out = measures(case, cb.evals, cb.start, (steps, updates, wall), steps, updates, wall, cb.eval_s)
    return {**out, "plan": {name: True, "threads": threads}}


# -- report --------------------------------------------------------------------------------------------
def _k(steps: int) -> str:
    return f"{steps // 1000}k" if steps % 1000 == 0 else str(steps)


def hyper_table(cases: list[Case], params: dict[str, dict[str, int | None]]) -> str:
    """The values every contestant gets, and each one's Q-network parameter count per game."""
    who = [c for c in ("pearl", *PEERS) if any(c in p for p in params.values())]
    lines = ["| env | budget | learning_starts | buffer | lr | batch | gamma | train_freq / gradient_steps | "
             "PEARL replay_ratio / train_every | target copy (SB3 env steps / PEARL updates) | eps | "
             "max_grad_norm | evaluation |" + "".join(f" Q-net params {w} |" for w in who),
             "|" + "---|" * (13 + len(who))]
    for c in cases:
        p = params.get(c.env_id, {})
        counts = "".join(f" {fmt(p.get(w), ',')} |" for w in who)
        lines.append(f"| {c.env_id} | {c.budget} | {c.learning_starts} | {c.buffer:g} | {ZOO.lr:g} | {ZOO.batch} | "
                     f"{ZOO.gamma} | {ZOO.train_freq} / {ZOO.gradient_steps} | "
                     f"{ZOO.gradient_steps / ZOO.train_freq:g} / {ZOO.train_freq} | "
                     f"{ZOO.target_update_interval} / {ZOO.target_every_updates} | "
                     f"{ZOO.exploration_initial_eps:g} -> {ZOO.exploration_final_eps:g} over "
                     f"{ZOO.exploration_fraction:g} x {c.budget} | {ZOO.max_grad_norm:g} | "
                     f"{c.eval_episodes} greedy episode(s) every {c.mark_every} |{counts}")
    return "\n".join(lines)


def table(case: Case, rows: list[dict]) -> str:
    marks = "".join(f" return @{_k(m)} |" for m in case.marks)
    lines = [f"| contestant | seed | env steps | updates | wall s | eval s | env steps/s | updates/s | "
             f"window env steps/s | window updates/s |{marks}",
             "|" + "---|" * (10 + len(case.marks))]
    for r in rows:
        rets = "".join(f" {fmt(r['returns_at'][str(m)], '.1f')} |" for m in case.marks)
        lines.append(f"| {r['contestant']} | {r['seed']} | {r['env_steps']} | {r['updates']} | {r['wall_s']:.1f} | "
                     f"{r['eval_s']:.1f} | {r['env_steps_per_s']:.0f} | {r['updates_per_s']:.0f} | "
                     f"{fmt(r['window_env_steps_per_s'])} | {fmt(r['window_updates_per_s'])} |{rets}")
    return "\n".join(lines)


def summary(case: Case, rows: list[dict]) -> str:
    """Medians over seeds per contestant; env steps/s ratios vs SB3 and vs SBX, each where that peer ran."""
    names = [c for c in CONTESTANTS if any(r["contestant"] == c for r in rows)]
    end = str(case.marks[-1])
    med = {}
    for c in names:
        rs = [r for r in rows if r["contestant"] == c]
        med[c] = {"n": len(rs), **{k: median([r[k] for r in rs]) for k in (
            "wall_s", "env_steps_per_s", "updates_per_s", "window_env_steps_per_s", "window_updates_per_s")},
            "ret": median([r["returns_at"][end] for r in rs])}
    bases = [b for b in PEERS if b in med]
    head = ("| contestant | runs | median wall s | median env steps/s | median updates/s | median window env steps/s | "
            f"median window updates/s | median return @{_k(case.marks[-1])} |")
    for b in bases:
        label, target = b.upper(), TARGETS[b]
        head += (f" env steps/s vs {label} (target >= {target:g}x) | window env steps/s vs {label} "
                 f"(target >= {target:g}x) |")
    lines = [head, "|" + "---|" * (8 + 2 * len(bases))]
    for c in names:
        m = med[c]
        line = (f"| {c} | {m['n']} | {fmt(m['wall_s'], '.1f')} | {fmt(m['env_steps_per_s'])} | "
                f"{fmt(m['updates_per_s'])} | {fmt(m['window_env_steps_per_s'])} | {fmt(m['window_updates_per_s'])} | "
                f"{fmt(m['ret'], '.1f')} |")
        for b in bases:
            base = med[b] if b != c else {"env_steps_per_s": None, "window_env_steps_per_s": None}
            line += (f" {speedup_cell(m['env_steps_per_s'], base['env_steps_per_s'], TARGETS[b])} |"
                     f" {speedup_cell(m['window_env_steps_per_s'], base['window_env_steps_per_s'], TARGETS[b])} |")
        lines.append(line)
    return "\n".join(lines)


def notes_for(args, names: list[str], cases: list[Case]) -> list[str]:
    """The report's notes on what is not the zoo's, and where a contestant cannot follow it one for one."""
    out = []
    peers = [n for n in PEERS if n in names]
    pearl = [n for n in names if n in PEARL]
    runs = ", ".join(f"{c.env_id} {c.budget} env steps with learning_starts {c.learning_starts}" for c in cases)
    out.append(f"run length: the zoo trains Atari for {ZOO.n_timesteps:.0e} env steps with learning_starts "
               f"{ZOO.learning_starts}; these runs are far shorter ({runs}), and epsilon decays over "
               f"{ZOO.exploration_fraction:g} of each run's own budget for every contestant.")
    if pearl and peers:
        out.append("warm-up: SB3 and SBX act uniformly at random for the first learning_starts env steps "
                   "(`_sample_action`); PEARL's actors act epsilon-greedily from the first step with the untrained "
                   "network (epsilon decaying from 1 over the same steps), so the replay they first learn from "
                   "differs slightly. No contestant updates before learning_starts.")
    if "sbx" in names:
        out.append("sbx: `sbx.DQN` on JAX's CPU backend with SB3's arguments above, one for one; max_grad_norm=10 "
                   "goes in as optax.chain(clip_by_global_norm(10), adam) through policy_kwargs['optimizer_class'] "
                   "(sbx.DQN has no max_grad_norm argument). Atari: its own `CnnPolicy` (NatureCNN, "
                   "net_arch=[512]: without it SBX's FC layer would be 256 wide); MinAtar: a `CnnPolicy` subclass "
                   "with PEARL's MinAtar network in flax. Its per-model jit compiles count in its wall time.")
    if any(n.startswith("pearl-par") for n in names):
        out.append("pearl-par*: the parallel runtime trains continuously at the replay ratio (its actors are "
                   "throttled to keep it) instead of once every 4 env steps, acts with weights published every "
                   "10 learner updates (RunConfig's default), and evaluates in a host thread while training goes on.")
    if peers:
        out.append(f"threads: {' and '.join(peers)} run torch and BLAS on {args.sb3_threads} thread(s) "
                   f"(`--sb3-threads`; JAX's XLA pool is its default); PEARL's learner on 1 (serial) and "
                   f"`--learner-threads {args.learner_threads}` (parallel). On a busy machine more torch threads "
                   "than free cores can slow SB3 down many-fold: check the load average above.")
    out.append("evaluation time counts in every wall time and rate (column 'eval s': the seconds spent in it).")
    if args.quick:
        out.append(f"--quick: smoke settings, not the defaults: {QUICK} (no learning expected).")
    return out


def report(args, cases: list[Case], rows: list[dict], params: dict, started: str, load_start: str, done: bool,
           notes: list[str]) -> str:
    parts = [f"# End-to-end DQN on pixels: PEARL vs stable-baselines3 and SBX\n\n"
             f"{report_head(started, load_start, len(rows), done)}"
             f"## Hyper-parameters (rl-baselines3-zoo's Atari DQN, shorter runs; every contestant gets them)\n\n"
             f"{hyper_table(cases, params)}\n\nHuber loss (delta 1), Adam eps {ZOO.adam_eps:g}, hard target copies, "
             f"no double DQN. Window: from learning_starts + `--window-offset` env steps to the end of the run."]
    for case in cases:
        rs = [r for r in rows if r["env"] == case.env_id]
        parts.append(f"## {case.env_id}\n\nbudget {case.budget} env steps, learning_starts {case.learning_starts}, "
                     f"window from env step {case.window_start}, {case.eval_episodes} greedy evaluation episode(s) "
                     f"every {case.mark_every} env steps\n\n{table(case, rs)}\n\n{summary(case, rs)}")
    if notes:
        parts.append("## Notes\n\n" + "\n\n".join(notes))
    return "\n\n".join(parts) + "\n"


# -- main ------------------------------------------------------------------------------------------------
def warm_up(names: list[str], cases: list[Case]) -> None:
    """One-off costs of the process before any stopwatch (:func:`e2e_common.warm_up_process`, the env
    families' imports) and, for SBX, a throwaway model per game that trains once and acts, so JAX's
    import and XLA's first compiles are paid here (a fresh model's own compiles stay in its run)."""
    warm_up_process(names)
    import pearl_core.algorithms  # noqa: F401
    from pearl_core.envs import make_env

    for case in cases:
        make_env(case.env_id, 0).close()
    if "sb3" in names or "sbx" in names:
        import stable_baselines3  # noqa: F401
    if "sbx" in names:
        for case in cases:
            model = peer_model("sbx", case, 0, learning_starts=1, buffer=1_000)
            model.learn(total_timesteps=ZOO.train_freq * 2)
            model.predict(model.env.reset(), deterministic=True)


def q_params(names: list[str], cases: list[Case]) -> dict[str, dict[str, int]]:
    """``env_id -> {"pearl" | "sb3" | "sbx": Q-network parameters}`` for the contestants that run."""
    out: dict[str, dict[str, int]] = {}
    for case in cases:
        p = out.setdefault(case.env_id, {})
        if any(n in PEARL for n in names):
            p["pearl"] = pearl_q_params(case)
        for peer in PEERS:
            if peer in names:
                p[peer] = peer_q_params(peer, case)
    return out


def usable_envs(env_ids: list[str]) -> tuple[list[str], list[str]]:
    """The games that can be built here, and a ``skipped ...`` line for each other one."""
    from pearl_core.envs import make_env

    ok, notes = [], []
    for env_id in env_ids:
        try:
            make_env(env_id, 0).close()
            ok.append(env_id)
        except Exception as exc:  # noqa: BLE001 - e.g. the pixels extra missing: skip the game, never crash
            why = f"{type(exc).__name__}: {exc}"
            print(f"cannot build {env_id} ({why}); skipping it", file=sys.stderr)
            notes.append(f"skipped {env_id}: it cannot be built here ({why})")
    return ok, notes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", default=DEFAULT_ENVS,
                   help=f"comma list of MinAtar/... and ALE/... ids (default {DEFAULT_ENVS})")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--contestants", default="all",
                   help=f"comma list of {', '.join(CONTESTANTS)}; 'all' (default), 'pearl' (all PEARL ones)")
    p.add_argument("--budget", type=int, default=None,
                   help="env steps per run (default per family: " + ", ".join(
                       f"{f} {x.budget}" for f, x in FAMILIES.items()) + f"; --quick {QUICK['budget']})")
    p.add_argument("--learning-starts", type=int, default=None,
                   help="env steps before the first update (default per family: " + ", ".join(
                       f"{f} {x.learning_starts}" for f, x in FAMILIES.items())
                   + f"; the zoo's is {ZOO.learning_starts}; --quick {QUICK['learning_starts']})")
    p.add_argument("--mark-every", type=int, default=None,
                   help="env steps between greedy evaluations (default per family: " + ", ".join(
                       f"{f} {x.mark_every}" for f, x in FAMILIES.items()) + ")")
    p.add_argument("--eval-episodes", type=int, default=None,
                   help=f"greedy episodes per evaluation (default {EVAL_EPISODES}; --quick {QUICK['eval_episodes']})")
    p.add_argument("--window-offset", type=int, default=None,
                   help=f"the rate window starts this many env steps after learning_starts (default {WINDOW_OFFSET})")
    p.add_argument("--n-actors", type=int, default=1, help="parallel runtime: actor processes")
    p.add_argument("--envs-per-actor", type=int, default=1, help="parallel runtime: envs per actor")
    p.add_argument("--learner-threads", default="1:1,2:1", metavar="S:T,...",
                   help="parallel runtime: learner threads per setting (default 1:1,2:1)")
    p.add_argument("--sb3-threads", type=int, default=os.cpu_count() or 1,
                   help="torch (and BLAS) threads for SB3 and for SBX's replay-buffer side (default: every core)")
    p.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK}; no learning expected")
    p.add_argument("--out", type=Path, default=None, help="write the markdown report here (after every run)")
    p.add_argument("--jsonl", type=Path, default=None, help="append one JSON line per finished run")
    p.add_argument("--log-root", type=Path, default=None, help="PEARL run logs (default: a temp dir)")
    args = p.parse_args(argv)

    env_ids = [e.strip() for e in args.envs.split(",") if e.strip()]
    if not env_ids or any(family(e) is None for e in env_ids):
        p.error(f"--envs {args.envs!r}: expected ids under {' or '.join(FAMILIES)}, e.g. {DEFAULT_ENVS}")
    names = pick_contestants(p, args.contestants, CONTESTANTS)
    learner_threads = parse_learner_threads(p, args.learner_threads)
    notes = drop_missing_peers(names, "sb3", "sbx")
    env_ids, env_notes = usable_envs(env_ids)
    notes += env_notes
    cases = [make_case(e, quick=args.quick, budget=args.budget, learning_starts=args.learning_starts,
                       mark_every=args.mark_every, window_offset=args.window_offset,
                       eval_episodes=args.eval_episodes) for e in env_ids]
    notes += notes_for(args, names, cases)

    params = q_params(names, cases)
    warm_up(names, cases)
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    load_start = machine()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="pearl_e2e_px_") as tmp:
        log_root = args.log_root or Path(tmp)
        for seed in args.seeds:
            for case in cases:
                for name in names:
                    print(f"[e2e] {case.env_id}: {name} seed {seed} ...", file=sys.stderr, flush=True)
                    if name in PEERS:
                        r = run_peer(name, case, seed, args.sb3_threads)
                    else:
                        r = run_pearl(name, case, seed, log_root, args.n_actors, args.envs_per_actor, learner_threads)
                    keep_run(rows, {"contestant": name, "seed": seed, "env": case.env_id, **r}, args.jsonl, args.out,
                             lambda: report(args, cases, rows, params, started, load_start, False, notes))
    text = report(args, cases, rows, params, started, load_start, True, notes)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
