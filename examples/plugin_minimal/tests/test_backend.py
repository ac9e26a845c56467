"""The example backend as the core uses it: its device, options, Data Storage and cost model, and
multi-process runs whose learner is on "numpy:0", counted in this (the host) process and read back
through pearl_example_numpy.stats()."""

import multiprocessing as mp

import gymnasium as gym
import numpy as np
import pytest

import pearl_core
import pearl_example_numpy
from pearl_core.errors import InvalidOptionError, InvalidValueError
from pearl_core.plugins import kernel_lookup
from pearl_example_numpy.learner import dqn_mlp

OBS, ACT = gym.spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32), gym.spaces.Discrete(2)


def backend():
    return pearl_core.get_backend("numpy-example")


def test_a_device_of_its_own_kind_with_its_kernel():
    (dev,) = backend().devices()
    assert (dev.name, dev.kind, dev.backend) == ("numpy0", "numpy", "numpy-example")
    assert backend().torch_device_type is None
    assert kernel_lookup("numpy:0")("dqn_mlp") is dqn_mlp  # what a trainer placed on numpy:0 is handed
    assert kernel_lookup("numpy:0")("no-such-kernel") is None


def test_sum_tree_takes_the_runtime_options():
    tree = backend().make_sum_tree(8, 4, threads=3, device="numpy:0")
    tree.update([5], [2.0])
    assert tree.total() == 2.0 and tree.sample([1.0]).tolist() == [5]
    with pytest.raises(InvalidOptionError, match="unknown sum-tree options"):
        backend().make_sum_tree(8, 4, colour="blue")


def test_data_storage_lives_on_the_device():
    from pearl_core.placement import make_storage
    from pearl_core.replay.storage import DataStorage, StorageSpec

    storage = make_storage(StorageSpec.from_spaces(OBS, ACT), 8, "numpy:0")  # as the runtime asks for it
    assert isinstance(storage, DataStorage) and storage.device == "numpy:0" and storage.capacity == 8
    with pytest.raises(InvalidOptionError, match="unknown storage options"):
        backend().make_storage(StorageSpec.from_spaces(OBS, ACT), 8, "numpy:0", pinned=True)


def test_transport_roles():
    q = backend().make_transport("ldq", 2, mp.get_context("spawn"))
    assert (q.role, q.maxsize) == ("ldq", 2)
    q.close()
    with pytest.raises(InvalidValueError, match="role = 'rrq'"):
        backend().make_transport("rrq", 2, mp.get_context("spawn"))


# --------------------------------------------------------------------------- counters across processes
def _batch(rng, n=16):
    from pearl_core.replay.storage import Batch

    return (Batch(rng.standard_normal((n, 4)).astype(np.float32), rng.integers(0, 2, n),
                  rng.standard_normal(n).astype(np.float32), rng.standard_normal((n, 4)).astype(np.float32),
                  rng.random(n) < 0.1), np.ones(n, np.float32))


def _learner(laq, ldq):
    """A learner process: updates a DQN placed on numpy:0 for every batch it gets, replies with the loss."""
    from pearl_core.algorithms import DQN

    laq.close_sender()
    ldq.close_receiver()
    trainer = DQN(OBS, ACT, hidden_sizes=(16, 16), engine="native", learner_kernels=kernel_lookup("numpy:0"))
    while (msg := laq.get(timeout=60)) is not None:
        ldq.put(trainer.update_policy(*msg).metrics["loss"], timeout=60)


def test_a_spawned_learner_is_counted_in_the_host():
    ctx = mp.get_context("spawn")
    pearl_example_numpy.reset_stats()
    laq, ldq = backend().make_transport("laq", 4, ctx), backend().make_transport("ldq", 4, ctx)
    proc = ctx.Process(target=_learner, args=(laq, ldq), daemon=True)
    proc.start()
    try:
        laq.close_receiver()
        ldq.close_sender()
        rng = np.random.default_rng(0)
        losses = []
        for _ in range(5):
            laq.put(_batch(rng), timeout=60)
            losses.append(ldq.get(timeout=60))
        laq.put(None, timeout=60)
        proc.join(60)
        assert proc.exitcode == 0 and all(np.isfinite(losses))
        assert pearl_example_numpy.stats() == {"kernel_steps": 5, "laq_messages": 6, "ldq_messages": 5}
    finally:
        laq.close()
        ldq.close()
        if proc.is_alive():
            proc.kill()


@pytest.mark.parametrize("setting,storage", [(1, "cpu"), (2, "numpy:0")])
def test_a_parallel_run_with_its_learner_on_numpy0(tmp_path, setting, storage):
    """The runtime asks this backend for the learner (its kernel), the LAQ/LDQ, the sum tree and
    (setting 2, everything on numpy:0) the Data Storage."""
    from pearl_core.runtime.config import RunConfig, RuntimePlan, StopCriteria
    from pearl_core.runtime.parallel import ParallelRuntime

    cfg = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN",
                    trainer_kwargs={"hidden_sizes": [16, 16]}, batch_size=16, learning_starts=64, train_every=32,
                    stop=StopCriteria(max_env_steps=256), log_dir=str(tmp_path / "run"))
    plan = RuntimePlan(rm_backend="numpy-example", rm_device="numpy:0", learner_device="numpy:0",
                       storage_device=storage, setting=setting, n_actors=1, insert_batch=16, queue_size=4)
    pearl_example_numpy.reset_stats()
    result = ParallelRuntime(cfg, plan, progress=False, plot=False, tensorboard=False).run()
    counts = pearl_example_numpy.stats()
    assert result.updates > 0
    assert counts["kernel_steps"] >= result.updates  # every update of the learner ran this backend's kernel
    assert counts["laq_messages"] > 0 and counts["ldq_messages"] > 0  # and went through its queues


# --------------------------------------------------------------------------- cost model
SPEC = """
host = "host"

[[device]]
name = "host"
kind = "cpu"
cores = 1
memory_GiB = 16
idle_power_W = 10
active_power_W = 40
peak_GFLOPS = 2
mem_bandwidth_GBps = 2

[[device]]
name = "np0"
kind = "numpy"
memory_GiB = 8
idle_power_W = 5
active_power_W = 20
peak_TFLOPS = 1
mem_bandwidth_GBps = 100

[device.options]
gemm_efficiency = 0.25

[[link]]
a = "host"
b = "np0"
latency_us = 10
bandwidth_GBps = 8
"""


def _spec_and_workload():
    from pearl_core.composer import HardwareSpec, workload_for_env

    spec = HardwareSpec.from_toml(SPEC)
    return spec, workload_for_env("CartPole-v1", 64, trainer_kwargs={"hidden_sizes": (256, 256)})


def test_the_cost_model_fills_a_row():
    import dataclasses

    from pearl_core.errors import SpecError

    spec, wl = _spec_and_workload()
    dev = spec.devices[1]
    row = backend().analytic_cells(dev, wl)
    assert row.device == "np0" and row.can_rm and row.can_learn and row.can_colocate
    assert all(cell.source == "analytic" and cell.power_w == 20 for _, cell in row.cells())
    assert row.co_learner.latency_s == pytest.approx(row.learner.latency_s + row.rm_update.latency_s
                                                     + row.rm_insert.latency_s)  # time-sliced with the RM
    assert any("launch_latency_s" in note for note in row.notes)  # the default it assumed
    slower = backend().analytic_cells(dataclasses.replace(dev, options={"gemm_efficiency": 0.05}), wl)
    assert slower.learner.latency_s > row.learner.latency_s  # device.options reach the model
    with pytest.raises(SpecError, match="gemm_efficiency = 2"):
        backend().analytic_cells(dataclasses.replace(dev, options={"gemm_efficiency": 2}), wl)


def test_the_composer_plans_for_numpy0():
    from pearl_core.composer import make_plan

    spec, wl = _spec_and_workload()
    plan = make_plan(spec, wl)
    assert plan.decision.learner_device == "np0"  # the fast device wins the learner
    rp = plan.runtime_plan()
    assert rp.learner_device == "numpy:0" and rp.backends.get("numpy") == "numpy-example"


def test_it_measures_its_replay_manager_and_leaves_the_rest_to_its_model():
    from pearl_core.composer.deviceprofile import profile_device
    from pearl_core.sdk import MeasureRequest, PrimitiveCost

    spec, wl = _spec_and_workload()
    dev = spec.devices[1]
    cost = backend().measure_primitive(dev, wl, MeasureRequest("replay", 1, iterations=20, warmup=2))
    assert isinstance(cost, PrimitiveCost) and cost.primitive == "replay"
    assert 0 < cost.sample_s and 0 < cost.update_s and 0 < cost.insert_s
    assert backend().measure_primitive(dev, wl, MeasureRequest("learner", 1, 5, 0)) is None
    # the composer's policy for a present accelerator: measured replay, modelled learner and co-located cells
    row = profile_device("numpy-example", backend(), dev, wl, iterations=20, warmup=2)
    assert (row.rm_sample.source, row.learner.source, row.co_learner.source) == ("profiled", "analytic", "analytic")
    assert any("did not measure ['learner', 'worker_loop']" in note for note in row.notes)
