"""Predicted vs measured GPU learner step: checks the analytic GPU learner model on a real GPU.

    python plugins/pearl_cuda/scripts/gpu_learner_model.py [--updates 200] [--warmup 30] [--out FILE]

For the detected GPU it builds a :class:`~pearl_core.composer.DeviceSpec` (memory and name from
torch; peak fp32 FLOP/s and memory bandwidth from the table below for known models, else the
analytic model's defaults, said so in the table), predicts one learner step with
:func:`pearl_cuda.model.gpu_learner` (eager, and with ``cuda_graphs`` on) and measures
the built-in DQN's ``update_policy`` on ``cuda:0`` (eager, as the runtime trains: median over
``--updates`` updates after ``--warmup``), for batch 32/128/512 and MLP 64-64 and 256-256. It also
counts the CUDA kernels of one step with ``torch.profiler`` (the model's ``K``) and times the CUDA
plugin's graph-captured synthetic step where it can (``pearl_cuda.learner.SyntheticLearner``).

Writes a Markdown table to ``plugins/pearl_cuda/results/gpu_learner_model.md`` (and appends it to
``--out`` when given). Without a usable NVIDIA GPU it prints why and exits with status 3
(``gpu_check.sh`` records that as NO-GPU).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

NO_GPU_EXIT = 3
BATCHES = (32, 128, 512)
HIDDEN = ((64, 64), (256, 256))
RESULT = Path(__file__).resolve().parents[1] / "results" / "gpu_learner_model.md"

#: name substring -> (fp32 non-tensor peak FLOP/s, memory bandwidth B/s), from NVIDIA's datasheets.
KNOWN_GPUS = (
    ("H200", 67e12, 4.8e12),
    ("H100 PCIe", 51e12, 2.0e12),
    ("H100 NVL", 60e12, 3.9e12),
    ("H100", 67e12, 3.35e12),  # SXM5
    ("A100-SXM4-80GB", 19.5e12, 2.039e12),
    ("A100", 19.5e12, 1.555e12),
    ("L40S", 91.6e12, 0.864e12),
    ("A10", 31.2e12, 0.6e12),
)


def gpu_problem() -> str | None:
    try:
        import torch
    except ImportError as exc:
        return f"torch is not installed ({exc})"
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False: no NVIDIA GPU (or no CUDA build of torch) here"
    return None


def describe_gpu():
    """A DeviceSpec of cuda:0 and the notes on where its numbers came from."""
    import torch

    from pearl_core.composer import DeviceSpec

    props = torch.cuda.get_device_properties(0)
    peak = bw = None
    source = "analytic defaults (unknown model)"
    for key, p, b in KNOWN_GPUS:
        if key.lower() in props.name.lower():
            peak, bw, source = p, b, f"datasheet values for {key}"
            break
    dev = DeviceSpec("gpu0", "cuda", int(props.total_memory), 50.0, 350.0, description=props.name,
                     peak_flops=peak, mem_bandwidth_Bps=bw)
    return dev, f"{props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB; " \
                f"peak/bandwidth: {source}"


def with_graphs(dev, on: bool):
    import dataclasses

    return dataclasses.replace(dev, options={**dev.options, "cuda_graphs": on})


def numpy_batch(bs: int, rng):
    import numpy as np

    from pearl_core.replay.storage import Batch

    obs = rng.standard_normal((bs, 4)).astype(np.float32)
    return Batch(obs, rng.integers(0, 2, bs), rng.standard_normal(bs).astype(np.float32), np.roll(obs, 1, 0),
                 rng.random(bs) < 0.01), rng.uniform(0.2, 1, bs).astype(np.float32)


def measure_dqn(hidden, bs: int, updates: int, warmup: int) -> tuple[float, int | None]:
    """Median seconds of one eager DQN update on cuda:0 (each update returns TD errors on the host, so it is
    synchronous), and the CUDA kernels one update launches (``None`` if the profiler fails)."""
    import numpy as np
    import torch
    from gymnasium import spaces

    from pearl_core.algorithms.dqn import DQN

    dqn = DQN(spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(2), hidden_sizes=hidden,
              device="cuda:0")
    rng = np.random.default_rng(0)
    batches = [numpy_batch(bs, rng) for _ in range(8)]
    for i in range(warmup):
        dqn.update_policy(*batches[i % len(batches)])
    torch.cuda.synchronize()
    times = []
    for i in range(updates):
        t0 = time.perf_counter()
        dqn.update_policy(*batches[i % len(batches)])
        times.append(time.perf_counter() - t0)
    kernels = None
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            dqn.update_policy(*batches[0])
            torch.cuda.synchronize()
        kernels = sum(1 for e in prof.events() if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA)
    except Exception as exc:  # noqa: BLE001 - the count is a bonus; the timing is the point
        print(f"kernel count unavailable ({type(exc).__name__}: {exc})", file=sys.stderr)
    return statistics.median(times), kernels


def measure_graph(hidden, bs: int, updates: int, warmup: int) -> float | None:
    """Median seconds of the CUDA plugin's graph-captured synthetic step (same layers), or ``None``."""
    try:
        import torch

        from pearl_cuda.learner import SyntheticLearner

        dims = (4, *hidden, 2)
        learner = SyntheticLearner(dims, dims, bs)
        replay = learner.capture_graph()
        for _ in range(warmup):
            replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(updates):
            t0 = time.perf_counter()
            replay()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    except Exception as exc:  # noqa: BLE001 - report, do not fail the table
        print(f"graph step unavailable ({type(exc).__name__}: {exc})", file=sys.stderr)
        return None


def us(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e6:,.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--updates", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--out", default=None, help="also append the table to this Markdown file")
    args = ap.parse_args(argv)
    problem = gpu_problem()
    if problem is not None:
        print(f"gpu_learner_model: no GPU here, nothing measured: {problem}")
        return NO_GPU_EXIT

    from pearl_core.composer import workload_for_env
    from pearl_core.sdk import learner_ops
    from pearl_cuda.model import gpu_kernels, gpu_learner

    dev, about = describe_gpu()
    lines = ["", "## GPU learner: predicted (analytic gpu_row model) vs measured", "",
             f"- GPU: {about}", f"- measured: median of {args.updates} DQN updates after {args.warmup} warm-up "
             "(eager, `update_policy` on cuda:0, TD errors read back every update); graph: the CUDA plugin's "
             "captured synthetic step of the same layers (no batch copies)",
             "- model: eager = o + max(ops x dispatch_us, K x (gap + mem_latency) + work); "
             "graphs = graph_launch_us + K x (gap + mem_latency) + work (plugins/pearl_cuda/pearl_cuda/model.py)", "",
             "| MLP | batch | predicted eager (us) | measured eager (us) | eager ratio | predicted graph (us) "
             "| measured graph (us) | K model / measured kernels | ops |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for hidden in HIDDEN:
        for bs in BATCHES:
            wl = workload_for_env("CartPole-v1", bs, hidden_sizes=hidden)
            p_eager, _ = gpu_learner(with_graphs(dev, False), wl)
            p_graph, _ = gpu_learner(with_graphs(dev, True), wl)
            m_eager, kernels = measure_dqn(hidden, bs, args.updates, args.warmup)
            m_graph = measure_graph(hidden, bs, args.updates, args.warmup)
            lines.append(f"| {'-'.join(map(str, hidden))} | {bs} | {us(p_eager)} | {us(m_eager)} | "
                         f"{p_eager / m_eager:.2f} | {us(p_graph)} | {us(m_graph)} | "
                         f"{gpu_kernels(wl)} / {'-' if kernels is None else kernels} | {learner_ops(wl)} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text("# GPU learner model check\n" + text, encoding="utf-8")
    if args.out:
        with open(args.out, "a", encoding="utf-8") as fh:
            fh.write(text)
    print(f"written: {RESULT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
