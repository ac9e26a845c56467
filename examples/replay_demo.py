"""PEARL demo (for now): the backends PEARL found, and prioritized replay on the best one.

Collects CartPole-v1 transitions with a random policy, stores them in a Data
Storage, and drives a prioritized replay manager whose sum tree lives on the
CPU backend. Training arrives with the runtime; until then the priorities are a
stand-in (the sampled states' |pole angle|) so you can watch the sampler follow
them. Run: `make demo` (or `python examples/replay_demo.py`).
"""

import time

import gymnasium as gym
import numpy as np

import pearl_core
from pearl_core.replay import DataStorage, PrioritizedReplay, StorageSpec, UniformReplay

print("PEARL", pearl_core.__version__, "- backends found:")
for row in pearl_core.list_backends():
    state = "available" if row.available else f"unavailable ({row.reason})"
    print(f"  {row.name:6s} {row.distribution or '?'} {row.version or '?'}: {state}")

env = gym.make("CartPole-v1")
spec = StorageSpec.from_spaces(env.observation_space, env.action_space)
capacity, n_steps, batch = 2**16, 20_000, 256
storage = DataStorage(spec, capacity)

rng = np.random.default_rng(0)
obs, _ = env.reset(seed=0)
rows = {k: [] for k in ("obs", "action", "reward", "next_obs", "done")}
t0 = time.perf_counter()
for _ in range(n_steps):
    action = int(rng.integers(2))
    next_obs, reward, terminated, truncated, _ = env.step(action)
    for k, v in zip(rows, (obs, action, reward, next_obs, terminated)):
        rows[k].append(v)
    obs = env.reset()[0] if (terminated or truncated) else next_obs
print(f"\ncollected {n_steps} CartPole-v1 transitions in {time.perf_counter() - t0:.2f} s")

backend = pearl_core.get_backend("cpu")
replay = PrioritizedReplay(storage, tree=backend.make_sum_tree(capacity, fanout=16), alpha=0.6, beta=0.4)
replay.add(*(np.asarray(v) for v in rows.values()))
print(f"prioritized replay on backend '{backend.name}': {replay.size} items, fanout {replay.tree.fanout}")

iters, t0 = 200, time.perf_counter()
for _ in range(iters):
    sampled = replay.sample(batch)
    stand_in_td = np.abs(sampled.batch.obs[:, 2])  # |pole angle| as a stand-in TD error
    replay.update_priorities(sampled.indices, stand_in_td)
dt = time.perf_counter() - t0
print(f"{iters} sample+update rounds of batch {batch}: {iters * batch / dt / 1e3:.0f}k items/s "
      "(incl. gathering the batch)")

uniform = UniformReplay(storage, rng=1)
per_angle = np.mean([np.abs(replay.sample(batch).batch.obs[:, 2]).mean() for _ in range(50)])
uni_angle = np.mean([np.abs(uniform.sample(batch).batch.obs[:, 2]).mean() for _ in range(50)])
print(f"mean |pole angle| of sampled states: prioritized {per_angle:.4f} vs uniform {uni_angle:.4f}")
print("(prioritized replay favours the large-'error' states, as it should)")
