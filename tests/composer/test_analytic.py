"""Workload, analytic CPU/GPU models, and how the matrix is filled from backends."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from backend_registry import registry_with

from pearl_core.backend import Availability, Backend
from pearl_core.composer import (
    CostCell,
    DeviceRow,
    DeviceSpec,
    HardwareSpec,
    LearnerLayer,
    LinkSpec,
    Workload,
    fill_matrix,
    learner_layers,
    make_plan,
    workload_for_env,
)
from pearl_core.composer.analytic import cpu_row, learner_ops
from pearl_core.composer.costs import AnalyticCostModel, ProfiledCostModel, analytic_row, profiled_row
from pearl_core.errors import SpecError
from pearl_core.plugins import PluginRegistry

ROOT = Path(__file__).resolve().parents[2]
TINY = (LearnerLayer("net.0", "linear", 4, 2, 8, 10, True, "net"),)


# --------------------------------------------------------------------------- workload
def test_cartpole_dqn_workload_sizes_and_layers():
    wl = workload_for_env("CartPole-v1", 32, hidden_sizes="64,64", n_actors=2)
    assert wl.experience_bytes == 2 * 16 + 8 + 4 + 1 + 4 == 49
    assert wl.insert_batch == 2 and wl.tree_levels == 5          # 16**5 >= 100_000 > 16**4
    assert [(ly.in_features, ly.out_features) for ly in wl.layers] == [(4, 64), (64, 64), (64, 2)] * 2
    assert [ly.trainable for ly in wl.layers] == [True] * 3 + [False] * 3    # the target network is frozen
    macs = 4 * 64 + 64 * 64 + 64 * 2
    assert wl.train_flops == 32 * (2 * 2 * macs + 4 * macs)


def test_ddpg_gets_hidden_sizes_for_actor_and_critic():
    wl = workload_for_env("Pendulum-v1", 16, hidden_sizes=(32,))
    assert {ly.out_features for ly in wl.layers if ly.in_features in (3, 4)} == {32}
    assert wl.action_bytes == 4


def _macs(wl, group: str) -> int:
    return sum(ly.macs for ly in wl.layers if ly.group == group)


@pytest.mark.parametrize("algo", ["DDPG", "TD3", "SAC"])
def test_actor_critic_workloads_count_every_pass_of_the_update(algo):
    # Pendulum-v1: obs 3, action 1; 32-32 networks. Each pass costs 2 FLOPs per MAC.
    wl = workload_for_env("Pendulum-v1", 8, trainer=f"pearl_core.algorithms:{algo}", hidden_sizes=(32, 32))
    act, crit = 3 * 32 + 32 * 32 + 32 * (2 if algo == "SAC" else 1), 4 * 32 + 32 * 32 + 32
    groups = {ly.group for ly in wl.layers}
    if algo == "DDPG":
        assert groups == {"actor", "actor_target", "critic", "critic_target"}
        # actor: loss forward + both gradients; critic: critic loss (3 passes) + actor loss (forward + dX)
        passes = 3 * act + act + (3 + 2) * crit + crit
    elif algo == "TD3":
        assert groups == {"actor", "actor_target", "critic1", "critic2", "critic1_target", "critic2_target"}
        # the actor's loss every policy_delay = 2 updates, through critic1 only
        passes = 1.5 * act + act + (3 + 1) * crit + 3 * crit + 2 * crit
    else:
        assert groups == {"actor", "critic1", "critic2", "critic1_target", "critic2_target"}
        # the actor sampled on s' and s, one backward; each critic: its loss + the actor's (forward + dX)
        passes = 4 * act + 2 * (3 + 2) * crit + 2 * crit
    assert _macs(wl, "actor") == act and _macs(wl, "critic1" if algo != "DDPG" else "critic") == crit
    assert wl.train_flops == pytest.approx(8 * 2 * passes)
    # Not the default rule (every layer forward once, trainable ones backward once): that misses the
    # critics' passes for the actor's loss (DDPG, SAC: more FLOPs) and TD3's delayed actor (fewer).
    default = 8 * (2 * wl.forward_macs + 4 * wl.trainable_macs)
    assert (wl.train_flops < default) if algo == "TD3" else (wl.train_flops > default)
    # The passes survive the plan's JSON round trip.
    assert Workload.from_dict(wl.to_dict()).train_flops == wl.train_flops


def test_double_dqn_counts_its_extra_forward_pass_and_layer_passes_default_to_one():
    plain = workload_for_env("CartPole-v1", 32, hidden_sizes="64,64")
    double = workload_for_env("CartPole-v1", 32, hidden_sizes="64,64", trainer_kwargs={"double_dqn": True})
    macs = 4 * 64 + 64 * 64 + 64 * 2
    assert double.train_flops - plain.train_flops == 32 * 2 * macs
    assert learner_ops(double) == learner_ops(plain) + 2 * 3     # three more layer evaluations
    ly = LearnerLayer("net.0", "linear", 4, 2, 8, 10, False, "net")
    assert (ly.forwards, ly.weight_grads, ly.input_grads, ly.passes) == (1.0, 0.0, 0.0, 1.0)


@pytest.mark.parametrize("passes,match", [
    ({"qnet": (1, 1, 1)}, "names 'qnet', which holds no nn.Linear"),
    ({"q_net": (1.0, -1.0, 1.0)}, "expected three finite numbers >= 0"),
    ({"q_net": "fast"}, "expected three finite numbers >= 0"),
    ({"q_net": (1.0, 1.0)}, "expected three finite numbers >= 0"),
    ([("q_net", (1, 1, 1))], "expected a mapping network name"),
])
def test_bad_learner_passes_are_refused_with_the_network_named(passes, match):
    from pearl_core.algorithms import DQN

    class Declares(DQN):
        def learner_passes(self):
            return passes

    with pytest.raises(SpecError, match=match):
        learner_layers(Declares(*_cartpole_spaces(), hidden_sizes=(8,)))


def _cartpole_spaces():
    from pearl_core.envs import env_spaces

    return env_spaces("CartPole-v1")


def test_bad_programs_give_clear_errors():
    with pytest.raises(SpecError, match="environment 'NoSuchEnv-v0' cannot be created"):
        workload_for_env("NoSuchEnv-v0", 32)
    with pytest.raises(SpecError, match="cannot be built for 'CartPole-v1'"):
        workload_for_env("CartPole-v1", 32, trainer="pearl_core.algorithms.ddpg:DDPG")
    with pytest.raises(SpecError, match="hidden sizes"):
        workload_for_env("CartPole-v1", 32, hidden_sizes="64,x")
    with pytest.raises(SpecError, match="batch_size = 0"):
        Workload(batch_size=0, obs_bytes=4, action_bytes=4)


def test_conv_layers_count_their_output_positions():
    import torch.nn as nn

    class Pixels:
        input_shape = (4, 84, 84)

        def __init__(self):
            self.net = nn.Sequential(nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2))

    layers = learner_layers(Pixels())
    assert [ly.positions for ly in layers] == [20 * 20, 9 * 9]
    assert layers[0].macs == 32 * 4 * 8 * 8 * 400 and layers[0].trainable


# --------------------------------------------------------------------------- analytic models, by hand
def cpu(**kw) -> DeviceSpec:
    values = dict(cores=4, launch_latency_s=5e-6, mem_latency_s=1e-7, peak_flops=100e9, mem_bandwidth_Bps=40e9)
    values.update(kw)
    return DeviceSpec("c", "cpu", 2**30, 10, 50, **values)


def test_cpu_model_by_hand():
    wl = Workload(batch_size=8, obs_bytes=16, action_bytes=8, capacity=256, fanout=16, insert_batch=2, layers=TINY)
    row = cpu_row(cpu(), wl, is_host=True)          # 4 threads, 1 actor: 3 left for RM / learner
    L, step = 2, 1e-7 + 8 / 10e9                    # levels; one node access at 10 GB/s per core
    assert row.config["rm_threads"] == 3 and row.config["learner_threads"] == 3
    assert row.rm_sample.latency_s == pytest.approx(5e-6 + 3 * L * (1e-7 + 16 * 8 / 10e9))
    assert row.rm_update.latency_s == pytest.approx(5e-6 + 3 * L * step)
    assert row.rm_insert.latency_s == pytest.approx(10e-6 + 1 * (L + 1) * step)
    ops = 2 + 13 + 49
    flops, nbytes = 8 * (2 * 8 + 4 * 8), 4 * 10 + 7 * 40 + 3 * 4 * 8 * 2
    assert learner_ops(wl) == ops
    assert row.learner.latency_s == pytest.approx(ops * 5e-6 + max(flops / (0.5 * 75e9), nbytes / 30e9))
    assert row.rm_sample.power_w == pytest.approx(10 + 40 * 3 / 4)
    # Co-located: the best split of the 3 threads, each part costed with its own thread count.
    assert row.config["co_rm_threads"] + row.config["co_learner_threads"] == 3
    assert not row.config["co_time_sliced"]


def test_one_free_cpu_thread_is_shared_and_each_cost_counted_once():
    wl = Workload(batch_size=8, obs_bytes=16, action_bytes=8, capacity=256, n_actors=1, layers=TINY)
    row = cpu_row(cpu(cores=2), wl, is_host=True)
    assert row.config["co_time_sliced"]
    assert row.co_learner.latency_s == pytest.approx(row.learner.latency_s + row.rm_update.latency_s
                                                     + row.rm_insert.latency_s)
    # Eq. 7 on these cells = sample + learner + update + insert, nothing twice.
    t = row.co_rm_sample.latency_s + max(row.co_rm_update.latency_s + row.co_rm_insert.latency_s,
                                         row.co_learner.latency_s)
    assert t == pytest.approx(row.rm_sample.latency_s + row.learner.latency_s + row.rm_update.latency_s
                              + row.rm_insert.latency_s)


def test_gpu_model_by_hand():
    from pearl_cuda.model import gpu_row  # the GPU's model is the CUDA plugin's (CudaBackend.analytic_cells)

    dev = DeviceSpec("g", "cuda", 2**34, 30, 300, peak_flops=10e12, mem_bandwidth_Bps=1e12,
                     launch_latency_s=4e-6, mem_latency_s=5e-7)
    wl = Workload(batch_size=64, obs_bytes=16, action_bytes=8, capacity=4096, fanout=16, insert_batch=4,
                  layers=TINY)
    row = gpu_row(dev, wl)
    L, S = 3, 8
    assert row.rm_sample.latency_s == pytest.approx(4e-6 + L * 5e-7 + 64 * L * 16 * S / 1e12)
    assert row.rm_update.latency_s == pytest.approx((1 + L) * 4e-6 + L * 5e-7 + 2 * 64 * L * S / 1e12)
    assert row.rm_insert.latency_s == pytest.approx(4e-6 + 5e-7 + (1 + L) * 4e-6 + L * 5e-7 + 2 * 4 * L * S / 1e12)
    flops, nbytes = 64 * (2 * 8 + 4 * 8), 4 * 10 + 7 * 40 + 3 * 4 * 64 * 2
    # eager: the first launch, then the larger of the CPU's dispatch (64 ops x 5 us) and the GPU's side
    # (36 kernels x (gap 0.6 us + one memory latency), then the work at eta(64) = 0.5 * 64 / (64 + 256))
    assert row.learner.latency_s == pytest.approx(4e-6 + max(64 * 5e-6, 36 * (0.6e-6 + 5e-7) + max(
        flops / (0.5 * 64 / (64 + 256) * 10e12), nbytes / 1e12)))
    assert row.co_learner == row.learner and row.rm_sample.power_w == 300


def test_uniform_replay_rm_is_one_call():
    wl = Workload(batch_size=8, obs_bytes=16, action_bytes=8, replay="uniform", layers=TINY)
    row = cpu_row(cpu(), wl, is_host=False)
    assert row.rm_sample.latency_s == 5e-6 and row.rm_update.latency_s == row.rm_insert.latency_s == 0


def test_op_count_matches_the_profiled_builtin_dqn():
    # torch.profiler: 83 / 100 / 117 top-level aten ops per DQN update_policy with 1 / 2 / 3 hidden layers.
    for hidden, ops in (((64,), 83), ((64, 64), 100), ((64, 64, 64), 117)):
        wl = Workload(32, 16, 8, layers=tuple(
            LearnerLayer(f"{g}.{k}", "linear", 4, 4, 16, 20, g == "q", g) for g in ("q", "t")
            for k in range(len(hidden) + 1)))
        assert learner_ops(wl) == ops


def test_missing_model_inputs_are_assumed_and_said_so():
    row = cpu_row(DeviceSpec("c", "cpu", 2**30, 10, 50, cores=2), Workload(8, 16, 8, layers=TINY), is_host=False)
    assert any("32 GFLOP/s per core" in n for n in row.notes)


# --------------------------------------------------------------------------- filling the matrix


class NpuBackend(Backend):
    """A third-party kind with its own model; unavailable here, still asked."""

    name = "npu-backend"
    device_kind = "npu"

    def availability(self):
        return Availability.no("no NPU in CI")

    def devices(self):
        return []

    def make_sum_tree(self, capacity, fanout=16, **options):
        raise NotImplementedError

    def analytic_cells(self, device, workload):
        cell = CostCell(1e-6, device.active_power_w, "analytic")
        return DeviceRow(device.name, device.kind, cell, cell, cell, cell, cell, cell, cell, cell,
                         config={"from": "npu model"})


def npu_spec(kind="npu") -> HardwareSpec:
    return HardwareSpec((cpu(), DeviceSpec("n0", kind, 2**32, 5, 15, mem_bandwidth_Bps=1e11)),
                        (LinkSpec("c", "c", 1e-6, 1e10), LinkSpec("c", "n0", 1e-5, 1e10)))


def test_a_backend_models_its_own_kind_and_names_the_runtime_backend():
    reg = registry_with(NpuBackend)
    wl = Workload(batch_size=8, obs_bytes=16, action_bytes=8, layers=TINY)
    matrix = fill_matrix(npu_spec(), wl, registry=reg)
    assert matrix.row("n0").config["from"] == "npu model"
    plan = make_plan(npu_spec(), wl, registry=reg)
    assert plan.backends == {"cpu": "cpu", "npu": "npu-backend"}
    assert (plan.rm_device, plan.learner_device) == ("n0", "n0")


def test_a_kind_nobody_models_is_infeasible_with_a_reason():
    wl = Workload(batch_size=8, obs_bytes=16, action_bytes=8, layers=TINY)
    plan = make_plan(npu_spec("tpu"), wl, registry=registry_with())
    bad = plan.decision.candidate("n0", "n0")
    assert not bad.feasible and "no cost model" in bad.reason and "no backend for kind 'tpu'" in bad.reason
    assert (plan.rm_device, plan.learner_device) == ("c", "c")


def test_a_crashing_backend_model_is_recorded_not_fatal():
    class Broken(NpuBackend):
        def analytic_cells(self, device, workload):
            raise ZeroDivisionError("oops")

    wl = Workload(batch_size=8, obs_bytes=16, action_bytes=8, layers=TINY)
    row = fill_matrix(npu_spec(), wl, registry=registry_with(Broken)).row("n0")
    assert not row.can_rm and "failed to model this device (ZeroDivisionError: oops)" in row.notes[0]


def test_the_example_server_plan_uses_the_fpga_backend_model_without_any_accelerator():
    import pearl_cuda.plugin
    import pearl_fpga.plugin

    reg = PluginRegistry(autoload=False)
    reg.register_plugin(pearl_fpga.plugin, name="fpga")
    reg.register_plugin(pearl_cuda.plugin, name="cuda")  # the GPU's model is the CUDA plugin's
    spec = HardwareSpec.load(ROOT / "examples" / "hardware" / "cpu-gpu-fpga.toml", registry=reg)
    wl = workload_for_env("CartPole-v1", 32, hidden_sizes=(64, 64))
    plan = make_plan(spec, wl, "power_efficiency", registry=reg)
    fpga = plan.matrix.row("agilex")
    assert fpga.can_colocate and fpga.config["initiation_interval"] == 2
    assert {c.source for r in plan.matrix.rows for _, c in r.cells() if c} == {"analytic"}
    assert len(plan.candidates) == 9 and all(c.feasible for c in plan.candidates)
    assert all(math.isfinite(c.score) and c.score > 0 for c in plan.candidates)
    # Small batch, power efficiency: the FPGA hosts the replay manager (the paper's Figure 10 finding).
    assert plan.rm_device == "agilex"


def test_a_backend_is_a_cost_model_by_its_methods_not_by_the_abc():
    class Bare(NpuBackend):
        analytic_cells = None  # a backend of the kind that models nothing

    assert isinstance(NpuBackend(), AnalyticCostModel) and not isinstance(NpuBackend(), ProfiledCostModel)
    assert not hasattr(Backend, "analytic_cells") and not hasattr(Backend, "profile_cells")
    wl = Workload(batch_size=8, obs_bytes=16, action_bytes=8, layers=TINY)
    assert analytic_row(object(), npu_spec().device("n0"), wl) is None
    assert profiled_row(NpuBackend(), npu_spec().device("n0"), wl) is None
    row = fill_matrix(npu_spec(), wl, registry=registry_with(Bare)).row("n0")
    assert not row.can_rm and "backend 'npu-backend' has no analytic model" in row.notes[0]
