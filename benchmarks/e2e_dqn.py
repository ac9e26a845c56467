"""End-to-end DQN on CartPole-v1: PEARL's runtimes vs stable-baselines3, same settings.

Every contestant trains DQN with stable-baselines3's tuned CartPole-v1 values
(rl-baselines3-zoo): MLP 256-256, batch 64, lr 2.3e-3, gamma 0.99, buffer 100k,
learning_starts 1000, target copy every 10 env steps (SB3) = every burst of 128
updates (PEARL, see ``pearl_core.algorithms.dqn``), train_freq 256 with 128
gradient steps (replay ratio 0.5), eps 1 -> 0.04 over the first 8k env steps
(16% of the zoo's 5e4-step run), max_grad_norm 10.

Solved = a greedy evaluation of 20 episodes, run every 5k env steps, averages
>= 475; the run stops at the first pass or at the budget (100k env steps).
For SB3 the same rule is an ``EvalCallback``-like callback on a separate env.
Every wall time is a stopwatch in this process, from building the runtime (or
the SB3 model) to ``run()`` (``learn()``) returning: PEARL's process start-up
and shutdown count, as SB3's model construction does, and env steps/s is env
steps over that whole time. One-off costs of the Python process are paid before
any stopwatch starts (:func:`warm_up`). Evaluation time COUNTS in the wall time of every
contestant (PEARL's runtimes evaluate in the host process and report the wall
time after that evaluation; the SB3 callback does the same).

Contestants::

    sb3-uniform             stable-baselines3 DQN (uniform replay; SB3 has no PER)
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
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

PEARL = {
    "pearl-serial-uniform": ("serial", "uniform", None),
    "pearl-serial-per": ("serial", "prioritized", None),
    "pearl-par1-uniform": ("parallel", "uniform", 1),
    "pearl-par1-per": ("parallel", "prioritized", 1),
    "pearl-par2-uniform": ("parallel", "uniform", 2),
    "pearl-par2-per": ("parallel", "prioritized", 2),
}
CONTESTANTS = ("sb3-uniform", *PEARL)

SOLVED_RETURN = 475.0
EVAL_EPISODES = 20
EVAL_EVERY = 5_000
BATCH = 64
TRAIN_EVERY = 256
GRADIENT_STEPS = 128
ZOO_RUN_STEPS = 50_000          # the zoo's n_timesteps: eps decays over 16% of it (8k env steps)
EPS_DECAY_STEPS = int(0.16 * ZOO_RUN_STEPS)

HEADER = "| contestant | seed | solved at (env steps) | wall-to-solved s | env steps/s | updates/s | samples/s |"


def run_pearl(name: str, seed: int, budget: int, eval_every: int, eval_episodes: int, log_root: Path,
              n_actors: int, envs_per_actor: int) -> dict:
    from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria

    kind, replay, setting = PEARL[name]
    cfg = RunConfig(
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
        log_dir=str(log_root / f"{name}-seed{seed}"),
    )
    common = dict(progress=False, tensorboard=False, plot=False)
    t0 = time.perf_counter()  # a stopwatch, as for SB3: from building the runtime to run() returning
    if kind == "serial":
        from pearl_core.runtime.serial import SerialRuntime

        plan = RuntimePlan(rm_threads=1, learner_threads=1)
        rt = SerialRuntime(cfg, plan, **common)
    else:
        from pearl_core.runtime.parallel import ParallelRuntime

        plan = RuntimePlan(setting=setting, n_actors=n_actors, envs_per_actor=envs_per_actor,
                           learner_threads=1, rm_threads=1)
        rt = ParallelRuntime(cfg, plan, **common)
    t_run = time.perf_counter()
    res = rt.run()
    wall = time.perf_counter() - t0
    # The run's own clock starts once its processes are up (res.startup_s before it); the
    # stopwatch figures count that start-up, and the shutdown after, as SB3's do.
    before_clock = (t_run - t0) + res.startup_s
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
        "plan": {"setting": setting, "n_actors": n_actors, "envs_per_actor": envs_per_actor}
        if kind == "parallel" else {"serial": True},
    }


def run_sb3(seed: int, budget: int, eval_every: int, eval_episodes: int, sb3_threads: int) -> dict:
    import gymnasium as gym
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    class GreedyEvalStop(BaseCallback):
        """Every ``eval_every`` env steps: greedy eval of ``eval_episodes`` episodes; stop at >= 475."""

        def __init__(self, t0: float):
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

    from threadpoolctl import threadpool_limits

    threads = torch.get_num_threads()
    # SB3 is one process: it may use every core for torch (its default here). Set explicitly,
    # torch and numpy's BLAS alike, so that a PEARL run earlier in this process (which pins
    # BLAS in the host) cannot decide it by side effect. On the 2-core dev VM 2 threads were as fast
    # or faster: 15k-step runs, medians 686 vs 653 env steps/s (5 interleaved runs each); solved
    # runs, 562 vs 467 (seed 1) and 564 vs 561 (seed 2).
    torch.set_num_threads(sb3_threads)
    blas = threadpool_limits(limits=sb3_threads, user_api="blas")
    try:
        t0 = time.perf_counter()
        env = gym.make("CartPole-v1")
        model = DQN(
            "MlpPolicy", env,
            learning_rate=2.3e-3, batch_size=BATCH, buffer_size=100_000, learning_starts=1_000, gamma=0.99,
            target_update_interval=10, train_freq=TRAIN_EVERY, gradient_steps=GRADIENT_STEPS,
            # SB3 decays eps over exploration_fraction * total_timesteps; total is our budget, so
            # the fraction is rescaled to give the zoo's 16% of 5e4 = 8k env steps.
            exploration_fraction=EPS_DECAY_STEPS / budget, exploration_initial_eps=1.0,
            exploration_final_eps=0.04, max_grad_norm=10, policy_kwargs={"net_arch": [256, 256]},
            seed=seed, device="cpu", verbose=0,
        )
        cb = GreedyEvalStop(t0)
        model.learn(total_timesteps=budget, callback=cb)
        wall = time.perf_counter() - t0
        steps, updates = model.num_timesteps, model._n_updates
    finally:
        torch.set_num_threads(threads)
        blas.restore_original_limits()
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
        "plan": {"sb3": True, "threads": sb3_threads},
    }


def _fmt(v, spec: str = ".0f") -> str:
    return "-" if v is None else format(v, spec)


def table(rows: list[dict]) -> str:
    lines = [HEADER, "|" + "---|" * 7]
    for r in rows:
        solved = str(r["solved_at"]) if r["solved_at"] is not None else f"not solved ({r['env_steps']})"
        lines.append(f"| {r['contestant']} | {r['seed']} | {solved} | {_fmt(r['wall_to_solved_s'], '.1f')} | "
                     f"{r['env_steps_per_s']:.0f} | {r['updates_per_s']:.0f} | {r['samples_per_s']:.0f} |")
    return "\n".join(lines)


def _median(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summary(rows: list[dict]) -> str:
    """Medians per contestant and ratios vs SB3 (unsolved runs are left out of the solve medians)."""
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
    base = med.get("sb3-uniform")
    lines = ["| contestant | solved | median solved at | median wall-to-solved s | median env steps/s | "
             "median updates/s | median samples/s | env steps/s vs SB3 (target >= 3x) | "
             "wall-to-solved vs SB3 (target <= 0.5) |", "|" + "---|" * 9]
    for c in names:
        m = med[c]
        sps_ratio = wall_ratio = "-"
        if base is not None and c != "sb3-uniform":
            if base["sps"]:
                x = m["sps"] / base["sps"]
                sps_ratio = f"{x:.2f}x ({'met' if x >= 3 else 'not met'})"
            if base["wall"] and m["wall"] is not None:
                x = m["wall"] / base["wall"]
                wall_ratio = f"{x:.2f} ({'met' if x <= 0.5 else 'not met'})"
        lines.append(f"| {c} | {m['solved']}/{m['n']} | {_fmt(m['solved_at'])} | {_fmt(m['wall'], '.1f')} | "
                     f"{_fmt(m['sps'])} | {_fmt(m['ups'])} | {_fmt(m['samples'])} | {sps_ratio} | {wall_ratio} |")
    return "\n".join(lines)


def machine() -> str:
    try:
        load = os.getloadavg()
        load_s = f"load average {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}"
    except OSError:
        load_s = "load average n/a"
    import torch

    try:
        import stable_baselines3
        sb3 = stable_baselines3.__version__
    except ImportError:
        sb3 = "not installed"
    return (f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"torch {torch.__version__}, stable-baselines3 {sb3}; {load_s}")


def report(args, rows: list[dict], started: str, load_start: str, done: bool) -> str:
    status = "complete" if done else f"PARTIAL ({len(rows)} runs finished)"
    return (f"command: `{' '.join(['python', *sys.argv])}`\n\n"
            f"started {started} UTC; status: {status}\n\n"
            f"machine at start: {load_start}\n\nmachine now: {machine()}\n\n"
            f"{table(rows)}\n\n{summary(rows)}\n")


def warm_up(names: list[str]) -> None:
    """Load, before any stopwatch, what a contestant's first run would otherwise load inside it:
    torch's optimizer machinery (the first ``torch.optim.Adam`` imports ``torch._dynamo``, ~1.4 s
    here) for everybody, and PEARL's worker fork server (which imports torch once for all the
    workers it forks, ~3 s; :mod:`pearl_core.runtime.procs`). Both are one-off costs of a Python
    process, like ``import stable_baselines3``, which is not timed either."""
    import torch

    torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    if any(n.startswith("pearl-par") for n in names):
        from pearl_core.runtime.procs import worker_context

        worker_context(early=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--contestants", default="all",
                   help=f"comma list of {', '.join(CONTESTANTS)}; 'all' (default), 'pearl' (all PEARL ones)")
    p.add_argument("--budget", type=int, default=100_000, help="env steps per run (default 100k)")
    p.add_argument("--n-actors", type=int, default=1, help="parallel runtime: actor processes")
    p.add_argument("--envs-per-actor", type=int, default=1, help="parallel runtime: envs per actor")
    p.add_argument("--sb3-threads", type=int, default=os.cpu_count() or 1,
                   help="torch (and BLAS) threads for SB3 (default: every core, SB3's own default)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 3k env steps, a 2-episode eval every 1.5k steps; no solve expected")
    p.add_argument("--out", type=Path, default=None, help="write the markdown report here (after every run)")
    p.add_argument("--jsonl", type=Path, default=None, help="append one JSON line per finished run")
    p.add_argument("--log-root", type=Path, default=None, help="PEARL run logs (default: a temp dir)")
    args = p.parse_args(argv)

    if args.contestants == "all":
        names = list(CONTESTANTS)
    elif args.contestants == "pearl":
        names = list(PEARL)
    else:
        names = [c.strip() for c in args.contestants.split(",") if c.strip()]
    bad = [c for c in names if c not in CONTESTANTS]
    if bad:
        p.error(f"unknown contestant(s) {bad}; choose from {', '.join(CONTESTANTS)}")
    if "sb3-uniform" in names:
        try:
            import stable_baselines3  # noqa: F401
        except ImportError:
            print("stable-baselines3 is not installed (pip install -e .[bench]); skipping sb3-uniform",
                  file=sys.stderr)
            names.remove("sb3-uniform")
    budget, eval_every, eval_episodes = (3_000, 1_500, 2) if args.quick else (args.budget, EVAL_EVERY, EVAL_EPISODES)

    warm_up(names)
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
                else:
                    r = run_pearl(name, seed, budget, eval_every, eval_episodes, log_root,
                                  args.n_actors, args.envs_per_actor)
                r = {"contestant": name, "seed": seed, **r, "load1": os.getloadavg()[0]}
                rows.append(r)
                print(f"[e2e] {json.dumps(r)}", file=sys.stderr, flush=True)
                if args.jsonl is not None:
                    args.jsonl.parent.mkdir(parents=True, exist_ok=True)
                    with open(args.jsonl, "a", encoding="utf-8") as fh:
                        fh.write(json.dumps(r) + "\n")
                if args.out is not None:
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    args.out.write_text(report(args, rows, started, load_start, done=False), encoding="utf-8")
    text = report(args, rows, started, load_start, done=True)
    print(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
