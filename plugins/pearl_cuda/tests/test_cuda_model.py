"""The GPU's analytic model lives in this plugin (``pearl_cuda.model``), reached through ``CudaBackend.analytic_cells``.

It moved out of the core unchanged: the rows it gives for the example server's H100 are the ones the
core's model gave (digest pinned from main at 0b75c5f, before the move), so what-if plans do not change.
It needs no GPU and no cupy: the backend is unavailable here and still models the device.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pearl_core.composer import HardwareSpec, workload_for_env
from pearl_core.composer.costs import fill_matrix
from pearl_core.plugins import PluginRegistry
from pearl_cuda.backend import CudaBackend
from pearl_cuda.model import gpu_row

ROOT = Path(__file__).resolve().parents[3]
SPEC = ROOT / "examples" / "hardware" / "cpu-gpu-fpga.toml"
#: sha256 of the H100's rows (batch 32 MLP 64-64, batch 512 MLP 256-256) as the core's gpu_row gave them.
ROWS_BEFORE_THE_MOVE = "1740e7f46fed2149652badd81e6365b03a0f88dbad84276cb46d7b689de37b61"


def workloads():
    return {"32": workload_for_env("CartPole-v1", 32, hidden_sizes=(64, 64)),
            "512": workload_for_env("CartPole-v1", 512, hidden_sizes=(256, 256))}


def test_the_moved_model_gives_the_rows_the_core_gave():
    dev = HardwareSpec.load(SPEC).device("h100")
    rows = {k: gpu_row(dev, wl).to_dict() for k, wl in workloads().items()}
    digest = hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()
    assert digest == ROWS_BEFORE_THE_MOVE, json.dumps(rows, sort_keys=True)[:600]


def test_the_backend_models_the_gpu_without_a_gpu_or_cupy():
    import pearl_cuda.plugin

    backend = CudaBackend()
    assert not backend.availability().available  # no GPU in CI: still asked, still answers
    dev, wl = HardwareSpec.load(SPEC).device("h100"), workloads()["32"]
    assert backend.analytic_cells(dev, wl) == gpu_row(dev, wl)
    reg = PluginRegistry(autoload=False)
    reg.register_plugin(pearl_cuda.plugin, name="cuda")
    spec = HardwareSpec.load(SPEC, registry=reg)
    row = fill_matrix(spec, wl, registry=reg).row("h100")
    assert row == gpu_row(dev, wl) and row.config["learner_kernels"] > 0
