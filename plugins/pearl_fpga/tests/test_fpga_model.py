"""The analytic FPGA model (Eq. 2-6): values by hand, the paper's qualitative findings, resource fit."""

from __future__ import annotations

from pathlib import Path

import pytest

from pearl_core.composer import HardwareSpec, LearnerLayer, Workload
from pearl_fpga import model
from pearl_fpga.backend import FpgaBackend

ROOT = Path(__file__).resolve().parents[3]
F = 250e6


def mlp(dims, trainable=True, group="q_net"):
    return [LearnerLayer(f"{group}.{2 * k}", "linear", a, b, a * b, a * b + b, trainable, group)
            for k, (a, b) in enumerate(zip(dims, dims[1:]))]


def dqn_layers(dims):
    return tuple(mlp(dims) + mlp(dims, trainable=False, group="target_net"))


def agilex():
    spec = HardwareSpec.load(ROOT / "examples" / "hardware" / "cpu-gpu-fpga.toml")
    return spec.device("agilex")


def test_eq4_sampling_matches_the_authors_anchor_values():
    # capacity 8192, K 16 (depth 4), 250 MHz, II 2: 4.6 us @ BS 32, 17 us @ 128, 66 us @ 512 (pearl-notes 4.3)
    assert model.rm_sample_s(32, 4, 16, F, 2) == pytest.approx(16 * 2 / F * 36)
    assert model.rm_sample_s(32, 4, 16, F, 2) == pytest.approx(4.608e-6)
    assert model.rm_sample_s(128, 4, 16, F, 2) == pytest.approx(16.9e-6, rel=1e-3)
    assert model.rm_sample_s(512, 4, 16, F, 2) == pytest.approx(66.0e-6, rel=1e-3)


def test_sampling_grows_linearly_in_batch_with_a_depth_sized_offset():
    ts = [model.rm_sample_s(bs, 5, 16, F) for bs in (16, 32, 64, 128)]
    slope = (ts[1] - ts[0]) / 16
    for bs, t in zip((16, 32, 64, 128), ts):
        assert t == pytest.approx(slope * (bs + 5), rel=1e-12)   # intercept = slope * D


def test_eq5_update_keeps_the_batch_term_and_insert_is_two_passes():
    assert model.rm_update_s(512, 4, F) / model.rm_update_s(32, 4, F) == pytest.approx(516 / 36)
    assert model.rm_insert_s(8, 4, F) == pytest.approx(2 * 2 / F * 12)


def test_eq6_on_a_tiny_network_by_hand():
    layers = mlp([4, 2])                       # stages: FW (8 MACs, <= 2 units), WA (8 MACs, <= 8 units)
    budget = model.FpgaBudget(4510, 7110, 20480, 24360, 640)
    design, why = model.learner_design(layers, 8, budget, F)
    assert why == ""
    # UF = (2, 8): interval max(8/2, 8/8) = 4 cycles; 8 pipelines: (ceil(8/8) + 2 stages) * 4 = 12 cycles.
    assert design.dp == 8 and design.uf == (2, 8)
    assert design.latency_s == pytest.approx(12 / F)


def test_eq3_balances_units_in_proportion_to_work():
    stages = model.learner_stages(mlp([4, 64, 64, 2]))
    assert [s.name.split()[0] for s in stages] == ["FW", "FW", "FW", "BW", "WA", "BW", "WA", "WA"]
    uf = model.balanced_uf(stages, 1000)
    for s, u in zip(stages, uf):
        assert 1 <= u <= s.maxpar
    big = [u for s, u in zip(stages, uf) if s.name.startswith("WA") and s.ops == 4096]
    small = [u for s, u in zip(stages, uf) if s.name.startswith("WA") and s.ops == 128]
    assert big[0] > small[0]


def test_rm_and_a_4_64_64_2_learner_fit_together_on_the_example_agilex():
    wl = Workload(batch_size=32, obs_bytes=16, action_bytes=8, capacity=8192, fanout=16,
                  layers=dqn_layers([4, 64, 64, 2]))
    row = FpgaBackend().analytic_cells(agilex(), wl)
    assert row.can_rm and row.can_learn and row.can_colocate
    assert {c.source for _, c in row.cells()} == {"analytic"}
    assert row.rm_sample.latency_s == pytest.approx(model.rm_sample_s(32, 4, 16, F, 2))
    assert row.config["learner_dsp"] <= 4510 and row.co_learner.power_w == 60


def test_a_model_too_big_for_the_ram_left_by_the_rm_is_rejected_for_colocation_with_the_overflow():
    # A 4M-leaf tree fills nearly every M20K; a 4-512-512-2 MLP (and its target) fits alone, not beside it.
    wl = Workload(batch_size=32, obs_bytes=16, action_bytes=8, capacity=4 * 2**20, fanout=16,
                  layers=dqn_layers([4, 512, 512, 2]))
    row = model.device_row(agilex(), wl)
    assert row.can_rm and row.can_learn and not row.can_colocate
    (note,) = [n for n in row.notes if "do not fit together" in n]
    assert "over by" in note and "Mbit" in note


def test_the_rm_alone_can_overflow_and_conv_learners_are_not_mapped():
    wl = Workload(batch_size=32, obs_bytes=16, action_bytes=8, capacity=2**26, fanout=16,
                  layers=(LearnerLayer("c.0", "conv2d", 4, 32, 10**6, 8224, True, "c", 400),))
    row = model.device_row(agilex(), wl)
    assert not row.can_rm and not row.can_learn and not row.can_colocate
    assert any("sum tree needs" in n for n in row.notes)
    assert any("nn.Linear stacks only" in n for n in row.notes)


def test_uniform_replay_has_no_tree_and_bad_options_are_named():
    wl = Workload(batch_size=32, obs_bytes=16, action_bytes=8, replay="uniform", layers=dqn_layers([4, 8, 2]))
    row = model.device_row(agilex(), wl)
    assert row.can_colocate and row.rm_update.latency_s == 0
    import dataclasses

    from pearl_core.errors import SpecError

    bad = dataclasses.replace(agilex(), options={"initiation_interval": 0})
    with pytest.raises(SpecError, match="initiation_interval = 0"):
        model.device_row(bad, wl)
