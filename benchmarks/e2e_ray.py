"""End-to-end DQN on CartPole-v1 on a local Ray cluster: PEARL's Ray runtime vs PEARL's
single-machine parallel runtime (equal actors) and RLlib's DQN, same settings, same run.

The cluster is started by this script on this machine (``ray.cluster_utils.Cluster``): a
head node with no CPU for actors and ``--workers`` worker nodes of ``--worker-cpus`` CPUs
each, so every actor runs on a worker node. All contestants train the zoo's DQN of
``e2e_dqn.py`` (MLP 256-256, batch 64, replay ratio 0.5, eps 1 -> 0.04 over 8k env steps,
prioritized replay where the contestant has it) with ``--actors`` actors:

    pearl-ray-per       PEARL's RayRuntime: actors as Ray actors on the worker nodes,
                        replay and learner in this process
    pearl-par2-per      PEARL's ParallelRuntime (setting 2) on this machine, no Ray
                        (the single-machine runtime at equal actors: the Ray runtime's overhead)
    rllib-dqn           RLlib's DQN (new API stack) on the same cluster: ``--actors`` env
                        runners, prioritized episode replay, training_intensity = 0.5 x 64
                        (needs ``pip install "ray[rllib]"``; skipped with a line otherwise)

Solved = a greedy evaluation of 20 episodes every 5k env steps averaging >= 475 (PEARL's
runtimes; RLlib: its own evaluation, same episodes and interval, on a local env runner).
Wall time is a stopwatch from building the runtime (the RLlib algorithm) to the run's end;
env steps/s is env steps over it. Rounds go seed-major, contestants interleaved::

    python benchmarks/e2e_ray.py --seeds 0 1 2 --out benchmarks/results/e2e_ray.md
    python benchmarks/e2e_ray.py --quick          # smoke: 3k env steps, no solve expected
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # e2e_common / e2e_dqn, also when loaded by path

from e2e_common import keep_run, machine, median, report_head, timed_pearl_run, warm_up_process
from e2e_common import fmt
from e2e_dqn import BATCH, EPS_DECAY_STEPS, EVAL_EPISODES, EVAL_EVERY, GRADIENT_STEPS, SOLVED_RETURN, \
    TRAIN_EVERY, cartpole_config, pearl_row

CONTESTANTS = ("pearl-ray-per", "pearl-par2-per", "rllib-dqn")
HEADER = ("| contestant | seed | solved at (env steps) | wall-to-solved s | env steps/s | updates/s "
          "| updates per env step | wall s |")


def start_cluster(workers: int, cpus: int):
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for _ in range(workers):
        c.add_node(num_cpus=cpus)
    ray.init(address=c.address, logging_level="ERROR")
    c.wait_for_nodes()
    return c


def run_ray(seed, budget, eval_every, eval_episodes, log_dir, actors) -> dict:
    from pearl_core.runtime.config import RuntimePlan
    from pearl_core.runtime.rayrun import RayRuntime

    cfg = cartpole_config("prioritized", seed, budget, eval_every, eval_episodes, log_dir)
    plan = RuntimePlan(n_actors=actors, envs_per_actor=1, learner_threads=1, rm_threads=1)
    t0 = time.perf_counter()
    rt = RayRuntime(cfg, plan, progress=False, plot=False, tensorboard=False)
    t_run = time.perf_counter()
    res = rt.run()
    wall = time.perf_counter() - t0
    row = pearl_row(res, wall, (t_run - t0) + res.startup_s, {"ray": True, "n_actors": actors})
    row["actor_nodes"] = {str(i): nodes for i, nodes in rt.actor_nodes.items()}
    return row


def rllib_intensity(actors: int) -> float:
    """RLlib's ``training_intensity`` that gives PEARL's replay ratio (updates per env step).

    RLlib's DQN trains ``round(intensity / native)`` batches per round of sampling, with
    ``native = train_batch / (fragment x envs x (env_runners + 1))`` (it counts the local env
    runner, which does not sample when remote ones exist), and a round samples ``fragment x
    env_runners`` steps. So ``intensity = ratio x batch x env_runners / (env_runners + 1)`` gives
    ``ratio`` updates per env step; ``ratio x batch`` (the documented meaning) would give
    ``(env_runners + 1) / env_runners`` times as many (0.9-1.0 per step measured with 2 runners)."""
    ratio = GRADIENT_STEPS / TRAIN_EVERY
    return ratio * BATCH * actors / (actors + 1)


def run_rllib(seed, budget, eval_every, eval_episodes, actors) -> dict:
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    config = (
        DQNConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=actors, num_envs_per_env_runner=1, num_cpus_per_env_runner=1,
                     rollout_fragment_length=16,  # per runner and round (PEARL's actors: 32 per call)
                     create_env_on_local_worker=True)  # the greedy evaluations run here, as PEARL's
        .training(lr=2.3e-3, gamma=0.99, train_batch_size_per_learner=BATCH, target_network_update_freq=10 * 128,
                  num_steps_sampled_before_learning_starts=1_000, double_q=True, dueling=False, n_step=1,
                  epsilon=[(0, 1.0), (EPS_DECAY_STEPS, 0.04)], grad_clip=10.0,
                  training_intensity=rllib_intensity(actors),
                  replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer", "capacity": 100_000,
                                        "alpha": 0.6, "beta": 0.4})
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[256, 256], fcnet_activation="relu"))
        .learners(num_learners=0)
        .evaluation(evaluation_interval=None, evaluation_duration=eval_episodes, evaluation_duration_unit="episodes",
                    evaluation_num_env_runners=0, evaluation_config={"explore": False})
        .debugging(seed=seed)
    )
    t0 = time.perf_counter()
    algo = config.build_algo()
    steps, solved_at, solved_wall, next_eval, evals = 0, None, None, eval_every, []
    try:
        while steps < budget:
            r = algo.train()
            steps = int(r["env_runners"]["num_env_steps_sampled_lifetime"])
            if steps >= next_eval:
                ev = algo.evaluate()
                mean = float(ev["env_runners"]["episode_return_mean"])
                evals.append(round(mean, 1))
                next_eval += eval_every
                if mean >= SOLVED_RETURN:
                    solved_at, solved_wall = steps, time.perf_counter() - t0
                    break
        updates = int(r.get("learners", {}).get("__all_modules__", {}).get("num_module_steps_trained_lifetime", 0)
                      or 0) // BATCH
    finally:
        algo.stop()
    wall = time.perf_counter() - t0
    return {"solved_at": solved_at, "wall_to_solved_s": solved_wall, "env_steps": steps, "updates": updates,
            "wall_s": wall, "env_steps_per_s": steps / wall, "updates_per_s": updates / wall, "evals": evals}


def table(rows: list[dict]) -> str:
    out = [HEADER, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        per_step = r["updates"] / r["env_steps"] if r["env_steps"] else None
        out.append(f"| {r['contestant']} | {r['seed']} | {fmt(r['solved_at'])} | {fmt(r['wall_to_solved_s'], '.1f')} "
                   f"| {fmt(r['env_steps_per_s'])} | {fmt(r['updates_per_s'])} | {fmt(per_step, '.2f')} "
                   f"| {fmt(r['wall_s'], '.1f')} |")
    return "\n".join(out)


def summary(rows: list[dict]) -> str:
    names = list(dict.fromkeys(r["contestant"] for r in rows))
    med = {n: {"sps": median([r["env_steps_per_s"] for r in rows if r["contestant"] == n]),
               "wall": median([r["wall_to_solved_s"] for r in rows if r["contestant"] == n
                               and r["wall_to_solved_s"] is not None]),
               "solved": sum(r["solved_at"] is not None for r in rows if r["contestant"] == n),
               "runs": sum(r["contestant"] == n for r in rows)} for n in names}
    out = ["| contestant | solved | median env steps/s | median wall-to-solved s | env steps/s vs pearl-ray-per |",
           "|---|---|---|---|---|"]
    base = med.get("pearl-ray-per", {}).get("sps")
    for n, m in med.items():
        ratio = f"{m['sps'] / base:.2f}x" if base and m["sps"] else "-"
        out.append(f"| {n} | {m['solved']}/{m['runs']} | {fmt(m['sps'])} | {fmt(m['wall'], '.1f')} | {ratio} |")
    return "\n".join(out)


def report(rows, started, load_start, done, notes) -> str:
    return ("# End-to-end DQN on a local Ray cluster\n\n" + report_head(started, load_start, len(rows), done)
            + "## Runs\n\n" + table(rows) + "\n\n## Medians\n\n" + summary(rows) + "\n\n"
            + "".join(f"- {n}\n" for n in notes))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--contestants", default=",".join(CONTESTANTS), help=f"comma list of {', '.join(CONTESTANTS)}")
    p.add_argument("--budget", type=int, default=100_000, help="env steps per run (default 100k)")
    p.add_argument("--rllib-budget", type=int, default=None,
                   help="env steps per RLlib run (default: --budget); RLlib runs ~50x slower here")
    p.add_argument("--actors", type=int, default=2, help="actors (RLlib: env runners) of every contestant")
    p.add_argument("--workers", type=int, default=2, help="worker nodes of the local cluster")
    p.add_argument("--worker-cpus", type=int, default=1, help="CPUs of each worker node")
    p.add_argument("--quick", action="store_true", help="smoke run: 3k env steps, 2-episode evals every 1.5k")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--jsonl", type=Path, default=None)
    args = p.parse_args(argv)
    names = [n.strip() for n in args.contestants.split(",") if n.strip()]
    bad = [n for n in names if n not in CONTESTANTS]
    if bad:
        p.error(f"unknown contestant(s) {bad}; choose from {', '.join(CONTESTANTS)}")
    notes = [f"cluster: a head (0 CPUs for actors) and {args.workers} worker nodes of {args.worker_cpus} CPU(s), "
             f"all on this machine; {args.actors} actors per contestant"]
    if "rllib-dqn" in names:
        try:
            import ray.rllib
        except ImportError as exc:
            names.remove("rllib-dqn")
            notes.append(f"rllib-dqn skipped: {exc} (pip install 'ray[rllib]')")
    budget, eval_every, eval_episodes = (3_000, 1_500, 2) if args.quick else (args.budget, EVAL_EVERY, EVAL_EPISODES)
    rllib_budget = budget if args.rllib_budget is None or args.quick else args.rllib_budget
    if "rllib-dqn" in names and rllib_budget != budget:
        notes.append(f"rllib-dqn ran {rllib_budget:,} env steps per run (the others up to {budget:,}): its "
                     "env steps/s compare, its time to solved does not")
    warm_up_process(names)
    cluster = start_cluster(args.workers, args.worker_cpus)
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    load_start = machine()
    rows: list[dict] = []
    try:
        with tempfile.TemporaryDirectory(prefix="pearl_e2e_ray_") as tmp:
            for seed in args.seeds:
                for name in names:
                    print(f"[e2e-ray] {name} seed {seed} ...", file=sys.stderr, flush=True)
                    log_dir = Path(tmp) / f"{name}-seed{seed}"
                    if name == "pearl-ray-per":
                        r = run_ray(seed, budget, eval_every, eval_episodes, log_dir, args.actors)
                    elif name == "pearl-par2-per":
                        cfg = cartpole_config("prioritized", seed, budget, eval_every, eval_episodes, log_dir)
                        r = pearl_row(*timed_pearl_run(cfg, name, args.actors, 1, {2: 1}))
                    else:
                        r = run_rllib(seed, rllib_budget, eval_every, eval_episodes, args.actors)
                    keep_run(rows, {"contestant": name, "seed": seed, **r}, args.jsonl, args.out,
                             lambda: report(rows, started, load_start, False, notes))
    finally:
        import ray

        ray.shutdown()
        cluster.shutdown()
    text = report(rows, started, load_start, True, notes)
    print(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
