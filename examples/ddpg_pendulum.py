"""DDPG on Pendulum-v1 through the Composer: compose for this machine, write the program, train it.

DDPG's defaults follow rl-baselines3-zoo's Pendulum-v1 settings (Adam 1e-3, gamma 0.98, tau 0.005, action
noise 0.1; 256-256 networks where the zoo's are 400-300); one update per env step, batch 256.
Stops when the mean return of the last 20 episodes reaches -200, or at --max-env-steps (default 20k).
Needs only the light install (`make demo`'s: Pendulum-v1 is one of gymnasium's classic-control tasks).
"""
import argparse
import subprocess
import sys
from pathlib import Path

from pearl_core.composer import Composer, RuntimeGen, print_plan
from pearl_core.runtime.rundir import fresh_log_dir


def main(trainer: str, log_dir: str, description: str) -> int:
    """Compose ``trainer`` ("DDPG" or "TD3") on Pendulum-v1, write the program, train it; its exit status."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--max-env-steps", type=int, default=20_000, help="budget in env steps (default 20k)")
    parser.add_argument("--hidden", default="256,256", help="hidden sizes of the actor and the critics")
    parser.add_argument("--log-dir", default=log_dir)
    parser.add_argument("--no-profile", action="store_true", help="plan from the analytic models only (quicker)")
    parser.add_argument("--quiet", action="store_true", help="no progress display while training")
    args = parser.parse_args()
    hidden = [int(h) for h in args.hidden.split(",")]
    composer = Composer(hardware=None, metric="throughput")  # None: the devices the backends detect here
    composer.set_actors("Pendulum-v1", n_actors=1)
    composer.set_train_function(trainer, batch_size=256, replay_ratio=1.0, learning_starts=1_000,
                                actor_hidden=hidden, critic_hidden=hidden)
    composer.set_replay("uniform", capacity=100_000)
    composer.set_stop(mean_return=-200.0, window=20, max_env_steps=args.max_env_steps)
    log_dir = fresh_log_dir(args.log_dir)  # <log-dir>-2, -3, ... when it holds an earlier run
    composer.set_run(log_dir=log_dir)
    plan = composer.run(profile=not args.no_profile)
    print_plan(plan)
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    program = RuntimeGen(plan, Path(log_dir) / "runtime.py")
    print(f"wrote {program}; training with: python {program}", flush=True)
    return subprocess.call([sys.executable, str(program), *(["--quiet"] if args.quiet else [])])


if __name__ == "__main__":  # the generated program spawns actors: keep entry points guarded
    sys.exit(main("DDPG", "runs/ddpg_pendulum", __doc__.splitlines()[0]))
