"""The paper's qualitative findings (Fig. 9 and 10), reproduced by the analytic models on the example server.

Everything here is a what-if plan: ``examples/hardware/cpu-gpu-fpga.toml`` (Xeon host, H100 PCIe,
Agilex FPGA) with no profiling, so every matrix cell is analytic (``cpu_row`` of
:mod:`pearl_core.composer.analytic`, the CUDA backend's ``pearl_cuda.model.gpu_row``, the FPGA backend's Eq. 2-6
model). The workloads are DQN on
CartPole-v1 with prioritized replay, MLP 64-64 ("small") or 256-256 ("large"). Each test compares
numbers the models compute; none is pinned.

The example spec sets ``cuda_graphs = true`` on the H100 (a what-if: the CUDA plugin's runtime runs
eager today). :func:`test_eager_gpu_learner_is_dispatch_bound_and_loses_the_large_batch` shows what
changes without it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import MappingProxyType

import pytest

from pearl_core.composer import HardwareSpec, make_plan, workload_for_env
from pearl_core.composer.analytic import learner_ops
from pearl_core.plugins import PluginRegistry
from pearl_cuda.model import gpu_learner

ROOT = Path(__file__).resolve().parents[2]
SPEC_PATH = ROOT / "examples" / "hardware" / "cpu-gpu-fpga.toml"
BATCHES = (32, 64, 128, 256, 512)
SMALL, LARGE = (64, 64), (256, 256)
CPU, GPU, FPGA = "xeon", "h100", "agilex"


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    import pearl_cuda.plugin
    import pearl_fpga.plugin

    reg = PluginRegistry(autoload=False)
    reg.register_plugin(pearl_fpga.plugin, name="fpga")
    reg.register_plugin(pearl_cuda.plugin, name="cuda")
    return reg


@pytest.fixture(scope="module")
def spec(registry) -> HardwareSpec:
    return HardwareSpec.load(SPEC_PATH, registry=registry)


_WORKLOADS: dict = {}


def workload(batch: int, hidden: tuple[int, ...]):
    key = (batch, hidden)
    if key not in _WORKLOADS:
        _WORKLOADS[key] = workload_for_env("CartPole-v1", batch, hidden_sizes=hidden, replay="prioritized")
    return _WORKLOADS[key]


def plan(spec, registry, batch, hidden, metric="throughput"):
    return make_plan(spec, workload(batch, hidden), metric, registry=registry)


def learner_us(p) -> dict[str, float]:
    return {r.device: r.learner.latency_s * 1e6 for r in p.matrix.rows}


def grid(p) -> dict[tuple[str, str], float]:
    """Throughput (samples/s) of every feasible (RM device, learner device) assignment."""
    return {(c.rm_device, c.learner_device): c.throughput for c in p.candidates if c.feasible}


def axis_variation(p) -> tuple[float, float]:
    """How much the throughput grid varies along each axis.

    ``along_rm``: for each learner device (a column of the grid), the range (max - min) of throughput
    over the RM devices, averaged over the columns. ``along_learner``: for each RM device (a row), the
    range over the learner devices, averaged over the rows. The axis with the larger mean range is the
    one along which the paper's colour gradient "changes most drastically". Only feasible cells count.
    """
    g = grid(p)
    devices = p.matrix.devices
    cols = [[g[(i, j)] for i in devices if (i, j) in g] for j in devices]
    rows = [[g[(i, j)] for j in devices if (i, j) in g] for i in devices]
    mean_range = lambda groups: sum(max(x) - min(x) for x in groups if x) / sum(1 for x in groups if x)  # noqa: E731
    return mean_range(cols), mean_range(rows)


def test_every_cell_is_analytic_and_every_assignment_feasible(spec, registry):
    for batch in (32, 512):
        for hidden in (SMALL, LARGE):
            p = plan(spec, registry, batch, hidden)
            assert {c.source for r in p.matrix.rows for _, c in r.cells() if c} == {"analytic"}
            assert len(grid(p)) == 9


@pytest.mark.parametrize("hidden", [SMALL, LARGE])
def test_gpu_learner_beats_cpu_learner_at_every_batch(spec, registry, hidden):
    # Fig. 9: "consistently lower gradient update latency [on the GPU] compared to CPU execution".
    for batch in BATCHES:
        t = learner_us(plan(spec, registry, batch, hidden))
        assert t[GPU] < t[CPU], (batch, hidden, t)


@pytest.mark.parametrize("hidden", [(16, 16), SMALL])
def test_fpga_learner_beats_gpu_at_small_batch_and_model(spec, registry, hidden):
    # Fig. 9: the FPGA is ahead "when arithmetic intensity is low ... smaller network sizes and batch sizes".
    t = learner_us(plan(spec, registry, 32, hidden))
    assert t[FPGA] < t[GPU], t


def test_gpu_learner_wins_at_batch_512_with_the_large_model(spec, registry):
    # Fig. 9: "as the batch size increases, the execution time ... on GPU begins to outperform that on FPGA".
    p = plan(spec, registry, 512, LARGE)
    t = learner_us(p)
    assert t[GPU] < t[FPGA] < t[CPU], t
    assert p.learner_device == GPU
    # ... and the crossover is a trend: at batch 32 the same model's learner is faster on the FPGA.
    t32 = learner_us(plan(spec, registry, 32, LARGE))
    assert t32[FPGA] < t32[GPU], t32


def test_grid_varies_most_along_the_learner_axis_at_batch_512(spec, registry):
    # Fig. 10: at batch 512 "the Learner dominates each training iteration".
    for hidden in (SMALL, LARGE):
        along_rm, along_learner = axis_variation(plan(spec, registry, 512, hidden))
        assert along_learner > along_rm, (hidden, along_rm, along_learner)


def test_rm_axis_matters_relatively_more_at_batch_32_than_at_512(spec, registry):
    # The direction of Fig. 10's contrast: the RM axis's share of the variation grows as the batch shrinks.
    for hidden in (SMALL, LARGE):
        rm32, ln32 = axis_variation(plan(spec, registry, 32, hidden))
        rm512, ln512 = axis_variation(plan(spec, registry, 512, hidden))
        assert rm32 / ln32 > rm512 / ln512, (hidden, rm32 / ln32, rm512 / ln512)


@pytest.mark.xfail(strict=True, reason=(
    "Not reproduced: at batch 32 the CPU learner is dispatch-bound (~100 torch ops x 5 us = ~0.5 ms) and the GPU "
    "learner kernel-bound (~80 us), while every RM cell is under ~40 us, so the learner column still varies the "
    "grid most. The paper's Fig. 10 grids at batch 32 vary most along the RM axis. If a model change makes this "
    "pass, drop the xfail."))
def test_grid_varies_most_along_the_rm_axis_at_batch_32(spec, registry):
    along_rm, along_learner = axis_variation(plan(spec, registry, 32, SMALL))
    assert along_rm > along_learner, (along_rm, along_learner)


def test_power_metric_prefers_the_fpga_for_small_memory_bound_workloads(spec, registry):
    # Fig. 10(e)/(f): for power efficiency the FPGA accelerators "stand out" for small models and batches.
    p = plan(spec, registry, 32, SMALL, "power_efficiency")
    assert FPGA in (p.rm_device, p.learner_device), (p.rm_device, p.learner_device)
    # ... while for throughput at batch 512 with the large model the GPU learner is chosen (the power increase is
    # outweighed there, the paper's last Fig. 10 remark, in throughput terms).
    assert plan(spec, registry, 512, LARGE).learner_device == GPU


def _with_options(spec: HardwareSpec, name: str, **options) -> HardwareSpec:
    devices = tuple(dataclasses.replace(d, options=MappingProxyType({**d.options, **options})) if d.name == name
                    else d for d in spec.devices)
    return dataclasses.replace(spec, devices=devices)


def test_eager_gpu_learner_is_dispatch_bound_and_loses_the_large_batch(spec, registry):
    # Without CUDA graphs (what the CUDA plugin's runtime does today) every torch op is dispatched from the
    # CPU: the step takes at least ops x dispatch_us whatever the batch, and the FPGA keeps the large batch.
    eager = _with_options(spec, GPU, cuda_graphs=False)
    wl = workload(512, LARGE)
    dev = eager.device(GPU)
    t_eager, terms = gpu_learner(dev, wl)
    assert not terms["learner_cuda_graphs"]
    assert t_eager >= learner_ops(wl) * dev.options["dispatch_us"] * 1e-6
    t_graph, _ = gpu_learner(spec.device(GPU), wl)
    assert t_graph < t_eager
    t = learner_us(make_plan(eager, wl, "throughput", registry=registry))
    assert t[FPGA] < t[GPU], t


def test_gpu_learner_grows_with_batch_and_model(spec):
    dev = spec.device(GPU)
    times = {(b, h): gpu_learner(dev, workload(b, h))[0] for b in (32, 512) for h in (SMALL, LARGE)}
    assert times[(32, SMALL)] < times[(512, SMALL)] < times[(512, LARGE)]
    assert times[(32, SMALL)] < times[(32, LARGE)] < times[(512, LARGE)]
