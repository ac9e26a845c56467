"""The learner iteration on one device: sample -> gather -> update -> priority write-back, timed.

Each workload runs the runtime's own ``LearnerStep`` over the core's ``PrioritizedReplay`` on the
device's storage and sum tree (on a GPU: ``CudaStorage`` + ``CudaSumTree`` from the CUDA backend,
the device path when the trainer declares ``device_batches``), filled to ``--capacity`` leaves:

* ``dqn_mlp256_b64_per``: DQN, MLP 256-256, CartPole-sized rows (4 floats, 2 actions), batch 64;
* ``sac_mlp256_b256_per``: SAC, MLP 256-256, HalfCheetah-sized rows (17 floats, 6 actions), batch 256;
* ``dqn_nature_cnn_b32_per``: DQN, Nature-DQN CNN on 4x84x84 uint8 frames, 6 actions, batch 32.

Each workload runs twice: over the CUDA backend's storage and tree, eagerly, and over the core's torch
storage and tree on the same device with the iteration captured as one CUDA graph
(``pearl_core.runtime.graphstep``; the backend's do not declare ``graph_safe`` yet); the JSON's headline
per workload is the graphed one where a capture succeeded (``iteration_variant`` says which).

Per workload: the median iteration time (CUDA events around each iteration on a GPU, the wall clock
on the CPU), and the host synchronisations per iteration that torch reports in its sync debug mode
(``torch.cuda.set_sync_debug_mode("warn")``: every torch call that waits for the GPU; cupy's own waits
are not seen, and the device path makes none). Then a short serial DQN CartPole run with learner,
tree and storage on the device: env steps/s.

    python plugins/pearl_cuda/scripts/iteration_bench.py --json benchmarks/results/h200/iteration.json \\
        --out benchmarks/results/cuda_gpu_check.md
    python plugins/pearl_cuda/scripts/iteration_bench.py --dry-run     # the CPU, tiny sizes: checks the script

``--dry-run`` runs everything on the CPU at small sizes (torch-tensor replay from the core:
``TorchStorage`` + ``TorchSumTree``), so the script is tested without a GPU; its figures say nothing
about a GPU. Exit code 3: no usable GPU (and no ``--dry-run``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

NO_GPU_EXIT = 3
WORKLOADS = ("dqn_mlp256_b64_per", "sac_mlp256_b256_per", "dqn_nature_cnn_b32_per")


def _workload(name: str, device: str, dry: bool) -> tuple[Any, Any, Any, int]:
    """``(trainer, observation space, action space, batch size)`` of one workload."""
    import gymnasium.spaces as spaces
    import torch

    from pearl_core.algorithms import DQN, SAC

    torch.manual_seed(0)
    if name == "dqn_mlp256_b64_per":
        obs, act = spaces.Box(-5.0, 5.0, (4,), np.float32), spaces.Discrete(2)
        return DQN(obs, act, hidden_sizes=(256, 256), device=device, engine="torch", seed=0), obs, act, 64
    if name == "sac_mlp256_b256_per":
        obs, act = spaces.Box(-10.0, 10.0, (17,), np.float32), spaces.Box(-1.0, 1.0, (6,), np.float32)
        return SAC(obs, act, actor_hidden=(256, 256), critic_hidden=(256, 256), device=device, engine="torch",
                   seed=0), obs, act, 256
    side = 36 if dry else 84  # the smallest image the Nature-DQN stack takes, in a dry run
    obs, act = spaces.Box(0, 255, (4, side, side), np.uint8), spaces.Discrete(6)
    return DQN(obs, act, device=device, engine="torch", seed=0), obs, act, 32


def _replay(spec, capacity: int, device: str, dry: bool, kind: str = "backend"):
    """The PER replay: the CUDA backend's storage and tree (``kind="backend"``), or the core's torch ones on
    ``device`` (``"torch"``, and every dry run), whose device faces a CUDA graph may capture."""
    from pearl_core.replay import PrioritizedReplay

    if dry or kind == "torch":
        from pearl_core.replay.device import TorchStorage, TorchSumTree

        storage, tree = TorchStorage(spec, capacity, device=device), TorchSumTree(capacity, 16, device=device)
    else:
        import pearl_core

        backend = pearl_core.get_backend("cuda")
        storage, tree = backend.make_storage(spec, capacity, device), backend.make_sum_tree(capacity, 16, device=device)
    return PrioritizedReplay(storage, tree, rng=0)


def _fill(replay, obs_space, action_space, capacity: int) -> None:
    """Fill every leaf: one random chunk of rows, added again and again (the contents do not matter)."""
    rng = np.random.default_rng(0)
    spec = replay.storage.spec
    row = sum(int(np.prod(s, dtype=np.int64)) * np.dtype(d).itemsize for s, d in spec.fields().values())
    chunk = int(max(1, min(capacity, 2**16, (256 * 2**20) // max(row, 1))))

    def values(space, n):
        if hasattr(space, "n"):
            return rng.integers(0, space.n, n)
        if np.issubdtype(space.dtype, np.integer):
            return rng.integers(0, 256, (n, *space.shape), dtype=np.uint8)
        return rng.uniform(-1, 1, (n, *space.shape)).astype(space.dtype)

    rows = (values(obs_space, chunk), values(action_space, chunk), rng.normal(size=chunk).astype(np.float32),
            values(obs_space, chunk), rng.random(chunk) < 0.01)
    while replay.size < capacity:
        n = min(chunk, capacity - replay.size)
        replay.add(*(r[:n] for r in rows))


def _time_iterations(step, iters: int, warmup: int, on_gpu: bool) -> list[float]:
    import torch

    for _ in range(warmup):
        step.step()
    if on_gpu:
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        for a, b in events:
            a.record()
            step.step()
            b.record()
        torch.cuda.synchronize()
        return [a.elapsed_time(b) * 1e3 for a, b in events]
    out = []
    for _ in range(iters):
        t = time.perf_counter()
        step.step()
        out.append((time.perf_counter() - t) * 1e6)
    return out


def _host_syncs(step, iters: int) -> float | None:
    """Host synchronisations per iteration that torch's sync debug mode reports (GPU only)."""
    import torch

    if not torch.cuda.is_available() or step.replay.device is None or step.replay.device.type != "cuda":
        return None
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(iters):
                step.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message).lower() for w in seen) / iters


#: The variants timed per workload: (replay kind, CUDA graph mode). ``"forced"``: the CUDA backend's storage
#: and tree taken as ``graph_safe`` for this run (they do not declare it until a GPU run shows their capture
#: works: their device faces launch on torch's stream, the storage's gather forks and joins its own).
VARIANTS = (("backend", "off"), ("torch", "auto"), ("backend", "forced"))


def run_workload(name: str, device: str, capacity: int, iters: int, warmup: int, dry: bool,
                 kind: str = "backend", graph: str = "off") -> dict[str, Any]:
    from pearl_core.replay import StorageSpec
    from pearl_core.runtime.step import LearnerStep

    trainer, obs_space, action_space, batch = _workload(name, device, dry)
    replay = _replay(StorageSpec.from_spaces(obs_space, action_space), capacity, device, dry, kind)
    t = time.perf_counter()
    _fill(replay, obs_space, action_space, capacity)
    fill_s = time.perf_counter() - t
    # the device flags are read every check_every updates: kept outside the timed window's per-iteration cost
    step = LearnerStep(trainer, replay, batch, check_every=10 * (iters + warmup) + 1)
    parts = (type(replay.storage), type(replay.tree))
    saved = [p.__dict__.get("graph_safe") for p in parts]
    if graph == "forced":
        for p in parts:
            p.graph_safe = True
    try:
        step.use_graph("off" if graph == "off" else "auto")  # captured after the warm-up's first updates
        times = _time_iterations(step, iters, warmup, device.startswith("cuda"))
    finally:
        for p, v in zip(parts, saved):
            if v is not None:
                p.graph_safe = v
            elif "graph_safe" in p.__dict__:
                delattr(p, "graph_safe")
    syncs = _host_syncs(step, min(iters, 50))
    step.checked_weights()  # reads the device flags back once: a NaN in the window fails the workload
    return {"workload": name, "iteration_us": statistics.median(times), "p90_us": float(np.percentile(times, 90)),
            "host_syncs_per_iteration": syncs, "on_device_path": step.on_device, "batch": batch,
            "replay": kind + (" (graph_safe forced)" if graph == "forced" else ""), "graph": step.graph is not None,
            "iteration_mode": step.graph_note,
            "capacity": capacity, "fill_s": fill_s, "iterations": iters}


def run_e2e(device: str, max_env_steps: int, dry: bool) -> dict[str, Any]:
    """A short serial DQN CartPole run with learner, tree and storage on ``device``."""
    from pearl_core.runtime import ReplayConfig, RunConfig, RuntimePlan, SerialRuntime, StopCriteria

    backend = "cpu" if dry else "cuda"
    with tempfile.TemporaryDirectory(prefix="pearl-iteration-e2e-") as log_dir:
        config = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN",
                           trainer_kwargs={"total_env_steps": 50_000, "device": device, "engine": "torch"},
                           replay=ReplayConfig("prioritized", capacity=100_000, fanout=16), batch_size=64,
                           replay_ratio=0.5,
                           stop=StopCriteria(eval_return=475.0, eval_every=5_000, eval_episodes=10,
                                             max_env_steps=max_env_steps),
                           learning_starts=min(1_000, max_env_steps // 2), log_dir=log_dir)
        plan = RuntimePlan(rm_backend=backend, learner_device=device,
                           **({} if dry else {"rm_device": device, "storage_device": device}))
        result = SerialRuntime(config, plan, progress=False, tensorboard=False, plot=False).run()
    return {"env_steps_per_s": result.env_steps_per_s, "env_steps": result.env_steps, "updates": result.updates,
            "solved": result.solved, "solved_at_env_steps": result.solved_at_env_steps, "wall_s": result.wall_time_s}


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0", help="torch device of the whole iteration (default cuda:0)")
    ap.add_argument("--capacity", type=int, default=2**20, help="leaves of the tree / rows of the storage")
    ap.add_argument("--cnn-capacity", type=int, default=2**18,
                    help="rows for the CNN workload (2 x 28 KiB a row: 2^20 rows would need 59 GB)")
    ap.add_argument("--iters", type=int, default=200, help="timed iterations per workload")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--e2e-env-steps", type=int, default=30_000, help="budget of the serial CartPole run (0: none)")
    ap.add_argument("--workloads", nargs="*", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--json", help="write the figures here (e.g. benchmarks/results/h200/iteration.json)")
    ap.add_argument("--out", help="markdown file to append the table to")
    ap.add_argument("--dry-run", action="store_true", help="the CPU at tiny sizes: checks the script, no GPU figures")
    a = ap.parse_args(argv)
    import torch

    if a.dry_run:
        a.device, a.capacity, a.cnn_capacity = "cpu", min(a.capacity, 4096), min(a.cnn_capacity, 512)
        a.iters, a.warmup, a.e2e_env_steps = min(a.iters, 5), min(a.warmup, 2), min(a.e2e_env_steps, 600)
    elif not torch.cuda.is_available():
        print(f"no usable GPU: torch {torch.__version__} has no CUDA device; use --dry-run to check the script")
        return NO_GPU_EXIT
    gpu = torch.cuda.get_device_name(0) if a.device.startswith("cuda") else f"none (CPU: {platform.processor()})"
    rows, best = [], {}
    for name in a.workloads:
        cap = a.cnn_capacity if "cnn" in name else a.capacity
        for kind, graph in VARIANTS:
            r = run_workload(name, a.device, cap, a.iters, a.warmup, a.dry_run, kind, graph)
            rows.append(r)
            print(f"{name} [{kind} replay, {r['iteration_mode']}]: {r['iteration_us']:.1f} us per iteration "
                  f"(device path: {r['on_device_path']})", flush=True)
            # the headline: the graphed variant where one was captured, else the CUDA backend's eager one
            if name not in best or (r["graph"] and not best[name]["graph"]):
                best[name] = r
    e2e = run_e2e(a.device, a.e2e_env_steps, a.dry_run) if a.e2e_env_steps else None
    report = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": _commit(),
              "gpu": gpu, "dry_run": a.dry_run, "device": a.device, "torch": torch.__version__,
              "iteration_us": {n: r["iteration_us"] for n, r in best.items()},
              "host_syncs_per_iteration": {n: r["host_syncs_per_iteration"] for n, r in best.items()},
              "iteration_variant": {n: f"{r['replay']} replay, {r['iteration_mode']}" for n, r in best.items()},
              "workloads": rows,
              "e2e_serial_dqn_cartpole_env_steps_per_s": None if e2e is None else e2e["env_steps_per_s"],
              "e2e": e2e}
    where = "DRY RUN on the CPU: checks the script only" if a.dry_run else gpu
    lines = [f"\n## Learner iteration on {a.device} ({where})"
             f", {report['date']}, commit {report['commit']}\n",
             "| workload | batch | leaves | replay | iteration | iteration us (median) | p90 us | host syncs / it. |",
             "|---|---:|---:|---|---|---:|---:|---:|"]
    for r in rows:
        syncs = "n/a" if r["host_syncs_per_iteration"] is None else f"{r['host_syncs_per_iteration']:.2f}"
        lines.append(f"| {r['workload']} | {r['batch']} | {r['capacity']} | {r['replay']} | {r['iteration_mode']} | "
                     f"{r['iteration_us']:.1f} | {r['p90_us']:.1f} | {syncs} |")
    if e2e is not None:
        lines.append(f"\nSerial DQN CartPole-v1, learner + tree + storage on {a.device}: "
                     f"{e2e['env_steps_per_s']:.0f} env steps/s ({e2e['env_steps']} env steps, {e2e['updates']} "
                     f"updates, {e2e['wall_s']:.1f} s; solved: {e2e['solved']}"
                     + (f" at {e2e['solved_at_env_steps']}" if e2e["solved"] else "") + ")")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "a", encoding="utf-8") as f:
            f.write(text + "\n")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
