"""SAC and TD3 through the Composer on Box2D and MuJoCo tasks (tiny budgets: the mechanism, not learning).

``make test`` installs the ``envs`` extra (``gymnasium[mujoco,box2d]``). Each test composes a plan for
this machine, writes the runtime program with :func:`RuntimeGen` and runs it in a fresh process for a
few hundred env steps, then checks what the run reports: every env step taken, updates done at the
configured replay ratio, and the networks moved from their initial weights.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pearl_core.algorithms import SAC, TD3
from pearl_core.composer import Composer, HardwareSpec, RuntimeGen
from pearl_core.runtime.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
THIS_MACHINE = ROOT / "examples" / "hardware" / "this-machine.toml"
STEPS, STARTS = 600, 200

CASES = [
    pytest.param("LunarLanderContinuous-v3", SAC, "Box2D", id="SAC-LunarLanderContinuous-v3"),
    pytest.param("Hopper-v5", TD3, "mujoco", id="TD3-Hopper-v5"),
]


@pytest.mark.slow
@pytest.mark.parametrize("env_id,trainer,module", CASES)
def test_actor_critic_trains_through_the_composer(tmp_path, env_id, trainer, module):
    pytest.importorskip(module, reason=f"{env_id} needs gymnasium's extra (make test installs '.[envs]')")
    c = Composer(HardwareSpec.load(THIS_MACHINE))
    c.set_actors(env_id, n_actors=1)
    c.set_train_function(trainer, batch_size=32, learning_starts=STARTS, replay_ratio=0.5,
                         actor_hidden=(32, 32), critic_hidden=(32, 32))
    c.set_replay("uniform", capacity=5_000)
    c.set_stop(max_env_steps=STEPS)
    c.set_run(log_dir=str(tmp_path / "run"))
    plan = c.run(profile=False)
    assert plan.refusals == () and plan.runnable
    assert {ly["group"] for ly in plan.plan.workload["layers"]} >= {"actor", "critic1", "critic2"}
    program = RuntimeGen(plan, tmp_path / "runtime.py")
    out = subprocess.run([sys.executable, str(program), "--quiet"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["env_steps"] >= STEPS and result["stop_reason"] == "max_env_steps"
    # 0.5 updates per env step once learning starts (a burst may be cut short by the stop)
    assert 0 < result["updates"] <= (result["env_steps"] - STARTS) * 0.5 + 1
    trained = load_checkpoint(result["checkpoint_path"]).trainer_state
    fresh = trainer(*_spaces(env_id), actor_hidden=(32, 32), critic_hidden=(32, 32)).state_dict()
    assert trained["updates"] == result["updates"]
    assert any(not torch.equal(fresh["critic1"][k], v) for k, v in trained["critic1"].items())


def _spaces(env_id: str):
    from pearl_core.envs import env_spaces

    return env_spaces(env_id)
