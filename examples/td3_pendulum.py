"""TD3 on Pendulum-v1 through the Composer: compose for this machine, write the program, train it.

TD3's defaults follow rl-baselines3-zoo's Pendulum-v1 settings (Adam 1e-3, gamma 0.98, tau 0.005, action
noise 0.1, target smoothing 0.2, policy delay 2; 256-256 networks); one update per env step, batch 256.
Stops when the mean return of the last 20 episodes reaches -200, or at --max-env-steps (default 20k).
Needs only the light install (`make demo`'s: Pendulum-v1 is one of gymnasium's classic-control tasks).
"""
import sys

from ddpg_pendulum import main  # the same program with TD3 (this directory is on sys.path when run)

if __name__ == "__main__":  # the generated program spawns actors: keep entry points guarded
    sys.exit(main("TD3", "runs/td3_pendulum", __doc__.splitlines()[0]))
