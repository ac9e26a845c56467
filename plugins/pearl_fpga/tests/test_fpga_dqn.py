"""End to end: the core's serial runtime trains FpgaDQN with the pipelined sum tree as its RM.

Both run on the emulation device: the plan names backend "fpga" for the replay manager
and the trainer path names the plugin's DQN, exactly as a generated runtime would.
"""

import numpy as np

from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
from pearl_core.runtime.serial import SerialRuntime


def test_serial_runtime_trains_fpga_dqn_on_the_fpga_replay_manager(tmp_path):
    cfg = RunConfig(
        env_id="CartPole-v1",
        trainer="pearl_fpga.dqn:FpgaDQN",
        trainer_kwargs={"hidden_sizes": [16], "eps_decay_steps": 300, "target_update_every": 20, "dp": 2, "uf": 2},
        replay=ReplayConfig(capacity=2_000, fanout=8),
        batch_size=16,
        learning_starts=100,
        replay_ratio=0.25,
        train_every=40,
        stop=StopCriteria(eval_return=1e9, eval_every=200, eval_episodes=2, max_env_steps=600),
        log_dir=str(tmp_path / "run"),
        seed=0,
    )
    runtime = SerialRuntime(cfg, RuntimePlan(rm_backend="fpga"), progress=False, tensorboard=False)
    result = runtime.run()
    assert result.env_steps == 600 and result.stop_reason == "max_env_steps"
    assert result.updates > 100          # (600 - 100) steps * 0.25 replay ratio
    assert result.eval_history and all(np.isfinite(r) for _, r, _ in result.eval_history)
