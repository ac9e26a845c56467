"""One actor's Collector: env steps/s of each vector back end (``RuntimePlan.vector_backend``).

Cases (each a Collector as an actor builds it, stepped with ``explore=True``):

    CartPole-v1, 1 env and 8 envs: loop, gym-sync, gym-async, envpool. The policy is DQN 256-256
        (numpy engine, epsilon fixed at 0.05 so the forward pass runs every step).
    ALE/Pong-v5 with PEARL's "atari" preset, 8 envs: loop, gym-sync. The policy is DQN's Nature CNN
        (torch engine, 1 thread).
    Pong-v5 of EnvPool, 8 envs: EnvPool's own Atari preprocessing (its defaults: episodic life,
        reward clipping, no sticky actions, ...) -- NOT the same environment as PEARL's preset;
        listed for scale only, never compared as an equal.

Rounds are interleaved (A, B, C, ..., A, B, C, ...), each round ``--steps`` vector steps of every
case, all in the same process and run; the table gives each case's median env steps/s over the
rounds, its min-max, and the ratio to the loop back end with the same env and env count. EnvPool
rows are skipped (and say so) where it is not installed.

    .venv/bin/python benchmarks/vector_actors.py                  # ~1-2 min
    .venv/bin/python benchmarks/vector_actors.py --quick          # smoke, a few seconds
    .venv/bin/python benchmarks/vector_actors.py --no-pong --out benchmarks/results/vector_actors.md
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def machine() -> str:
    import gymnasium
    import torch

    from pearl_core.runtime.vector import envpool_available

    ep = "not installed"
    if envpool_available():
        import envpool

        ep = envpool.__version__
    try:
        la = os.getloadavg()
        load = f"load average {la[0]:.2f}, {la[1]:.2f}, {la[2]:.2f}"
    except OSError:
        load = "load average n/a"
    return (f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, torch "
            f"{torch.__version__}, gymnasium {gymnasium.__version__}, envpool {ep}; {load}")


def build(env_id: str, n: int, backend: str, *, envpool_id: str | None = None, seed: int = 0) -> Any:
    """A Collector and its DQN policy for one case."""
    import torch

    from pearl_core.algorithms import DQN
    from pearl_core.runtime.acting import Collector
    from pearl_core.runtime.vector import EnvPoolEnvs, make_vector_envs

    seeds = [seed + i for i in range(n)]
    if envpool_id is not None:  # EnvPool's own id and preprocessing (not PEARL's env)
        vec = EnvPoolEnvs(envpool_id, seeds)
    else:
        vec = make_vector_envs(backend, env_id, seeds, {"kwargs": None, "wrappers": None})
    pixels = len(vec.observation_space.shape) == 3
    torch.set_num_threads(1)
    kw = dict(engine="torch") if pixels else dict(hidden_sizes=(256, 256), engine="numpy")
    policy = DQN(vec.observation_space, vec.action_space, eps_start=0.05, eps_final=0.05, seed=seed, **kw)
    return Collector(vec, seeds, env_id=env_id), policy


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--steps", type=int, default=1000, help="vector steps per case per round (CartPole)")
    p.add_argument("--pong-steps", type=int, default=100, help="vector steps per case per round (Pong)")
    p.add_argument("--no-pong", action="store_true", help="CartPole only")
    p.add_argument("--quick", action="store_true", help="smoke: 2 rounds of 20 (Pong 4) vector steps")
    p.add_argument("--out", type=Path, help="also write the table here")
    a = p.parse_args(argv)
    if a.quick:
        a.rounds, a.steps, a.pong_steps = 2, 20, 4

    from pearl_core.runtime.vector import envpool_available, envpool_has

    have_ep = envpool_available()
    cases: list[tuple[str, str, int, str, str | None]] = []  # (label, env, n, backend, envpool id)
    notes = []
    for n in (1, 8):
        for b in ("loop", "gym-sync", "gym-async", "envpool"):
            if b == "envpool" and not have_ep:
                continue
            cases.append((f"CartPole-v1 x{n}", "CartPole-v1", n, b, None))
    if not have_ep:
        notes.append("EnvPool is not installed: its rows are left out (pip install envpool).")
    if not a.no_pong:
        for b in ("loop", "gym-sync"):
            cases.append(("ALE/Pong-v5 'atari' preset x8", "ALE/Pong-v5", 8, b, None))
        if have_ep and envpool_has("Pong-v5"):
            cases.append(("EnvPool Pong-v5 x8 (NOT the same env)", "Pong-v5", 8, "envpool", "Pong-v5"))
    built = []
    for label, env_id, n, b, ep_id in cases:
        col, pol = build(env_id, n, b, envpool_id=ep_id)
        k = a.pong_steps if "Pong" in env_id else a.steps
        for _ in range(3):  # warm-up: first resets, first forward passes
            col.step(pol)
        built.append((label, n, b, col, pol, k))
    rates: list[list[float]] = [[] for _ in built]
    try:
        for _ in range(a.rounds):
            for j, (_, n, _, col, pol, k) in enumerate(built):
                t = time.perf_counter()
                for _ in range(k):
                    col.step(pol)
                rates[j].append(k * n / (time.perf_counter() - t))
    finally:
        for _, _, _, col, _, _ in built:
            col.close()
    base = {label: statistics.median(r) for (label, _, b, *_), r in zip(built, rates) if b == "loop"}
    lines = [f"machine: {machine()}",
             f"rounds: {a.rounds} interleaved; vector steps per case per round: CartPole {a.steps}, Pong "
             f"{a.pong_steps}; DQN explore=True, epsilon 0.05 (CartPole: 256-256 MLP, numpy engine; Pong: "
             "Nature CNN, torch engine, 1 thread)", *notes, "",
             "| case | back end | median env steps/s | min-max | vs loop |",
             "|---|---|---:|---:|---:|"]
    for (label, _, b, *_), r in zip(built, rates):
        med = statistics.median(r)
        ref = base.get(label)
        ratio = f"{med / ref:.2f}x" if ref and "NOT" not in label else "-"
        lines.append(f"| {label} | {b} | {med:,.0f} | {min(r):,.0f}-{max(r):,.0f} | {ratio} |")
    text = "\n".join(lines)
    print(text)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
