"""One DQN learner step on the CPU: PEARL's engines vs stable-baselines3 and SBX, same network and batch.

A step is what bounds PEARL's CartPole runs on a small machine (``e2e_dqn.py``): draw a
batch of 64 from a 30k-transition uniform replay, compute targets with the target
network, take one Adam step on the Huber loss of a 4-256-256-2 MLP (SB3's tuned
CartPole-v1 settings). Contestants, timed in interleaved rounds so the machine's
drift hits all alike:

    pearl-native   DQN(engine="native", learner_kernels=kernel_lookup("cpu")): the CPU plugin's
                   C++ step (pearl_cpu._learner), handed over as the runtime hands it
    pearl-numpy    DQN(engine="numpy"): the same math in numpy (pearl_core.algorithms.mlp_engine)
    pearl-torch    DQN(engine="torch"): autograd and torch's Adam
    sb3            stable_baselines3.DQN.train(gradient_steps=N): its replay sample and update, N
                   steps a call (its per-call cost spread as in its own runs)
    sbx            sbx.DQN.train(gradient_steps=N, batch_size=64) (sbx-rl: SB3 in JAX, on JAX's
                   CPU backend): one sample of N * 64 from SB3's ReplayBuffer, then N updates in one
                   jitted ``lax.scan``, one call a block as for sb3

Every contestant samples from its own replay (PEARL: ``UniformReplay``; SB3 and SBX:
SB3's ``ReplayBuffer``), so a step is ``sample + update`` for all. Torch and BLAS run on
``--threads`` threads (default 1, as PEARL's learner runs in the e2e benchmark).

SBX: its scan is compiled for one length, so before the rounds it runs one untimed
block of ``--steps`` steps (its jit compile), besides the ``--warmup`` steps every
contestant gets. SBX's DQN has no ``max_grad_norm``; to match SB3's default clip
(10, which the sb3 contestant runs with) SBX gets it through its policy's
``optimizer_class``: ``optax.chain(clip_by_global_norm(10), adam)``. XLA's CPU thread
pool is JAX's default (sized to the machine; ``--threads`` cannot set it), so on a
machine with more than one core SBX may use more threads than the others.

    .venv/bin/python benchmarks/learner_step.py                 # 7 rounds x 500 steps
    .venv/bin/python benchmarks/learner_step.py --quick         # smoke (tests/benchmarks/test_learner_step.py)
    .venv/bin/python benchmarks/learner_step.py --algo sac      # SAC instead (also: --algo td3)

``--algo td3`` / ``--algo sac``: one TD3 or SAC step (uniform sample of 256 + one update of
256-256 actor and critics, SB3's defaults for both; the spaces of ``--env``, Pendulum-v1 by
default, or HalfCheetah-v5). Contestants: ``pearl-native`` (``engine="native"``, the CPU plugin's
``td3_mlp`` / ``sac_mlp`` kernel), ``pearl-torch`` (``engine="torch"``), ``pearl-kernel`` (the
native kernel's call alone on one fixed batch: no sampling, no Python around it) and SB3's and
SBX's ``TD3`` / ``SAC`` ``.train(gradient_steps=N, batch_size=256)``. There is no numpy engine for
these (``pearl-numpy`` is skipped with a line saying so).

Prints a markdown table: median microseconds per step over the rounds, their spread,
steps/s, and each contestant's speed relative to SB3 (when SB3 is installed) and to
SBX (a "vs sbx" column, when SBX ran). A missing library skips its contestant with
a line saying so (``pip install -e '.[rl,bench]'``).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

BATCH = 64
FILL = 30_000
HIDDEN = (256, 256)
LR = 2.3e-3
CONTESTANTS = ("pearl-native", "pearl-numpy", "pearl-torch", "pearl-kernel", "sb3", "sbx")
AC_BATCH = 256  # SB3's TD3 and SAC default
AC_ENVS = ("Pendulum-v1", "HalfCheetah-v5")


def _random_transitions(n: int, seed: int):
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-0.5, 0.5, (n, 4)).astype(np.float32)
    return (obs, rng.integers(0, 2, n), np.ones(n, np.float32), obs + rng.normal(0, 0.05, (n, 4)).astype(np.float32),
            rng.random(n) < 0.05)


def _ac_spaces(env_id: str):
    import gymnasium as gym

    env = gym.make(env_id)
    spaces = env.observation_space, env.action_space
    env.close()
    return spaces


def _random_ac_transitions(n: int, seed: int, obs_space, act_space):
    rng = np.random.default_rng(seed)
    od = int(np.prod(obs_space.shape))
    obs = rng.uniform(-1.0, 1.0, (n, od)).astype(np.float32).reshape(n, *obs_space.shape)
    act = rng.uniform(act_space.low, act_space.high, (n, *act_space.shape)).astype(np.float32)
    nxt = obs + rng.normal(0, 0.05, obs.shape).astype(np.float32)
    return obs, act, rng.standard_normal(n).astype(np.float32), nxt, rng.random(n) < 0.005


def pearl_ac_step(algo: str, engine: str, env_id: str, seed: int):
    """A ``steps(n)`` closure: ``n`` times uniform sample + ``TD3/SAC.update_policy``; or, for
    ``engine="kernel"``, ``n`` calls of the native kernel alone on one fixed batch. ``None`` and why
    if the engine is missing."""
    import torch

    from pearl_core.algorithms import SAC, TD3
    from pearl_core.errors import SpecError
    from pearl_core.plugins import kernel_lookup
    from pearl_core.replay import DataStorage, StorageSpec, UniformReplay

    if engine == "numpy":
        return None, f"{algo.upper()} has no numpy engine (engines: auto, native, torch)"
    obs_space, act_space = _ac_spaces(env_id)
    cls = TD3 if algo == "td3" else SAC
    torch.manual_seed(seed)
    try:
        trainer = cls(obs_space, act_space, actor_hidden=HIDDEN, critic_hidden=HIDDEN,
                      engine="native" if engine == "kernel" else engine, seed=seed,
                      learner_kernels=kernel_lookup("cpu"))
    except SpecError as exc:
        return None, str(exc)
    replay = UniformReplay(DataStorage(StorageSpec.from_spaces(obs_space, act_space), 100_000), rng=seed)
    replay.add(*_random_ac_transitions(FILL, seed, obs_space, act_space))
    if engine == "kernel":
        from pearl_core.algorithms.ac_engine import native_inputs
        from pearl_core.kernels import ACStepArgs, AdamHyper, SACStepArgs

        s = replay.sample(AC_BATCH)
        obs, act, rew, nxt, done, w, _ = native_inputs(trainer, s.batch, s.weights)
        kern = trainer._engine.kernel(AC_BATCH)
        trainer._engine._blas()
        disc = trainer._engine.discount(AC_BATCH)
        a = int(np.prod(act_space.shape))
        eps = np.random.default_rng(seed).standard_normal((AC_BATCH, a)).astype(np.float32)
        noise = np.clip(0.2 * eps, -0.5, 0.5).astype(np.float32)
        hc, ha = AdamHyper.from_optimizer(trainer.critic_optimizer), AdamHyper.from_optimizer(trainer.actor_optimizer)
        if algo == "td3":
            # the actor (and the targets) every second update, as TD3's default
            records = [ACStepArgs(obs, act, rew, nxt, done, w, disc, noise, due, 0.0, 0.005, hc, ha)
                       for due in (False, True)]

            def call(i: int) -> None:
                kern.step(records[i % 2])
        else:
            record = SACStepArgs(obs, act, rew, nxt, done, w, disc, eps, eps, 0.0, 0.005, -float(a), hc, ha,
                                 AdamHyper.from_optimizer(trainer.alpha_optimizer))

            def call(i: int) -> None:
                kern.step(record)

        def steps(n: int) -> None:
            for i in range(n):
                call(i)

        return steps, "kernel"

    def steps(n: int) -> None:
        for _ in range(n):
            s = replay.sample(AC_BATCH)
            trainer.update_policy(s.batch, s.weights)

    return steps, trainer.engine


def peer_ac_step(lib: str, algo: str, env_id: str, seed: int):
    """A ``steps(n)`` closure: SB3's or SBX's ``TD3/SAC.train(gradient_steps=n, batch_size=256)`` over a
    filled replay buffer; ``None`` and why if the library cannot be imported."""
    import os

    import gymnasium as gym

    try:
        if lib == "sbx":
            os.environ.setdefault("JAX_PLATFORMS", "cpu")
            import sbx as peer
        else:
            import stable_baselines3 as peer
    except Exception as exc:  # noqa: BLE001 - missing or broken: skip, never crash
        name = "sbx-rl" if lib == "sbx" else "stable-baselines3"
        return None, f"{name} is not importable ({type(exc).__name__}: {exc}); pip install -e '.[rl,bench]'"
    cls = getattr(peer, algo.upper())
    env = gym.make(env_id)
    model = cls("MlpPolicy", env, batch_size=AC_BATCH, buffer_size=100_000, learning_starts=0, train_freq=1,
                gradient_steps=1, policy_kwargs={"net_arch": list(HIDDEN)}, seed=seed, device="cpu")
    obs, act, rew, nxt, done = _random_ac_transitions(FILL, seed, env.observation_space, env.action_space)
    for i in range(FILL):
        model.replay_buffer.add(obs[i:i + 1], nxt[i:i + 1], act[i:i + 1], rew[i:i + 1], done[i:i + 1], [{}])
    model._logger = _quiet_logger()

    def steps(n: int) -> None:
        model.train(gradient_steps=n, batch_size=AC_BATCH)

    return steps, lib


def pearl_step(engine: str, seed: int):
    """A ``steps(n)`` closure: ``n`` times uniform sample + ``DQN.update_policy``; ``None`` if the
    engine is missing."""
    import gymnasium as gym
    import torch

    from pearl_core.algorithms import DQN
    from pearl_core.errors import SpecError
    from pearl_core.plugins import kernel_lookup
    from pearl_core.replay import DataStorage, StorageSpec, UniformReplay

    env = gym.make("CartPole-v1")
    torch.manual_seed(seed)
    try:
        trainer = DQN(env.observation_space, env.action_space, hidden_sizes=HIDDEN, lr=LR, engine=engine, seed=seed,
                      learner_kernels=kernel_lookup("cpu"))
    except SpecError as exc:
        return None, str(exc)
    replay = UniformReplay(DataStorage(StorageSpec.from_spaces(env.observation_space, env.action_space), 100_000),
                           rng=seed)
    env.close()
    replay.add(*_random_transitions(FILL, seed))

    def steps(n: int) -> None:
        for _ in range(n):
            s = replay.sample(BATCH)
            trainer.update_policy(s.batch, s.weights)

    return steps, trainer.engine


def sb3_step(seed: int):
    """A ``steps(n)`` closure: SB3's ``DQN.train(gradient_steps=n)`` over a filled replay buffer."""
    try:
        from stable_baselines3 import DQN
    except ImportError as exc:
        return None, f"stable-baselines3 is not installed ({exc}); pip install -e '.[bench]'"
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    model = DQN("MlpPolicy", env, learning_rate=LR, batch_size=BATCH, buffer_size=100_000, learning_starts=0,
                gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
                policy_kwargs={"net_arch": list(HIDDEN)}, seed=seed, device="cpu")
    _fill_sb3_buffer(model.replay_buffer, seed)
    model._logger = _quiet_logger()

    def steps(n: int) -> None:  # one call for the block, as SB3 trains (128 gradient steps a call)
        model.train(gradient_steps=n, batch_size=BATCH)

    return steps, "sb3"


def sbx_step(seed: int):
    """A ``steps(n)`` closure: SBX's ``DQN.train(gradient_steps=n, batch_size=64)`` over a filled
    replay buffer (SB3's, as SBX uses it); ``None`` and why if sbx-rl cannot be imported."""
    import os

    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # SBX on the CPU, unless the environment says otherwise
    try:
        import optax
        from sbx import DQN
    except Exception as exc:  # noqa: BLE001 - missing or broken (a jax/jaxlib mismatch...): skip, never crash
        return None, f"sbx-rl is not importable ({type(exc).__name__}: {exc}); pip install -e '.[rl,bench]'"
    import gymnasium as gym

    def clipped_adam(learning_rate, **kwargs):  # SB3's max_grad_norm=10, which sbx.DQN lacks
        return optax.chain(optax.clip_by_global_norm(10.0), optax.adam(learning_rate, **kwargs))

    model = DQN("MlpPolicy", gym.make("CartPole-v1"), learning_rate=LR, batch_size=BATCH, buffer_size=100_000,
                learning_starts=0, gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
                policy_kwargs={"net_arch": list(HIDDEN), "optimizer_class": clipped_adam}, seed=seed,
                device="cpu")
    _fill_sb3_buffer(model.replay_buffer, seed)
    model._logger = _quiet_logger()

    def steps(n: int) -> None:  # one call for the block; train() ends in .item(), so JAX has finished
        model.train(gradient_steps=n, batch_size=BATCH)

    return steps, "sbx"


def _fill_sb3_buffer(buf, seed: int) -> None:
    """The same ``FILL`` transitions as PEARL's replays, into an SB3 ``ReplayBuffer``."""
    obs, act, rew, nxt, done = _random_transitions(FILL, seed)
    for i in range(FILL):
        buf.add(obs[i:i + 1], nxt[i:i + 1], act[i:i + 1], rew[i:i + 1], done[i:i + 1], [{}])


def _quiet_logger():
    from stable_baselines3.common.logger import Logger

    return Logger(folder=None, output_formats=[])


def _sbx_versions() -> str:
    sbx = sys.modules.get("sbx")  # only if a contestant imported it
    if sbx is None:
        return ""
    import jax

    return f", sbx-rl {sbx.__version__}, jax {jax.__version__} ({jax.default_backend()}, XLA's default threads)"


def table(times: dict[str, list[float]]) -> list[str]:
    """The markdown rows: median us/step, spread, steps/s and speed vs sb3; and vs sbx, a column
    shown only when ``times`` has an ``sbx`` entry."""
    bases = ["sb3"] + (["sbx"] if "sbx" in times else [])
    med = {name: statistics.median(ts) for name, ts in times.items() if ts}
    lines = ["| contestant | median us/step | min-max us | steps/s | " + " | ".join(f"vs {b}" for b in bases) + " |",
             "|---|---|---|---|" + "---|" * len(bases)]
    for name, ts in times.items():
        if name not in med:
            continue
        cells = [speedup(med[name], med.get(b)) if name != b else "-" for b in bases]
        lines.append(f"| {name} | {med[name]:.0f} | {min(ts):.0f}-{max(ts):.0f} | {1e6 / med[name]:.0f} | "
                     + " | ".join(cells) + " |")
    return lines


def speedup(us: float, base_us: float | None) -> str:
    """``base / us`` as "N.NNx faster" (below 1: slower); "-" without a baseline."""
    return "-" if base_us is None else f"{base_us / us:.2f}x faster"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds (default 7)")
    p.add_argument("--steps", type=int, default=500, help="steps per contestant per round (default 500)")
    p.add_argument("--warmup", type=int, default=100, help="untimed steps per contestant first (default 100)")
    p.add_argument("--threads", type=int, default=1, help="torch and BLAS threads (default 1)")
    p.add_argument("--contestants", default="all",
                   help=f"comma list of {','.join(CONTESTANTS)} (default all)")
    p.add_argument("--algo", choices=("dqn", "td3", "sac"), default="dqn",
                   help="the learner step timed (default dqn; td3 and sac: batch 256, 256-256 networks)")
    p.add_argument("--env", choices=AC_ENVS, default="Pendulum-v1",
                   help="spaces of the TD3/SAC networks (default Pendulum-v1)")
    p.add_argument("--quick", action="store_true", help="2 rounds x 20 steps, PEARL only (a smoke run)")
    p.add_argument("--out", type=Path, default=None, help="also write the markdown report here")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.steps, args.warmup = 2, 20, 5
        if args.contestants == "all":
            args.contestants = ("pearl-native,pearl-numpy,pearl-torch" if args.algo == "dqn"
                                else "pearl-native,pearl-torch,pearl-kernel")
    everyone = [c for c in CONTESTANTS if c != ("pearl-kernel" if args.algo == "dqn" else "pearl-numpy")]
    names = everyone if args.contestants == "all" else [
        c.strip() for c in args.contestants.split(",") if c.strip()]
    unknown = sorted(set(names) - set(CONTESTANTS))
    if unknown:
        p.error(f"unknown contestants {unknown}; expected {', '.join(CONTESTANTS)}")
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0 or args.threads < 1:
        p.error("--rounds, --steps and --threads must be >= 1 and --warmup >= 0")

    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(args.threads)
    threadpool_limits(limits=args.threads, user_api="blas")

    blocks, skipped = {}, {}
    for name in names:
        print(f"[learner_step] building {name} ...", file=sys.stderr)
        if args.algo == "dqn":
            fn, info = (sb3_step(0) if name == "sb3" else sbx_step(0) if name == "sbx"
                        else (None, "a TD3/SAC contestant (--algo td3 or sac)") if name == "pearl-kernel"
                        else pearl_step(name.split("-", 1)[1], 0))
        else:
            fn, info = (peer_ac_step(name, args.algo, args.env, 0) if name in ("sb3", "sbx")
                        else pearl_ac_step(args.algo, name.split("-", 1)[1], args.env, 0))
        if fn is None:
            skipped[name] = info
            continue
        if name == "sbx":
            fn(args.steps)  # jit-compiles SBX's train scan for the timed block length
        if args.warmup:
            fn(args.warmup)
        blocks[name] = fn
    times: dict[str, list[float]] = {n: [] for n in blocks}
    for r in range(args.rounds):
        for name, fn in blocks.items():
            t0 = time.perf_counter()
            fn(args.steps)
            times[name].append((time.perf_counter() - t0) / args.steps * 1e6)
        print(f"[learner_step] round {r + 1}/{args.rounds} done", file=sys.stderr)

    lines = [
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, Python "
        f"{platform.python_version()}, torch {torch.__version__}{_sbx_versions()}, {args.threads} thread(s)",
        "",
        (f"DQN step (uniform sample of {BATCH} + one update), MLP 4-{HIDDEN[0]}-{HIDDEN[1]}-2; "
         if args.algo == "dqn" else
         f"{args.algo.upper()} step (uniform sample of {AC_BATCH} + one update; pearl-kernel: the native call "
         f"alone), actor and critics {HIDDEN[0]}-{HIDDEN[1]}, {args.env} spaces; ")
        + f"{args.rounds} interleaved rounds x {args.steps} steps",
        "",
        *table(times),
    ]
    for name, why in skipped.items():
        lines.append(f"\nskipped {name}: {why}")
    report = "\n".join(lines)
    print(report)
    if args.out is not None:
        args.out.write_text(report + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
