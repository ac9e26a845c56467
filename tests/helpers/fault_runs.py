"""Small runs for the fault tests (tests/runtime/test_host_failures.py, test_sanity.py, test_watchdog.py): a
CartPole config with a tiny replay and budget, a one-actor runtime plan, the runtimes without progress or
plots, and the checkpoint a failed run must have left (with finite weights); for the transport tests
(tests/runtime/test_queues_transport_faults.py), a transport that loses one message of a given kind."""

from __future__ import annotations

from pearl_core.runtime.checkpoint import load_checkpoint
from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
from pearl_core.runtime.parallel import ParallelRuntime
from pearl_core.runtime.sanity import nonfinite_in
from pearl_core.runtime.serial import SerialRuntime
from pearl_core.testing.transports import FaultyTransport

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



class DropOfKind(FaultyTransport):
    """A transport that loses the first message of type ``kind`` (a message class's name, e.g. ``"Stop"``)
    put through it: counted as sent, never delivered; otherwise PEARL's own PipeQueue. The sender's copy
    decides (the host's for the LAQ, the learner's for the LDQ); it pickles into the worker by this module's
    name (tests/helpers is on the workers' path)."""

    def __init__(self, maxsize: int, ctx=None, *, kind: str):
        super().__init__(maxsize, ctx)
        self.kind = kind

    def put(self, item, block: bool = True, timeout: float | None = None) -> None:
        message = item[1] if isinstance(item, tuple) and len(item) == 2 else item  # (sequence number, message)
        if self.drop is None and type(message).__name__ == self.kind:
            self.drop = self.puts  # this one
        super().put(item, block, timeout)


def drop_of_kind(monkeypatch, grace_s: float | None = None, **kinds: str) -> None:
    """The CPU backend's transports become :class:`DropOfKind` (``laq="Stop"``: the LAQ loses the host's
    ``Stop``); ``grace_s``: the runs' :attr:`SequencedQueue.grace_s <pearl_core.runtime.queues.SequencedQueue>`
    (a shorter wait for a lost message, to keep the tests short)."""
    from functools import partial

    from pearl_core.placement import backend_for_device
    from pearl_core.runtime import host
    from pearl_core.runtime.queues import SequencedQueue

    _, backend = backend_for_device("cpu", "learner transport")

    def make_transport(self, role, maxsize, ctx):
        return DropOfKind(maxsize, ctx, kind=kinds[role]) if role in kinds else None

    monkeypatch.setattr(type(backend), "make_transport", make_transport)
    if grace_s is not None:
        monkeypatch.setattr(host, "SequencedQueue", partial(SequencedQueue, grace_s=grace_s))
