"""Every plan the composer makes runs as composed, or is refused before anything is written.

On the paper's kind of server (``examples/hardware/cpu-gpu-fpga.toml``) with the
FPGA Emulation Device present (``pearl-fpga[emulator]``, installed by ``make
test``), each replay manager x learner x Data Storage placement over {CPU, FPGA}
is composed, written and trained for 1,000 env steps in a fresh process; the
FPGA plugin's kernel counters (:mod:`pearl_fpga.counters`) show that each
primitive's kernels ran exactly where the plan put it. CUDA placements on a
machine without a GPU are refused at compose time, naming the device, why and
the fix (they run in ``plugins/pearl_cuda/scripts/gpu_check.sh`` where a GPU is).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pearl_core.algorithms import DQN, DDPG
from pearl_core.composer import Composer, Composition, RuntimeGen
from pearl_core.errors import ComposerError, PlacementError
from pearl_core.plugins import get_backend, list_backends

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "hardware" / "cpu-gpu-fpga.toml"
CPU, FPGA, GPU = "xeon", "agilex", "h100"


def _available(name: str) -> bool:
    return any(s.name == name and s.available for s in list_backends())


needs_fpga = pytest.mark.skipif(not _available("fpga"), reason="the FPGA Emulation Device is not installed "
                                "(pip install './plugins/pearl_fpga[emulator]'; make test installs it)")


def composer(*, emulated: bool = True, trainer=DQN, env: str = "CartPole-v1", **kw) -> Composer:
    c = Composer(SPEC, emulated=emulated)
    c.set_actors(env, n_actors=1)
    kw = kw or {"hidden_sizes": (32, 32)}
    c.set_train_function(trainer, batch_size=32, learning_starts=200, **kw)
    c.set_replay("prioritized", capacity=5_000, fanout=16)
    c.set_stop(max_env_steps=1_000)
    return c


@pytest.fixture(scope="module")
def emulated_composer():
    return composer()


def _run_program(path: Path, tmp_path: Path, counters: Path) -> dict:
    env = dict(os.environ, PEARL_FPGA_COUNTERS=str(counters))
    out = subprocess.run([sys.executable, str(path), "--max-env-steps", "1000", "--quiet",
                          "--log-dir", str(tmp_path / "run")], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return json.loads((tmp_path / "run" / "result.json").read_text())


COMBOS = list(itertools.product((CPU, FPGA), repeat=3))


@pytest.mark.slow
@needs_fpga
@pytest.mark.parametrize("rm,learner,storage", COMBOS, ids=["-".join(c) for c in COMBOS])
def test_each_cpu_fpga_placement_composes_writes_and_trains(emulated_composer, tmp_path, rm, learner, storage):
    from pearl_fpga.counters import by_primitive, read_dir

    plan = emulated_composer.run(profile=False, place={"rm": rm, "learner": learner, "storage": storage})
    assert (plan.rm_device, plan.learner_device, plan.ds_device) == (rm, learner, storage)
    assert plan.refusals == () and plan.runnable
    rp = plan.runtime_plan
    assert int(rp.setting) == (2 if rm == learner else 1)
    expect = {"cpu": "cpu", "fpga": "fpga:0"}
    kinds = {CPU: "cpu", FPGA: "fpga"}
    assert (rp.rm_device, rp.learner_device, rp.storage_device) == tuple(
        expect[kinds[d]] for d in (rm, learner, storage))
    program = RuntimeGen(plan, tmp_path / "runtime.py")
    result = _run_program(program, tmp_path, tmp_path / "counters")
    assert result["env_steps"] >= 1_000 and result["updates"] > 100
    ran = by_primitive(read_dir(tmp_path / "counters"))
    # Each primitive's kernels ran on the FPGA exactly when the plan placed it there.
    assert (ran["replay manager"] > 0) == (rm == FPGA), ran
    assert (ran["learner"] > 0) == (learner == FPGA), ran
    assert (ran["Data Storage"] > 0) == (storage == FPGA), ran
    counts = read_dir(tmp_path / "counters")
    if learner == FPGA:  # one pipeline run per update at least: FW, loss, BW/WA, reduction, Adam
        assert counts["dqn_loss"] >= result["updates"] and counts["adam_step"] >= result["updates"]
    if rm == learner == storage == FPGA:  # setting 2 on the FPGA: every batch stays on the device
        assert counts["ds_gather_bool_f32"] >= result["updates"] and ran["batch to host"] == 0, counts
    elif storage == FPGA:  # the host (setting 1) or a CPU learner reads each batch back
        assert ran["batch to host"] >= result["updates"], counts


@needs_fpga
def test_fpga_plan_carries_the_pipeline_design_to_the_trainer(emulated_composer):
    """The plan's DP/UF for the learner on the FPGA reach FpgaDQN (setting 2 uses the co-located design)."""
    from pearl_core.envs import env_spaces
    from pearl_core.runtime.wiring import build_trainer
    from pearl_fpga.dqn import FpgaDQN

    plan = emulated_composer.run(profile=False, place={"rm": FPGA, "learner": FPGA, "storage": FPGA})
    cfg = plan.runtime_plan.device_config["learner"]
    trainer = build_trainer(plan.config, *env_spaces("CartPole-v1"), check=False, plan=plan.runtime_plan)
    assert isinstance(trainer, FpgaDQN)
    assert trainer.pipeline.dp == cfg["co_learner_dp"]
    from pearl_fpga.learner import stage_unrolls

    assert trainer.pipeline.stage_uf == stage_unrolls(cfg["co_learner_uf"], 3)


@needs_fpga
def test_data_storage_lives_on_the_planned_device(emulated_composer):
    from pearl_core.envs import env_spaces
    from pearl_core.replay.storage import DataStorage, StorageSpec
    from pearl_core.runtime.wiring import build_replay

    spec = StorageSpec.from_spaces(*env_spaces("CartPole-v1"))
    for storage, device in ((FPGA, "fpga:0"), (CPU, "cpu")):
        plan = emulated_composer.run(profile=False, place={"rm": CPU, "learner": CPU, "storage": storage})
        replay = build_replay(plan.config, plan.runtime_plan, spec)
        assert replay.storage.device == device
        assert (type(replay.storage) is DataStorage) == (device == "cpu")


def test_gpu_placements_are_refused_at_compose_time_without_a_gpu(tmp_path):
    if _available("cuda"):
        pytest.skip("a GPU is here: gpu_check.sh runs the GPU plans instead")
    c = composer(emulated=True)
    for place in ({"learner": GPU}, {"rm": GPU, "learner": GPU, "storage": GPU}, {"rm": CPU, "learner": CPU,
                                                                                  "storage": GPU}):
        plan = c.run(profile=False, place=place)
        assert plan.refusals and not plan.runnable
        text = " ".join(plan.refusals)
        assert "'cuda:0'" in text and "cuda" in text and "Fix:" in text
        out = tmp_path / "runtime.py"
        with pytest.raises(ComposerError, match="(?s)cannot run here.*cuda:0.*Fix"):
            RuntimeGen(plan, out)
        assert not out.exists()


def test_described_fpga_without_the_emulator_flag_is_a_what_if_plan(tmp_path):
    plan = composer(emulated=False).run(profile=False)
    assert plan.learner_device == FPGA  # the paper's server: the analytic model puts the learner on the FPGA
    assert plan.refusals and "fpga:0" in plan.refusals[0]
    if _available("fpga"):
        assert "emulated=True" in plan.refusals[0]
    with pytest.raises(ComposerError, match="what-if"):
        RuntimeGen(plan, tmp_path / "runtime.py")
    assert not (tmp_path / "runtime.py").exists()


def test_runnable_asks_for_the_best_plan_that_runs_here(tmp_path):
    plan = composer(emulated=False).run(profile=False, runnable=True)
    assert plan.refusals == () and plan.runnable
    assert {plan.rm_device, plan.learner_device, plan.ds_device} == {CPU}
    assert "can run here" in plan.plan.decision.constraint
    assert RuntimeGen(plan, tmp_path / "runtime.py").exists()


def test_hand_built_composition_is_checked_by_runtimegen(tmp_path):
    """A Composition made without Composer.run() gets the same check before anything is written."""
    plan = composer(emulated=False).run(profile=False)
    bare = Composition(plan.plan, plan.config)
    assert not bare.checked
    with pytest.raises(ComposerError, match="fpga:0"):
        RuntimeGen(bare, tmp_path / "runtime.py")
    assert not (tmp_path / "runtime.py").exists()


@needs_fpga
def test_a_trainer_the_fpga_cannot_run_is_refused_on_it(tmp_path):
    """DDPG has no FPGA pipeline, torch does not run on an FPGA, and DDPG names no learner kernel."""
    c = composer(trainer=DDPG, env="Pendulum-v1", actor_hidden=(32, 32), critic_hidden=(32, 32))
    plan = c.run(profile=False, place={"learner": FPGA})
    assert plan.refusals
    assert any(r.startswith("learner on 'fpga:0'") and "DDPG" in r and "Fix:" in r for r in plan.refusals)
    with pytest.raises(ComposerError):
        RuntimeGen(plan, tmp_path / "runtime.py")


def test_place_names_devices_of_the_spec():
    c = composer(emulated=False)
    with pytest.raises(ComposerError, match="not a device of the spec"):
        c.run(profile=False, place={"learner": "tpu0"})
    with pytest.raises(ComposerError, match="keys among"):
        c.run(profile=False, place={"replay": CPU})


def test_runtime_refuses_a_storage_placement_no_backend_offers():
    """The runtime asks the backend of the device; the CPU-kind default is host memory, others must offer one."""
    from pearl_core.placement import make_storage
    from pearl_core.replay.storage import StorageSpec
    from pearl_core.envs import env_spaces

    spec = StorageSpec.from_spaces(*env_spaces("CartPole-v1"))
    assert make_storage(spec, 4, "cpu").device == "cpu"
    with pytest.raises(PlacementError, match="Data Storage on 'tpu:0'.*no installed backend"):
        make_storage(spec, 4, "tpu:0")


def test_cpu_backend_keeps_host_defaults():
    cpu = get_backend("cpu")
    assert cpu.torch_device_type == "cpu"
    assert cpu.make_storage(None, 1, "cpu") is None and cpu.make_transport("laq", 2, None) is None


@needs_fpga
def test_the_documented_refuse_or_run_example_runs(tmp_path, monkeypatch):
    import re

    doc = (ROOT / "docs" / "composer.md").read_text(encoding="utf-8")
    section = doc.split("## Every plan runs as composed", 1)[1].split("\n## ", 1)[0]
    listing = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    listing = listing.replace('"examples/hardware/cpu-gpu-fpga.toml"', repr(str(SPEC)))
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    exec(compile(listing, "composer.md", "exec"), namespace)
    assert (tmp_path / "runtime.py").exists() and namespace["plan"].runnable
