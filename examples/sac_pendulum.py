"""SAC on Pendulum-v1 through the Composer: compose for this machine, write the program, train it.

SAC's defaults are rl-baselines3-zoo's Pendulum-v1 values (256-256 networks, lr 1e-3, automatic
entropy tuning); the run uses the zoo's batch 256 and one update per env step (the parallel runtime
keeps that ratio continuously). Stops when the mean return of the last 20 episodes reaches -200
(budget 20k env steps). Pass `--trainer TD3` for TD3 with its zoo values.
Arguments after `--` go to the generated program, e.g. `-- --max-env-steps 2000`.
"""
import argparse
import subprocess
import sys
from pathlib import Path

from pearl_core.composer import Composer, RuntimeGen, print_plan

if __name__ == "__main__":  # the generated program spawns actors: keep entry points guarded
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainer", choices=("SAC", "TD3"), default="SAC")
    parser.add_argument("--hidden", default="256,256", help="hidden sizes of the actor and the critics")
    parser.add_argument("--log-dir", default="runs/pendulum")
    parser.add_argument("--no-profile", action="store_true", help="plan from the analytic models only "
                        "(no calibration runs; quicker, less exact)")
    args, rest = parser.parse_known_args()
    composer = Composer(hardware=None, metric="throughput")  # None: the devices the backends detect here
    composer.set_actors("Pendulum-v1", n_actors=1)
    hidden = [int(h) for h in args.hidden.split(",")]
    composer.set_train_function(f"pearl_core.algorithms:{args.trainer}", batch_size=256, replay_ratio=1.0,
                                learning_starts=1_000, actor_hidden=hidden, critic_hidden=hidden)
    composer.set_replay("uniform", capacity=100_000)
    composer.set_stop(mean_return=-200.0, window=20, max_env_steps=20_000)
    composer.set_run(log_dir=args.log_dir)
    plan = composer.run(profile=not args.no_profile)
    print_plan(plan)
    Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    program = RuntimeGen(plan, Path(args.log_dir) / "runtime.py")
    extra = [a for a in rest if a != "--"]
    print(f"wrote {program}; training with: python {program} {' '.join(extra)}", flush=True)
    sys.exit(subprocess.call([sys.executable, str(program), *extra]))
