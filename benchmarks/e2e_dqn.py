"""End-to-end DQN on CartPole-v1: PEARL's runtimes vs stable-baselines3 and SBX, same settings.

Every contestant trains DQN with stable-baselines3's tuned CartPole-v1 values
(rl-baselines3-zoo): MLP 256-256, batch 64, lr 2.3e-3, gamma 0.99, buffer 100k,
learning_starts 1000, target copy every 10 env steps (SB3) = every burst of 128
updates (PEARL, see ``pearl_core.algorithms.dqn``), train_freq 256 with 128
gradient steps (replay ratio 0.5), eps 1 -> 0.04 over the first 8k env steps
(16% of the zoo's 5e4-step run), max_grad_norm 10.

Solved = a greedy evaluation of 20 episodes, run every 5k env steps, averages
>= 475; the run stops at the first pass or at the budget (100k env steps).
For SB3 and SBX the same rule is an ``EvalCallback``-like callback on a separate env.
Every wall time is a stopwatch in this process, from building the runtime (or
the SB3 / SBX model) to ``run()`` (``learn()``) returning: PEARL's process start-up
and shutdown count, as SB3's model construction does, and env steps/s is env
steps over that whole time. One-off costs of the Python process are paid before
any stopwatch starts (:func:`warm_up`). Evaluation time COUNTS in the wall time of every
contestant (PEARL's runtimes evaluate in the host process and report the wall
time after that evaluation; the SB3 and SBX callbacks do the same).

SBX (``sbx-rl``: stable-baselines3's algorithms in JAX) runs ``sbx.DQN`` on JAX's CPU
backend (``JAX_PLATFORMS=cpu`` unless the environment sets it) with SB3's arguments
above, one for one, with one exception: SBX's DQN has no ``max_grad_norm`` argument
(it is commented out in ``sbx/dqn/dqn.py``; SBX's DQN does not clip). The clip is
given to it instead through its policy's ``optimizer_class``:
``optax.chain(optax.clip_by_global_norm(10), optax.adam(lr))``, the same global-norm
clip as SB3's ``clip_grad_norm_(..., 10)`` before the same Adam (``--sbx-no-clip``
runs SBX as shipped, without it). ``net_arch=[256, 256]`` gives SBX's fixed
two-layer Q-network 256 units a layer (SBX reads only ``net_arch[0]``). JAX's
one-off costs (importing sbx/jax/flax/optax, XLA's first compile) are paid in
:func:`warm_up` by a throwaway model; the jit compiles of a FRESH model (its
train scan, action selection and target copy are traced again for every new
model, about 0.7 s on the 2-core dev VM) are part of each SBX run and COUNT in its
wall time, as they would in any SBX training script. XLA's CPU thread pool is
JAX's default (sized to the machine; it cannot be set after import); torch and
BLAS, which SBX uses for SB3's replay buffer, get ``--sb3-threads`` as SB3 does.

Contestants::

    sb3-uniform             stable-baselines3 DQN (uniform replay; SB3 has no PER)
    sbx-uniform             SBX (sbx-rl) DQN in JAX on the CPU (uniform replay, SB3's buffer)
    pearl-serial-uniform    PEARL serial runtime, uniform replay
    pearl-serial-per        PEARL serial runtime, prioritized replay
    pearl-par1-uniform      PEARL parallel runtime, setting 1 (RM + learner via the host)
    pearl-par1-per
    pearl-par2-uniform      PEARL parallel runtime, setting 2 (RM + learner co-located)
    pearl-par2-per

Runs go seed-major (all contestants for seed 0, then seed 1, ...), so a change in
the machine's load hits every contestant alike. Each finished run is appended to
``--jsonl`` (if given) and the markdown report is rewritten to ``--out`` after
every run, so an interrupted sweep keeps its partial table::

    python benchmarks/e2e_dqn.py --out /tmp/e2e.md --jsonl /tmp/e2e.jsonl
    python benchmarks/e2e_dqn.py --quick --contestants pearl-serial-uniform   # smoke, ~10 s
    python benchmarks/e2e_dqn.py --quick --contestants sbx-uniform --seeds 0  # SBX smoke

A contestant whose library is missing (``stable-baselines3``, ``sbx-rl``; ``pip install
-e '.[rl,bench]'``) is skipped with a line saying so in the report.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # e2e_common, also when loaded by path

from e2e_common import PEARL, drop_missing_peers, import_sbx, keep_run, machine, parse_learner_threads
from e2e_common import fmt as _fmt, median as _median, pick_contestants, ratio_cells, report_head
from e2e_common import timed_learn, timed_pearl_run, warm_up_process
PEERS = ("sb3-uniform", "sbx-uniform")  # other libraries, each optional
CONTESTANTS = (*PEERS, *PEARL)

SOLVED_RETURN = 475.0
EVAL_EPISODES = 20
EVAL_EVERY = 5_000
BATCH = 64
TRAIN_EVERY = 256
GRADIENT_STEPS = 128
ZOO_RUN_STEPS = 50_000          # the zoo's n_timesteps: eps decays over 16% of it (8k env steps)
EPS_DECAY_STEPS = int(0.16 * ZOO_RUN_STEPS)

HEADER = "| contestant | seed | solved at (env steps) | wall-to-solved s | env steps/s | updates/s | samples/s |"


def cartpole_config(replay: str, seed: int, budget: int, eval_every: int, eval_episodes: int, log_dir: Path):
    """The zoo's DQN on CartPole-v1 as a PEARL RunConfig (``replay``: ``"uniform"`` or ``"prioritized"``)."""
    from pearl_core.runtime.config import ReplayConfig, RunConfig, StopCriteria

    return RunConfig(
        env_id="CartPole-v1",
        trainer="pearl_core.algorithms:DQN",
        trainer_kwargs={"total_env_steps": ZOO_RUN_STEPS},  # eps over 16% of 50k, as the zoo
        replay=ReplayConfig(kind=replay, capacity=100_000),
        batch_size=BATCH,
        learning_starts=1_000,
        replay_ratio=GRADIENT_STEPS / TRAIN_EVERY,
        train_every=TRAIN_EVERY,
        stop=StopCriteria(eval_return=SOLVED_RETURN, eval_every=eval_every, eval_episodes=eval_episodes,
                          max_env_steps=budget),
        seed=seed,
        log_dir=str(log_dir),
    )


def run_pearl(name: str, seed: int, budget: int, eval_every: int, eval_episodes: int, log_root: Path,
              n_actors: int, envs_per_actor: int, learner_threads: dict[int, int] | None = None) -> dict:
    _, replay, _ = PEARL[name]
    cfg = cartpole_config(replay, seed, budget, eval_every, eval_episodes, log_root / f"{name}-seed{seed}")
    # A stopwatch, as for SB3: from building the runtime to run() returning. The run's own clock
    # starts once its processes are up (res.startup_s before it); the stopwatch figures count that
    # start-up, and the shutdown after, as SB3's do.
    res, wall, before_clock, plan = timed_pearl_run(cfg, name, n_actors, envs_per_actor, learner_threads)
    return pearl_row(res, wall, before_clock, plan)


def pearl_row(res, wall: float, before_clock: float, plan: dict) -> dict:
    """A PEARL run's row: ``res`` (its RunResult) timed by a stopwatch of ``wall`` s, of which
    ``before_clock`` s came before the run's own clock started."""
    return {
        "solved_at": res.solved_at_env_steps,
        "wall_to_solved_s": None if res.solved_at_wall_s is None else before_clock + res.solved_at_wall_s,
        "env_steps": res.env_steps,
        "updates": res.updates,
        "wall_s": wall,
        "startup_s": round(before_clock, 3),
        "run_clock_s": res.wall_time_s,
        "eval_s": res.eval_time_s,
        "env_steps_per_s": res.env_steps / wall,
        "updates_per_s": res.updates / wall,
        "samples_per_s": res.updates * BATCH / wall,
        "evals": [round(m, 1) for _, m, _ in res.eval_history],
        "plan": plan,
    }


def _greedy_eval_stop(seed: int, eval_every: int, eval_episodes: int, t0: float):
    """The solved rule as an SB3 callback (SB3 and SBX alike): every ``eval_every`` env steps, a
    greedy eval of ``eval_episodes`` episodes on a separate env; stop at >= 475."""
    import gymnasium as gym
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    class GreedyEvalStop(BaseCallback):
        """Every ``eval_every`` env steps: greedy eval of ``eval_episodes`` episodes; stop at >= 475."""

        def __init__(self):
            super().__init__()
            self.t0 = t0
            self.eval_env = gym.make("CartPole-v1")
            self.eval_env.reset(seed=seed + 10_000)
            self.next_eval = eval_every
            self.evals: list[float] = []
            self.eval_s = 0.0
            self.solved_at: int | None = None
            self.solved_wall: float | None = None

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += eval_every
            t = time.perf_counter()
            mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=eval_episodes, deterministic=True)
            self.eval_s += time.perf_counter() - t
            self.evals.append(round(float(mean), 1))
            if mean >= SOLVED_RETURN:
                self.solved_at = self.num_timesteps
                self.solved_wall = time.perf_counter() - self.t0
                return False
            return True

    return GreedyEvalStop()


def _peer_result(cb, steps: int, updates: int, wall: float, plan: dict) -> dict:
    return {
        "solved_at": cb.solved_at,
        "wall_to_solved_s": cb.solved_wall,
        "env_steps": steps,
        "updates": updates,
        "wall_s": wall,
        "eval_s": cb.eval_s,
        "env_steps_per_s": steps / wall,
        "updates_per_s": updates / wall,
        "samples_per_s": updates * BATCH / wall,
        "evals": cb.evals,
        "plan": plan,
    }


def run_sb3(seed: int, budget: int, eval_every: int, eval_episodes: int, sb3_threads: int) -> dict:
    # SB3 is one process: it may use every core for torch (its default here). Set explicitly,
    # torch and numpy's BLAS alike, so that a PEARL run earlier in this process (which pins
    # BLAS in the host) cannot decide it by side effect. On the 2-core dev VM 2 threads were as fast
    # or faster: 15k-step runs, medians 686 vs 653 env steps/s (5 interleaved runs each); solved
    # runs, 562 vs 467 (seed 1) and 564 vs 561 (seed 2).
    return _timed_learn(lambda: sb3_dqn(seed, budget), seed, budget, eval_every, eval_episodes, sb3_threads,
                        {"sb3": True, "threads": sb3_threads})


def sb3_dqn(seed: int, budget: int, device: str = "cpu"):
    """A stable-baselines3 DQN with the zoo's CartPole-v1 values (the module docstring) on ``device``."""
    import gymnasium as gym
    from stable_baselines3 import DQN

    return DQN(
        "MlpPolicy", gym.make("CartPole-v1"),
        learning_rate=2.3e-3, batch_size=BATCH, buffer_size=100_000, learning_starts=1_000, gamma=0.99,
        target_update_interval=10, train_freq=TRAIN_EVERY, gradient_steps=GRADIENT_STEPS,
        # SB3 decays eps over exploration_fraction * total_timesteps; total is our budget, so
        # the fraction is rescaled to give the zoo's 16% of 5e4 = 8k env steps.
        exploration_fraction=EPS_DECAY_STEPS / budget, exploration_initial_eps=1.0,
        exploration_final_eps=0.04, max_grad_norm=10, policy_kwargs={"net_arch": [256, 256]},
        seed=seed, device=device, verbose=0,
    )


SBX_NO_MAX_GRAD_NORM = ("sbx.DQN has no max_grad_norm argument (SBX's DQN does not clip); the zoo's "
                        "max_grad_norm=10 is given to it as optax.chain(clip_by_global_norm(10), adam) "
                        "through policy_kwargs['optimizer_class']")
SBX_AS_SHIPPED = ("sbx.DQN has no max_grad_norm argument; run as shipped (--sbx-no-clip): no gradient "
                  "clipping, unlike SB3's max_grad_norm=10")


def _sbx_dqn(seed: int, budget: int, clip: bool, learning_starts: int = 1_000):
    """An ``sbx.DQN`` with SB3's arguments of :func:`run_sb3` (see the module docstring)."""
    import gymnasium as gym
    import optax

    sbx = import_sbx()
    policy_kwargs: dict = {"net_arch": [256, 256]}
    if clip:
        def clipped_adam(learning_rate, **kwargs):
            return optax.chain(optax.clip_by_global_norm(10.0), optax.adam(learning_rate, **kwargs))

        policy_kwargs["optimizer_class"] = clipped_adam
    return sbx.DQN(
        "MlpPolicy", gym.make("CartPole-v1"),
        learning_rate=2.3e-3, batch_size=BATCH, buffer_size=100_000, learning_starts=learning_starts, gamma=0.99,
        target_update_interval=10, train_freq=TRAIN_EVERY, gradient_steps=GRADIENT_STEPS,
        exploration_fraction=EPS_DECAY_STEPS / budget, exploration_initial_eps=1.0, exploration_final_eps=0.04,
        policy_kwargs=policy_kwargs, seed=seed, device="cpu", verbose=0,  # torch side; JAX: JAX_PLATFORMS
    )


def run_sbx(seed: int, budget: int, eval_every: int, eval_episodes: int, threads: int, clip: bool) -> dict:
    # The stopwatch covers the fresh model's jit compiles (see the module docstring).
    return _timed_learn(lambda: _sbx_dqn(seed, budget, clip), seed, budget, eval_every, eval_episodes, threads,
                        {"sbx": True, "threads": threads, "grad_clip": clip})


def _timed_learn(build, seed: int, budget: int, eval_every: int, eval_episodes: int, threads: int,
                 plan: dict) -> dict:
    """A peer's run (SB3, SBX): threads pinned, then a stopwatch from ``build()`` (the model's
    construction) to ``learn()`` returning, with the solved callback."""
    model, cb, wall = timed_learn(build, lambda t0: _greedy_eval_stop(seed, eval_every, eval_episodes, t0),
                                  budget, threads)
    return _peer_result(cb, model.num_timesteps, model._n_updates, wall, plan)


def table(rows: list[dict]) -> str:
    lines = [HEADER, "|" + "---|" * 7]
    for r in rows:
        solved = str(r["solved_at"]) if r["solved_at"] is not None else f"not solved ({r['env_steps']})"
        lines.append(f"| {r['contestant']} | {r['seed']} | {solved} | {_fmt(r['wall_to_solved_s'], '.1f')} | "
                     f"{r['env_steps_per_s']:.0f} | {r['updates_per_s']:.0f} | {r['samples_per_s']:.0f} |")
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    """Medians per contestant and ratios vs SB3, and vs SBX when SBX ran (unsolved runs are left
    out of the solve medians)."""
    names = [c for c in CONTESTANTS if any(r["contestant"] == c for r in rows)]
    med = {}
    for c in names:
        rs = [r for r in rows if r["contestant"] == c]
        med[c] = {
            "n": len(rs),
            "solved": sum(r["solved_at"] is not None for r in rs),
            "solved_at": _median([r["solved_at"] for r in rs]),
            "wall": _median([r["wall_to_solved_s"] for r in rs]),
            "sps": _median([r["env_steps_per_s"] for r in rs]),
            "ups": _median([r["updates_per_s"] for r in rs]),
            "samples": _median([r["samples_per_s"] for r in rs]),
        }
    # (name, its label in the headers); a baseline's columns are shown for SB3 always (as before)
    # and for SBX only when an SBX run is in the rows.
    bases = [("sb3-uniform", "SB3")] + ([("sbx-uniform", "SBX")] if "sbx-uniform" in med else [])
    head = ("| contestant | solved | median solved at | median wall-to-solved s | median env steps/s | "
            "median updates/s | median samples/s |")
    for _, label in bases:
        head += f" env steps/s vs {label} (target >= 3x) | wall-to-solved vs {label} (target <= 0.5) |"
    lines = [head, "|" + "---|" * (7 + 2 * len(bases))]
    for c in names:
        m = med[c]
        line = (f"| {c} | {m['solved']}/{m['n']} | {_fmt(m['solved_at'])} | {_fmt(m['wall'], '.1f')} | "
                f"{_fmt(m['sps'])} | {_fmt(m['ups'])} | {_fmt(m['samples'])} |")
        for base, _ in bases:
            sps_ratio, wall_ratio = ratio_cells(m, None if c == base else med.get(base))
            line += f" {sps_ratio} | {wall_ratio} |"
        lines.append(line)
    return "\n".join(lines)


def report(args, rows: list[dict], started: str, load_start: str, done: bool, notes: list[str] = ()) -> str:
    """The markdown report; ``notes`` are lines printed under the tables (skipped contestants,
    settings a peer library lacks)."""
    notes_s = "".join(f"\n{n}\n" for n in notes)
    return f"{report_head(started, load_start, len(rows), done)}{table(rows)}\n\n{summary(rows)}\n{notes_s}"


def warm_up(names: list[str], budget: int = 100_000, sbx_clip: bool = True) -> None:
    """Load, before any stopwatch, what a contestant's first run would otherwise load inside it
    (:func:`e2e_common.warm_up_process`: torch's optimizer machinery, PEARL's worker fork server).
    Both are one-off costs of a Python process, like ``import stable_baselines3``, which is not
    timed either.

    For SBX: ``import sbx`` (jax, flax, optax, tensorflow-probability; ~3 s) and a throwaway
    model that trains once (one 128-step train scan after 256 env steps) and plays one greedy
    episode, so XLA's first compiles in the process (~2.5 s on the dev VM) are paid here. A
    fresh model's own compiles are not cached across models (the jitted functions close over
    the model's network) and stay in each run (~0.7 s; module docstring)."""
    warm_up_process(names)
    if "sbx-uniform" in names:
        import gymnasium as gym
        from stable_baselines3.common.evaluation import evaluate_policy

        model = _sbx_dqn(0, budget, sbx_clip, learning_starts=0)
        model.learn(total_timesteps=TRAIN_EVERY)
        evaluate_policy(model, gym.make("CartPole-v1"), n_eval_episodes=1, deterministic=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--contestants", default="all",
                   help=f"comma list of {', '.join(CONTESTANTS)}; 'all' (default), 'pearl' (all PEARL ones)")
    p.add_argument("--budget", type=int, default=100_000, help="env steps per run (default 100k)")
    p.add_argument("--n-actors", type=int, default=1, help="parallel runtime: actor processes")
    p.add_argument("--envs-per-actor", type=int, default=1, help="parallel runtime: envs per actor")
    p.add_argument("--learner-threads", default="1:1,2:1", metavar="S:T,...",
                   help="parallel runtime: learner threads per setting (default 1:1,2:1; `make demo` composes "
                        "2:2 on the 2-core dev VM, see its plan)")
    p.add_argument("--sb3-threads", type=int, default=os.cpu_count() or 1,
                   help="torch (and BLAS) threads for SB3 and for SBX's replay-buffer side (default: every "
                        "core, SB3's own default); JAX's XLA pool is its default, sized to the machine")
    p.add_argument("--sbx-no-clip", action="store_true",
                   help="run sbx.DQN as shipped, without the max_grad_norm=10 clip given to it through "
                        "optax (sbx.DQN has no max_grad_norm argument)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 3k env steps, a 2-episode eval every 1.5k steps; no solve expected")
    p.add_argument("--out", type=Path, default=None, help="write the markdown report here (after every run)")
    p.add_argument("--jsonl", type=Path, default=None, help="append one JSON line per finished run")
    p.add_argument("--log-root", type=Path, default=None, help="PEARL run logs (default: a temp dir)")
    args = p.parse_args(argv)

    names = pick_contestants(p, args.contestants, CONTESTANTS)
    notes = drop_missing_peers(names, "sb3-uniform", "sbx-uniform")  # lines under the report's tables
    if "sbx-uniform" in names:
        notes.append(f"sbx-uniform: {SBX_AS_SHIPPED if args.sbx_no_clip else SBX_NO_MAX_GRAD_NORM}; "
                         "its per-model jit compiles count in its wall time")
    budget, eval_every, eval_episodes = (3_000, 1_500, 2) if args.quick else (args.budget, EVAL_EVERY, EVAL_EPISODES)
    learner_threads = parse_learner_threads(p, args.learner_threads)

    warm_up(names, budget, sbx_clip=not args.sbx_no_clip)
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    load_start = machine()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="pearl_e2e_") as tmp:
        log_root = args.log_root or Path(tmp)
        for seed in args.seeds:
            for name in names:
                print(f"[e2e] {name} seed {seed} ...", file=sys.stderr, flush=True)
                if name == "sb3-uniform":
                    r = run_sb3(seed, budget, eval_every, eval_episodes, args.sb3_threads)
                elif name == "sbx-uniform":
                    r = run_sbx(seed, budget, eval_every, eval_episodes, args.sb3_threads, not args.sbx_no_clip)
                else:
                    r = run_pearl(name, seed, budget, eval_every, eval_episodes, log_root,
                                  args.n_actors, args.envs_per_actor, learner_threads)
                keep_run(rows, {"contestant": name, "seed": seed, **r}, args.jsonl, args.out,
                         lambda: report(args, rows, started, load_start, done=False, notes=notes))
    text = report(args, rows, started, load_start, done=True, notes=notes)
    print(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
