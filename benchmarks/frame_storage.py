"""Memory per transition of stacked Atari frames: PEARL's FrameStorage against the plain Data Storage.

Real frames: ``--envs`` environments of each game (the ``"atari"`` preset: 84x84 grey, 4-frame stack,
episodic life) step with uniformly random actions, in turn, and their transitions go into both storages
in DCQ-sized batches (``--batch``), as actors' rows reach the replay; the ring is filled and wrapped
(``--steps`` > ``--capacity``). Reported per game: frames the frame storage holds per stored transition
(acceptance: <= 1.1), its host bytes per transition (pool, tables and the other fields) against the
plain storage's, and a check that every stored transition reads back equal in both.

    .venv/bin/python benchmarks/frame_storage.py                       # Pong and Breakout, ~1-2 min
    .venv/bin/python benchmarks/frame_storage.py --games ALE/Pong-v5 --steps 3000 --capacity 2000
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from pearl_core.envs import make_env
from pearl_core.replay.frames import FrameStorage
from pearl_core.replay.storage import DataStorage, StorageSpec


def measure(game: str, n_envs: int, steps: int, capacity: int, batch: int, seed: int) -> dict:
    envs = [make_env(game, seed + i) for i in range(n_envs)]
    spec = StorageSpec.from_spaces(envs[0].observation_space, envs[0].action_space)
    frames, plain = FrameStorage(spec, capacity), DataStorage(spec, capacity)
    rng = np.random.default_rng(seed)
    obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    rows: list[tuple] = []
    episodes = 0
    t0 = time.perf_counter()
    for t in range(steps):
        e = t % n_envs
        env = envs[e]
        a = int(rng.integers(env.action_space.n))
        nxt, r, term, trunc, _ = env.step(a)
        rows.append((obs[e], a, r, nxt, term))
        if term or trunc:
            episodes += 1
            obs[e] = env.reset()[0]
        else:
            obs[e] = nxt
        if len(rows) == batch or t == steps - 1:
            cols = (np.stack([x[0] for x in rows]), np.array([x[1] for x in rows]),
                    np.array([x[2] for x in rows], np.float32), np.stack([x[3] for x in rows]),
                    np.array([x[4] for x in rows]))
            frames.add(*cols)
            plain.add(*cols)
            rows.clear()
    elapsed = time.perf_counter() - t0
    idx = np.arange(frames.size)
    same = all(np.array_equal(getattr(frames.gather(idx[i:i + 512]), f), getattr(plain.gather(idx[i:i + 512]), f))
               for i in range(0, frames.size, 512) for f in ("obs", "next_obs", "action", "reward", "done"))
    plain_bytes = sum(plain.field(f).nbytes for f in ("obs", "action", "reward", "next_obs", "done"))
    frame_bytes = frames.frames_in_use * int(np.prod(spec.obs_shape[1:])) * spec.obs_dtype.itemsize
    used = frame_bytes + frames.nbytes - frames.pool_frames * int(np.prod(spec.obs_shape[1:]))
    for env in envs:
        env.close()
    return {"game": game, "transitions": frames.size, "episodes": episodes,
            "frames_per_transition": frames.frames_per_transition,
            "frame_storage_B": used / frames.size, "plain_B": plain_bytes / capacity, "same": same,
            "steps_per_s": steps / elapsed}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--games", default="ALE/Pong-v5,ALE/Breakout-v5")
    p.add_argument("--envs", type=int, default=4, help="environments stepped in turn (interleaved rows)")
    p.add_argument("--steps", type=int, default=12_000)
    p.add_argument("--capacity", type=int, default=8_000)
    p.add_argument("--batch", type=int, default=32, help="rows per add (an actor's DCQ batch)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}; "
          f"{args.envs} envs interleaved, {args.steps} steps into capacity {args.capacity}, adds of {args.batch}")
    print("| game | transitions stored | episodes | frames per transition | bytes per transition, frames | "
          "bytes per transition, plain | ratio | read back equal |")
    print("|---|---:|---:|---:|---:|---:|---:|:-:|")
    ok = True
    for game in args.games.split(","):
        m = measure(game, args.envs, args.steps, args.capacity, args.batch, args.seed)
        ok &= m["same"] and m["frames_per_transition"] <= 1.1
        print(f"| {m['game']} | {m['transitions']:,} | {m['episodes']} | {m['frames_per_transition']:.3f} | "
              f"{m['frame_storage_B']:,.0f} | {m['plain_B']:,.0f} | {m['frame_storage_B'] / m['plain_B']:.3f} | "
              f"{'yes' if m['same'] else 'NO'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
