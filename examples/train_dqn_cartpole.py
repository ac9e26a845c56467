"""The main job: compose an all-CPU plan and train DQN on CartPole-v1 until it is solved.

Solved = a greedy evaluation of 20 episodes, run every 5k env steps, averages >= 475
(budget 100k env steps). Settings mirror stable-baselines3's tuned CartPole-v1 DQN
(MLP 256-256, batch 64, lr 2.3e-3, 0.5 updates per env step). Run: `make demo`.
Logs, the learning curve (PNG) and a final checkpoint go to runs/demo/.
"""

import argparse

from pearl_core.algorithms import DQN
from pearl_core.composer import make_plan, workload_for_env
from pearl_core.composer.detect import detect_hardware
from pearl_core.runtime import ReplayConfig, RunConfig, StopCriteria
from pearl_core.runtime import ParallelRuntime

if __name__ == "__main__":  # actors are spawned processes: keep the entry point guarded
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-env-steps", type=int, default=100_000, help="budget (default 100k)")
    parser.add_argument("--log-dir", default="runs/demo")
    args = parser.parse_args()
    config = RunConfig(
        env_id="CartPole-v1",
        trainer="pearl_core.algorithms:DQN",
        trainer_kwargs={"total_env_steps": 50_000},  # ε decays over 16% of 50k steps, as in SB3's zoo
        replay=ReplayConfig("prioritized", capacity=100_000, fanout=16),
        batch_size=64,
        replay_ratio=0.5,
        stop=StopCriteria(eval_return=475.0, eval_every=5_000, eval_episodes=20, max_env_steps=args.max_env_steps),
        learning_starts=min(1_000, args.max_env_steps // 2),
        log_dir=args.log_dir,
    )
    workload = workload_for_env(config.env_id, config.batch_size, trainer=DQN)
    plan = make_plan(detect_hardware(), workload, "throughput")  # a PlacementPlan
    choice = plan.runtime_plan()  # the RuntimePlan the runtime executes
    print(f"composed plan {plan.content_hash()[:12]}: {choice}")

    result = ParallelRuntime(config, choice).run()

    print("\n" + result.summary())
    print(f"learning curve, logs and checkpoint in {result.log_dir}")
