"""The paper's Listing 1: compose DQN on CartPole-v1, show the plan, generate the program, train it.

Settings mirror stable-baselines3's tuned CartPole-v1 DQN (MLP 256-256, batch 64, lr 2.3e-3, 0.5 updates
per env step, epsilon over 50k steps). Solved: 20 greedy episodes every 5k steps average >= 475; budget
100k steps. Run `make demo`; arguments (e.g. --max-env-steps 2000) go to the generated program.
"""
import subprocess
import sys
from pathlib import Path

from pearl_core.algorithms import DQN
from pearl_core.composer import Composer, RuntimeGen, print_plan

if __name__ == "__main__":  # the generated program spawns actors: keep entry points guarded
    composer = Composer(hardware=None, metric="throughput")  # None: the devices the backends detect here
    composer.set_actors("CartPole-v1", n_actors=1)
    composer.set_train_function(DQN, batch_size=64, replay_ratio=0.5, learning_starts=1_000,
                                hidden_sizes=[256, 256], lr=2.3e-3, total_env_steps=50_000)
    composer.set_replay("prioritized", capacity=100_000, fanout=16)
    composer.set_stop(eval_return=475.0, eval_every=5_000, eval_episodes=20, max_env_steps=100_000)
    composer.set_run(log_dir="runs/demo")
    plan = composer.run()
    print_plan(plan)
    Path("runs/demo").mkdir(parents=True, exist_ok=True)
    program = RuntimeGen(plan, "runs/demo/runtime.py")
    print(f"wrote {program}; training with: python {program} {' '.join(sys.argv[1:])}", flush=True)
    sys.exit(subprocess.call([sys.executable, str(program), *sys.argv[1:]]))
