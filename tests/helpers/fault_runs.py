"""Small runs for the fault tests (tests/runtime/test_host_failures.py, test_sanity.py, test_watchdog.py): a
CartPole config with a tiny replay and budget, a one-actor runtime plan, the runtimes without progress or
plots, and the checkpoint a failed run must have left (with finite weights)."""

from __future__ import annotations

from pearl_core.runtime.checkpoint import load_checkpoint
from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
from pearl_core.runtime.parallel import ParallelRuntime
from pearl_core.runtime.sanity import nonfinite_in
from pearl_core.runtime.serial import SerialRuntime

SETTINGS = [1, 2]


def config(tmp_path, env="CartPole-v1", trainer="faulty_envs:LinearQ", steps=400, stop=None, replay=None, **kw):
    return RunConfig(env_id=env, trainer=trainer, batch_size=16, learning_starts=32, train_every=16,
                     replay=replay or ReplayConfig(capacity=2048), stop=stop or StopCriteria(max_env_steps=steps),
                     log_dir=str(tmp_path / "run"), **kw)


def plan(setting: int, n_envs: int = 1) -> RuntimePlan:
    return RuntimePlan(setting=setting, n_actors=1, envs_per_actor=n_envs, insert_batch=8, queue_size=4)


def parallel(cfg, setting, **kw) -> ParallelRuntime:
    return ParallelRuntime(cfg, plan(setting), progress=False, plot=False, tensorboard=False, **kw)


def serial(cfg) -> SerialRuntime:
    return SerialRuntime(cfg, progress=False, plot=False, tensorboard=False)


def checkpoint(tmp_path):
    path = tmp_path / "run" / "checkpoint.pt"
    assert path.exists(), "no checkpoint was written before the error"
    return load_checkpoint(path, weights_only=False)


def finite_checkpoint(tmp_path):
    ck = checkpoint(tmp_path)
    assert nonfinite_in(ck.trainer_state) is None, "a NaN/inf was checkpointed"
    return ck
