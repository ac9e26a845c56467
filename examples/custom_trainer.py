"""Your own trainer: a small Q-learner written against the Trainer contract, composed and trained by PEARL.

`QLearner` is what a user writes: torch layers held as attributes (the composer reads their shapes),
`input_shape` and `action_kind`, and the four methods `get_action`, `update_policy` (one TD error per
sample: they become the samples' priorities), `get_weights` and `set_weights`. `check_trainer` proves it
against the environment before anything runs (the composer runs the same check). The class lives in this
script: the generated program loads the script as the module `pearl_user_script` (its `__main__` block
does not run there), so keep composing and training under `if __name__ == "__main__":`.
Stops when the last 20 episodes average 195 on CartPole-v1, or at --max-env-steps (default 30k).
"""
import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

from pearl_core.trainer import Trainer, UpdateResult


class QLearner(Trainer):
    """DQN in a few lines: an MLP Q-network, a target network, ε-greedy acting, a Huber TD loss."""

    action_kind = "discrete"
    acting_net = "q"  # the network Policy.predict / Policy.export act with (its argmax)

    def __init__(self, observation_space, action_space, *, hidden: int = 64, lr: float = 1e-3, gamma: float = 0.99,
                 epsilon_steps: int = 10_000, target_every: int = 500, seed: int | None = None):
        self.input_shape = tuple(observation_space.shape)
        self.n_actions = int(action_space.n)
        n_in = int(np.prod(self.input_shape))
        self.q = nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, self.n_actions))
        self.q_target = nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, self.n_actions))
        self.q_target.load_state_dict(self.q.state_dict())
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=lr)
        self.gamma, self.epsilon_steps, self.target_every = gamma, epsilon_steps, target_every
        self.rng = np.random.default_rng(seed)
        self.updates = 0

    def get_action(self, obs, explore):
        with torch.no_grad():
            greedy = self.q(torch.as_tensor(obs, dtype=torch.float32)).argmax(1).numpy()
        if not explore:
            return greedy.astype(np.int64)
        epsilon = max(0.05, 1.0 - self.env_steps / self.epsilon_steps)  # PEARL keeps env_steps up to date
        random = self.rng.integers(0, self.n_actions, len(obs))
        return np.where(self.rng.random(len(obs)) < epsilon, random, greedy).astype(np.int64)

    def update_policy(self, batch, weights):
        obs = torch.as_tensor(batch.obs, dtype=torch.float32)
        next_obs = torch.as_tensor(batch.next_obs, dtype=torch.float32)
        action = torch.as_tensor(batch.action, dtype=torch.int64)
        reward = torch.as_tensor(batch.reward, dtype=torch.float32)
        done = torch.as_tensor(batch.done, dtype=torch.bool)
        with torch.no_grad():
            target = reward + self.gamma * (~done).float() * self.q_target(next_obs).max(1).values
        td = self.q(obs).gather(1, action[:, None]).squeeze(1) - target
        loss = (torch.as_tensor(weights, dtype=torch.float32) * nn.functional.huber_loss(
            td, torch.zeros_like(td), reduction="none")).mean()  # importance weights: one per sample
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.updates += 1
        if self.updates % self.target_every == 0:
            self.q_target.load_state_dict(self.q.state_dict())
        return UpdateResult(td_errors=td.detach().abs().numpy(), metrics={"loss": float(loss.detach())})

    def get_weights(self):  # what the actors need: the acting network
        return {k: v.detach().numpy().copy() for k, v in self.q.state_dict().items()}

    def set_weights(self, weights):
        self.q.load_state_dict({k: torch.as_tensor(v) for k, v in weights.items()})


if __name__ == "__main__":  # the generated program spawns actors and loads this file: keep entry points guarded
    import gymnasium as gym

    import pearl_core
    from pearl_core.composer import Composer, RuntimeGen, print_plan
    from pearl_core.composer.runtimegen import load_script_module
    from pearl_core.runtime.rundir import fresh_log_dir
    from pearl_core.trainer_check import check_trainer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-env-steps", type=int, default=30_000, help="budget in env steps (default 30k)")
    parser.add_argument("--log-dir", default="runs/custom_trainer")
    parser.add_argument("--no-profile", action="store_true", help="plan from the analytic models only (quicker)")
    parser.add_argument("--quiet", action="store_true", help="no progress display while training")
    args = parser.parse_args()

    env = gym.make("CartPole-v1")
    check_trainer(QLearner, env.observation_space, env.action_space, seed=0)  # raises TrainerError with a fix
    print("QLearner keeps the trainer contract")

    composer = Composer(hardware=None, metric="throughput")
    composer.set_actors("CartPole-v1", n_actors=1)
    composer.set_train_function(QLearner, batch_size=64, replay_ratio=0.5, learning_starts=1_000, seed=0)
    composer.set_replay("prioritized", capacity=50_000, fanout=16)
    composer.set_stop(mean_return=195.0, window=20, max_env_steps=args.max_env_steps)
    log_dir = fresh_log_dir(args.log_dir)  # <log-dir>-2, -3, ... when it holds an earlier run
    composer.set_run(log_dir=log_dir)
    plan = composer.run(profile=not args.no_profile)
    print_plan(plan)
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    program = RuntimeGen(plan, Path(log_dir) / "runtime.py")  # names the trainer pearl_user_script:QLearner
    print(f"wrote {program}; training with: python {program}", flush=True)
    code = subprocess.call([sys.executable, str(program), *(["--quiet"] if args.quiet else [])])
    if code:
        sys.exit(code)

    load_script_module(__file__)  # the checkpoint names pearl_user_script:QLearner: make that module importable
    policy = pearl_core.load_policy(log_dir)
    mean, std = pearl_core.evaluate_policy(policy, n_episodes=5, seed=0)
    print(f"greedy return of the trained QLearner over 5 episodes: {mean:.1f} ± {std:.1f}")
