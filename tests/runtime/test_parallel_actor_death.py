"""A worker killed while it builds is reported as killed, with the signal, not as an import problem (issue 43).

Before, an actor SIGKILLed while building its environments and policy was reported with the start-up fix for a
script without ``if __name__ == "__main__":`` (the parallel runtime) or "make ... importable" (the Ray runtime).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from pearl_core.errors import ActorError
from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
from pearl_core.runtime.parallel import ParallelRuntime

from cpu_backend import needs_cpu_backend
from runtime_support import LinearQ

pytestmark = [needs_cpu_backend, pytest.mark.usefixtures("no_leaks")]


class SlowToBuildInActors(LinearQ):
    """In an actor process, says it is building (a file holding its pid) and takes a minute to build."""

    def __init__(self, observation_space, action_space, *, marker: str = "", **kw):
        super().__init__(observation_space, action_space, **kw)
        if marker and mp.current_process().name.startswith("pearl-actor"):
            Path(marker).write_text(str(os.getpid()))
            time.sleep(60)


@pytest.mark.slow
def test_an_actor_killed_while_building_is_reported_killed_with_its_signal(tmp_path):
    marker = tmp_path / "building.pid"
    cfg = RunConfig(env_id="CartPole-v1", trainer="test_parallel_actor_death:SlowToBuildInActors",
                    trainer_kwargs={"marker": str(marker)}, batch_size=16, learning_starts=32,
                    replay=ReplayConfig(capacity=1024), stop=StopCriteria(max_env_steps=256),
                    log_dir=str(tmp_path / "run"))
    plan = RuntimePlan(setting=1, n_actors=1, envs_per_actor=1, insert_batch=8, queue_size=4)
    rt = ParallelRuntime(cfg, plan, progress=False, plot=False, tensorboard=False)

    def killer():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if marker.exists() and marker.read_text():
                os.kill(int(marker.read_text()), signal.SIGKILL)
                return
            time.sleep(0.02)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    with pytest.raises(ActorError) as err:
        rt.run()
    t.join(5)
    text = str(err.value)
    assert "killed by SIGKILL while it was starting" in text and "not an import problem" in text
    assert "importable" not in text and "__main__" not in text
    assert err.value.exitcode == -signal.SIGKILL
