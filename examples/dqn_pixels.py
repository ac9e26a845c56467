"""DQN on an image task through the Composer: MinAtar Breakout by default, or an Atari game by name.

`MinAtar/...` and `ALE/...` ids register themselves (the `pixels` extra: `pip install -e '.[pixels]'`,
which `make test` installs). MinAtar's 10x10 grids go to the small encoder (one 3x3 convolution, 128
hidden units: the MinAtar paper's network); Atari ids get the `"atari"` preset (no-op reset, frame skip 4
with max-pooling, 84x84 grey, 4-frame stack, episodic life and clipped rewards while training) and the
Nature-DQN encoder. Hyper-parameters follow rl-baselines3-zoo's Atari DQN (batch 32, lr 1e-4, one update
per 4 env steps, target copy every 1000 env steps = 250 updates, epsilon 1 -> 0.01 over the first 10%); the budget here
is small (`--steps`): this shows the mechanism, not a trained agent.
Arguments after `--` go to the generated program, e.g. `-- --max-env-steps 2000`.
"""
import argparse
import subprocess
import sys
from pathlib import Path

from pearl_core.algorithms import DQN
from pearl_core.composer import Composer, RuntimeGen, print_plan

if __name__ == "__main__":  # the generated program spawns actors: keep entry points guarded
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="MinAtar/Breakout-v1", help="e.g. MinAtar/Breakout-v1, ALE/Pong-v5")
    parser.add_argument("--steps", type=int, default=50_000, help="env steps budget")
    parser.add_argument("--hidden", default=None, help="fully connected sizes after the encoder (default: its own)")
    parser.add_argument("--log-dir", default="runs/pixels")
    parser.add_argument("--no-profile", action="store_true", help="plan from the analytic models only")
    args, rest = parser.parse_known_args()
    composer = Composer(hardware=None, metric="throughput")  # None: the devices the backends detect here
    composer.set_actors(args.env, n_actors=1)
    kwargs = {} if args.hidden is None else {"hidden_sizes": [int(h) for h in args.hidden.split(",")]}
    composer.set_train_function(DQN, batch_size=32, replay_ratio=0.25, learning_starts=min(5_000, args.steps // 4),
                                lr=1e-4, target_update_every=250, eps_final=0.01, eps_fraction=0.1,
                                total_env_steps=args.steps, **kwargs)
    composer.set_replay("uniform", capacity=100_000)
    composer.set_stop(max_env_steps=args.steps, eval_every=max(1, args.steps // 5), eval_episodes=5)
    composer.set_run(log_dir=args.log_dir)
    plan = composer.run(profile=not args.no_profile)
    print_plan(plan)
    Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    program = RuntimeGen(plan, Path(args.log_dir) / "runtime.py")
    extra = [a for a in rest if a != "--"]
    print(f"wrote {program}; training with: python {program} {' '.join(extra)}", flush=True)
    sys.exit(subprocess.call([sys.executable, str(program), *extra]))
