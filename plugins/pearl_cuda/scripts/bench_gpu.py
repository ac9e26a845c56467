#!/usr/bin/env python
"""GPU benchmarks of pearl-cuda, written as markdown sections (run by gpu_check.sh).

Sections (``python bench_gpu.py SECTION --out FILE``; ``FILE`` is appended to):

``replay``   sum tree at capacity 2^20, fanout 16, batches 32..4096: sample,
             update (every launch strategy) and insert (get + update) with
             device arrays in and out, and the CPU backend (numpy) on the same
             inputs. Two GPU figures per cell: *pipelined* = wall time of
             ``calls`` back-to-back calls / calls, one sync at the end (what a
             resident loop pays); *synced* = median of single calls each
             followed by a device sync (latency incl. the sync). Targets:
             sample and update of 4096 < 50 us (H100/H200), GPU beats CPU for
             batch >= 1024.
``learner``  MLP 4-256-256-2 (+ frozen target net), batch 64..4096: the paper's
             stream search and a CUDA graph (synthetic step), the runtime's DQN
             ``update_policy`` on the GPU (numpy batch in, TD errors out) and on
             the CPU, and one setting-2 iteration on one GPU (device-resident
             replay: sample, train, priorities back).
``e2e``      DQN on CartPole-v1 with the serial runtime, learner and sum tree on
             the GPU, a short budget.

Without a GPU every section says so and exits 3, except that ``replay``
still measures the CPU backend (so the script's own logic runs anywhere).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

CAPACITY = 2**20
FANOUT = 16
BATCHES = (32, 256, 1024, 4096)
LEARNER_BATCHES = (64, 256, 1024, 4096)
TARGET_S = 50e-6
NO_GPU_EXIT = 3


def gpu_problem() -> str | None:
    from pearl_cuda.detect import probe

    return probe()


def emit(out: str | None, text: str) -> None:
    print(text, flush=True)
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")


def us(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e6:,.1f}"


# ------------------------------------------------------------------------------------------ timing
def time_pipelined(fn, sync, calls: int, reps: int) -> float:
    """Median over ``reps`` of (wall time of ``calls`` calls + one sync) / calls."""
    out = []
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        out.append((time.perf_counter() - t) / calls)
    return statistics.median(out)


def time_synced(fn, sync, calls: int) -> float:
    """Median seconds of ``fn(); sync()`` over ``calls`` calls (the profiler's own timer, no warm-up)."""
    from pearl_cuda.profile import time_calls

    return time_calls(fn, sync, calls, warmup=0)


def cycle(pool):
    state = {"i": -1}

    def nxt():
        state["i"] = (state["i"] + 1) % len(pool)
        return pool[state["i"]]

    return nxt


# ------------------------------------------------------------------------------------------ replay
def replay_inputs(total: float, bs: int, rng: np.random.Generator, pools: int = 8):
    masses = [rng.uniform(0, total, bs) for _ in range(pools)]
    upd = [(rng.integers(0, CAPACITY, bs), rng.uniform(0.1, 10, bs)) for _ in range(pools)]
    return masses, upd


def bench_cpu(prio: np.ndarray, calls: int, reps: int) -> dict[tuple[str, int], float]:
    from pearl_core.plugins import get_backend

    tree = get_backend("cpu").make_sum_tree(CAPACITY, FANOUT)
    tree.update(np.arange(CAPACITY), prio)
    res = {}
    for bs in BATCHES:
        masses, upd = replay_inputs(tree.total(), bs, np.random.default_rng(bs))
        m, u = cycle(masses), cycle(upd)

        def insert():
            i, p = u()
            tree.get(i)
            tree.update(i, p)

        for op, fn in (("sample", lambda: tree.sample(m())), ("update", lambda: tree.update(*u())),
                       ("insert", insert)):
            fn()
            res[(op, bs)] = time_pipelined(fn, lambda: None, calls, reps)
    return res


def bench_gpu_tree(prio: np.ndarray, calls: int, reps: int):
    import cupy as cp

    from pearl_cuda.sumtree import CudaSumTree

    tree = CudaSumTree(CAPACITY, FANOUT)
    tree.load(prio)
    sync = cp.cuda.get_current_stream().synchronize
    pipelined, synced, host = {}, {}, {}
    strategies = ["levels", "block"] + (["grid"] if tree._k.update_grid is not None else [])
    for bs in BATCHES:
        masses, upd = replay_inputs(tree.total(), bs, np.random.default_rng(bs))
        dm = cycle([cp.asarray(x) for x in masses])
        du = cycle([(cp.asarray(i), cp.asarray(p)) for i, p in upd])
        hm, hu = cycle(masses), cycle(upd)

        def insert():
            i, p = du()
            tree.get_device(i)
            tree.update_device(i, p)

        ops = {"sample": lambda: tree.sample_device(dm()), "update (auto)": lambda: tree.update_device(*du()),
               "insert": insert}
        for st in strategies:
            ops[f"update ({st})"] = lambda st=st: tree.update_device(*du(), strategy=st)
        for op, fn in ops.items():
            for _ in range(20):
                fn()
            pipelined[(op, bs)] = time_pipelined(fn, sync, calls, reps)
            synced[(op, bs)] = time_synced(fn, sync, calls)
        for op, fn in (("sample", lambda: tree.sample(hm())), ("update", lambda: tree.update(*hu()))):
            fn()
            host[(op, bs)] = time_pipelined(fn, sync, max(20, calls // 4), reps)
    tree.check_errors()
    return pipelined, synced, host, strategies, tree._k.grid_problem


def section_replay(out: str | None, calls: int, reps: int) -> int:
    rng = np.random.default_rng(0)
    prio = rng.uniform(0.1, 10.0, CAPACITY)
    emit(out, f"\n## Replay ops: capacity 2^20, fanout {FANOUT} (us per call; lower is better)\n")
    problem = gpu_problem()
    try:
        cpu = bench_cpu(prio, calls, reps)
        cpu_note = f"CPU backend: pearl-cpu native tree, all {os.cpu_count()} cores, numpy in/out"
    except Exception as exc:  # noqa: BLE001 - report and continue with the GPU
        cpu, cpu_note = {}, f"CPU backend not measured ({type(exc).__name__}: {exc})"
    emit(out, f"- {cpu_note}; {calls} calls x {reps} reps, median")
    if problem is not None:
        emit(out, f"- **GPU not measured**: {problem}\n")
        emit(out, "| op | batch | CPU |\n|---|---:|---:|")
        for (op, bs), v in sorted(cpu.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            emit(out, f"| {op} | {bs} | {us(v)} |")
        return NO_GPU_EXIT
    pipelined, synced, host, strategies, grid_problem = bench_gpu_tree(prio, calls, reps)
    if grid_problem:
        emit(out, f"- cooperative 'grid' update unavailable: {grid_problem}")
    emit(out, "- GPU: device arrays in and out (cupy); *pipelined* = back-to-back calls, one sync; "
              "*synced* = each call followed by a device sync; *host API* = numpy in/out incl. copies\n")
    emit(out, "| op | batch | GPU pipelined | GPU synced | GPU host API | CPU | CPU / GPU pipelined |")
    emit(out, "|---|---:|---:|---:|---:|---:|---:|")
    ops = ["sample", "update (auto)"] + [f"update ({s})" for s in strategies] + ["insert"]
    for op in ops:
        for bs in BATCHES:
            base = op.split(" ")[0]
            c = cpu.get((base, bs)) if op in ("sample", "update (auto)", "insert") else None
            g = pipelined[(op, bs)]
            h = host.get((base, bs)) if op in ("sample", "update (auto)") else None
            ratio = f"{c / g:.1f}x" if c else "-"
            emit(out, f"| {op} | {bs} | {us(g)} | {us(synced[(op, bs)])} | {us(h)} | {us(c)} | {ratio} |")
    s4, u4 = pipelined[("sample", 4096)], min(pipelined[(f"update ({s})", 4096)] for s in ["auto"] + strategies)
    emit(out, f"\n**Target, batch 4096 < 50 us** (pipelined): sample {us(s4)} us -> "
              f"{'MET' if s4 < TARGET_S else 'NOT MET'}; update (best strategy) {us(u4)} us -> "
              f"{'MET' if u4 < TARGET_S else 'NOT MET'}. Synced: sample {us(synced[('sample', 4096)])} us, "
              f"update (auto) {us(synced[('update (auto)', 4096)])} us.")
    if cpu:
        beats = all(pipelined[(op if op != "update" else "update (auto)", bs)] < cpu[(op, bs)]
                    for op in ("sample", "update", "insert") for bs in BATCHES if bs >= 1024)
        emit(out, f"**Target, GPU beats CPU for batch >= 1024** (sample, update, insert; pipelined): "
                  f"{'MET' if beats else 'NOT MET'}.")
    emit(out, "\n```json\n" + json.dumps({"pipelined": {f"{k[0]}|{k[1]}": v for k, v in pipelined.items()},
                                          "synced": {f"{k[0]}|{k[1]}": v for k, v in synced.items()},
                                          "cpu": {f"{k[0]}|{k[1]}": v for k, v in cpu.items()}}) + "\n```")
    return 0


# ------------------------------------------------------------------------------------------ learner
def _cartpole_spaces():
    from gymnasium import spaces

    return spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(2)


def _numpy_batch(bs: int, rng: np.random.Generator):
    from pearl_core.replay.storage import Batch

    obs = rng.standard_normal((bs, 4)).astype(np.float32)
    return Batch(obs, rng.integers(0, 2, bs), rng.standard_normal(bs).astype(np.float32), np.roll(obs, 1, 0),
                 rng.random(bs) < 0.01), rng.uniform(0.2, 1, bs).astype(np.float32)


def _dqn(device: str):
    """The built-in DQN on ``device``, with that device's native learner kernels (as the runtime builds it)."""
    from pearl_core.algorithms.dqn import DQN
    from pearl_core.plugins import kernel_lookup

    return DQN(*_cartpole_spaces(), hidden_sizes=(256, 256), device=device, learner_kernels=kernel_lookup(device))


def section_learner(out: str | None, iters: int) -> int:
    emit(out, "\n## Learner step: MLP 4-256-256-2 (DQN shape), ms per step (lower is better)\n")
    problem = gpu_problem()
    import torch

    if problem is not None or not torch.cuda.is_available():
        why = problem or f"torch {torch.__version__} has no CUDA (torch.cuda.is_available() is False)"
        emit(out, f"- **not measured**: {why}")
        return NO_GPU_EXIT
    import pearl_core
    from pearl_core.replay import PrioritizedReplay, StorageSpec
    from pearl_core.runtime.step import LearnerStep
    from pearl_cuda.learner import SyntheticLearner, search_streams

    emit(out, f"- torch {torch.__version__} (CUDA {torch.version.cuda}) on {torch.cuda.get_device_name(0)}; "
              f"{iters} timed steps, median")
    emit(out, "- *streams S* = synthetic step with the batch split over S CUDA streams (paper's search); "
              "*graph* = the S=1 step as a CUDA graph; *DQN GPU/CPU* = the runtime's DQN.update_policy "
              "(numpy batch in, TD errors out); *setting 2* = one LearnerStep over the core's PrioritizedReplay on "
              "CudaStorage + CudaSumTree: device-face sample + DQN step on the device batch + priority write-back\n")
    emit(out, "| batch | streams: ms (best S) | graph | DQN GPU | DQN CPU | setting 2 (GPU) |")
    emit(out, "|---:|---|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    backend = pearl_core.get_backend("cuda")
    spec = StorageSpec((4,), np.float32, (), np.int64)
    rep = PrioritizedReplay(backend.make_storage(spec, 100_000, "cuda:0"), backend.make_sum_tree(100_000, 16), rng=0)
    n = 100_000
    obs = rng.standard_normal((n, 4)).astype(np.float32)
    rep.add(obs, rng.integers(0, 2, n), rng.standard_normal(n).astype(np.float32), obs, rng.random(n) < 0.01)
    sync = torch.cuda.synchronize
    paths: list[bool] = []
    for bs in LEARNER_BATCHES:
        t = search_streams(SyntheticLearner((4, 256, 256, 2), (4, 256, 256, 2), bs), iterations=iters, warmup=10)
        streams = ", ".join(f"S={s}: {v * 1e3:.3f}" for s, v in t.per_streams.items())
        gpu_dqn, cpu_dqn = _dqn("cuda:0"), _dqn("cpu")
        batches = [_numpy_batch(bs, rng) for _ in range(4)]
        nb = cycle(batches)
        g = _time(lambda: gpu_dqn.update_policy(*nb()), sync, iters)
        c = _time(lambda: cpu_dqn.update_policy(*nb()), lambda: None, max(5, iters // 5))
        co = LearnerStep(_dqn("cuda:0"), rep, bs)
        s2 = _time(co.step, sync, iters)
        paths.append(co.on_device)
        emit(out, f"| {bs} | {streams} (S={t.best_streams}{', graph' if t.use_graph else ''}) | "
                  f"{'-' if t.graph_s is None else f'{t.graph_s * 1e3:.3f}'} | {g * 1e3:.3f} | {c * 1e3:.3f} | "
                  f"{s2 * 1e3:.3f} |")
    rep.tree.check_errors()
    rep.check_device_errors()
    emit(out, "\nSetting 2 ran on the device path (LearnerStep.on_device) at every batch size." if all(paths) else
              f"\nSetting 2 fell back to the host path at {paths.count(False)} of {len(paths)} batch sizes "
              "(LearnerStep.on_device is False: the trainer or the replay lacks its device face).")
    return 0


def _time(fn, sync, iters: int) -> float:
    for _ in range(5):
        fn()
    sync()
    return time_synced(fn, sync, iters)


# ------------------------------------------------------------------------------------------ e2e
def section_e2e(out: str | None, max_env_steps: int, smoke_cpu: bool = False) -> int:
    """``smoke_cpu``: the same run with learner and tree on the CPU (checks this script where no GPU is)."""
    where = "the CPU (smoke test of this script, not a GPU result)" if smoke_cpu else "the GPU"
    emit(out, f"\n## End to end: DQN on CartPole-v1, learner and sum tree on {where} (budget {max_env_steps} env "
              "steps, serial runtime)\n")
    problem = None if smoke_cpu else gpu_problem()
    import torch

    if not smoke_cpu and (problem is not None or not torch.cuda.is_available()):
        emit(out, f"- **not run**: {problem or 'torch has no CUDA'}")
        return NO_GPU_EXIT
    device, backend = ("cpu", "cpu") if smoke_cpu else ("cuda:0", "cuda")
    from pearl_core.runtime import ReplayConfig, RunConfig, RuntimePlan, SerialRuntime, StopCriteria

    log_dir = tempfile.mkdtemp(prefix="pearl-cuda-e2e-")
    config = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN",
                       trainer_kwargs={"total_env_steps": 50_000, "device": device},
                       replay=ReplayConfig("prioritized", capacity=100_000, fanout=16), batch_size=64,
                       replay_ratio=0.5,
                       stop=StopCriteria(eval_return=475.0, eval_every=5_000, eval_episodes=10,
                                         max_env_steps=max_env_steps),
                       learning_starts=min(1_000, max_env_steps // 2), log_dir=log_dir)
    plan = RuntimePlan(rm_backend=backend, learner_device=device)
    result = SerialRuntime(config, plan, progress=False, tensorboard=False, plot=False).run()
    evals = ", ".join(f"{s}: {r:.0f}" for s, r, _ in result.eval_history)
    emit(out, f"- stopped by {result.stop_reason}; solved: {result.solved}"
              + (f" at {result.solved_at_env_steps} env steps, {result.solved_at_wall_s:.1f} s"
                 if result.solved else ""))
    emit(out, f"- {result.env_steps} env steps, {result.updates} updates in {result.wall_time_s:.1f} s: "
              f"{result.env_steps_per_s:.0f} env steps/s, {result.updates_per_s:.0f} updates/s; "
              f"learner time {result.learner_time_s:.1f} s")
    emit(out, f"- greedy evaluations (env steps: mean return): {evals or 'none'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("section", choices=["replay", "learner", "e2e", "header"])
    ap.add_argument("--out", help="markdown file to append to")
    ap.add_argument("--calls", type=int, default=200, help="replay: calls per repetition")
    ap.add_argument("--reps", type=int, default=5, help="replay: repetitions")
    ap.add_argument("--iters", type=int, default=50, help="learner: timed steps")
    ap.add_argument("--max-env-steps", type=int, default=30_000, help="e2e: budget")
    ap.add_argument("--smoke-cpu", action="store_true", help="e2e: run on the CPU (checks the script, no GPU)")
    a = ap.parse_args(argv)
    if a.section == "header":
        problem = gpu_problem()
        gpus = "none"
        if problem is None:
            from pearl_cuda.detect import list_gpus

            gpus = "; ".join(f"{d.name} {d.description}" for d in list_gpus())
        emit(a.out, f"# pearl-cuda GPU check\n\n- date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M UTC}\n"
                    f"- host: {platform.node()}, {platform.processor() or platform.machine()}, "
                    f"{os.cpu_count()} cores, Python {platform.python_version()}\n- GPUs: {gpus}"
                    + (f"\n- CUDA unusable: {problem}" if problem else ""))
        return 0
    return {"replay": lambda: section_replay(a.out, a.calls, a.reps),
            "learner": lambda: section_learner(a.out, a.iters),
            "e2e": lambda: section_e2e(a.out, a.max_env_steps, a.smoke_cpu)}[a.section]()


if __name__ == "__main__":
    sys.exit(main())
