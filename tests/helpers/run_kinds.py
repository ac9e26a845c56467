"""Runs of each kind for the run-files tests (tests/runtime/test_runlock.py, test_control_resume.py,
test_checkpoint_errors.py): the serial runtime and settings 1 and 2 of the parallel one, with a tiny CartPole
config, and the files a run directory holds."""

from __future__ import annotations

import csv
from pathlib import Path

from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
from pearl_core.runtime.parallel import ParallelRuntime
from pearl_core.runtime.serial import SerialRuntime

KINDS = ["serial", 1, 2]
IDS = ["serial", "setting1", "setting2"]


def plan_for(kind) -> RuntimePlan:
    return RuntimePlan(setting=1 if kind == "serial" else kind, n_actors=1, envs_per_actor=2, insert_batch=16,
                       queue_size=4)


def config(log_dir, steps=160, trainer="runtime_support:LinearQ", **kw) -> RunConfig:
    base = dict(env_id="CartPole-v1", trainer=trainer, batch_size=16, learning_starts=32, train_every=16,
                replay_ratio=0.5, replay=ReplayConfig(capacity=2048), stop=StopCriteria(max_env_steps=steps),
                log_dir=str(log_dir))
    base.update(kw)
    return RunConfig(**base)


def make(kind, cfg, **kw):
    kw = {"progress": False, "plot": False, "tensorboard": False, **kw}
    return (SerialRuntime if kind == "serial" else ParallelRuntime)(cfg, plan_for(kind), **kw)


def snapshot(d) -> dict[str, bytes]:
    d = Path(d)
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def rows(path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))[1:]


DQN = "pearl_core.algorithms:DQN"
RUNTIMES = KINDS  # the serial runtime, and ParallelRuntime with RuntimePlan(setting=1) / setting=2


def good_config(tmp_path=None, **kw) -> RunConfig:
    """A valid small DQN CartPole config (the validation tests change one field of it at a time)."""
    values = dict(env_id="CartPole-v1", trainer=DQN, trainer_kwargs={"hidden_sizes": [16]}, batch_size=16,
                  learning_starts=32, replay=ReplayConfig(capacity=512), stop=StopCriteria(max_env_steps=200),
                  log_dir=str(tmp_path / "run") if tmp_path is not None else "runs/pearl")
    values.update(kw)
    return RunConfig(**values)


def make_runtime(kind, config: RunConfig):
    opts = dict(progress=False, plot=False, tensorboard=False)
    if kind == "serial":
        return SerialRuntime(config, **opts)
    plan = RuntimePlan(setting=kind, n_actors=1, envs_per_actor=2, insert_batch=8, queue_size=4)
    return ParallelRuntime(config, plan, **opts)
