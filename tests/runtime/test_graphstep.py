"""The learner iteration as one captured launch (pearl_core.runtime.graphstep), checked without a GPU.

A CUDA graph replays the device work its capture recorded and none of the python that ran. Here the
device is the CPU and the "capture" is :class:`FrozenCapture`: it keeps the iteration function and, on
every replay, runs it with the python counters a graph would have frozen (the replay's sample count and
slot count, the trainer's update count) set to poison values, and fails if the function changed any
python state. So a graphed run that equals the eager device path update for update reads its varying
values from device tensors only, as a real capture needs. The iteration also makes no host
synchronisation (``host_syncs``), and a capture that fails leaves an eager run with the reason logged.
"""

from __future__ import annotations

import logging

import gymnasium.spaces as spaces
import numpy as np
import pytest
import torch

from pearl_core.algorithms import DQN, SAC, TD3
from pearl_core.replay import PrioritizedReplay, StorageSpec, UniformReplay
from pearl_core.replay.device import TorchStorage, TorchSumTree
from pearl_core.runtime.graphstep import graph_unsafe, host_syncs
from pearl_core.runtime.step import LearnerStep

VEC = spaces.Box(-1.0, 1.0, (4,), np.float32)
BOX = spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32))
CAPACITY, B = 128, 8
POISON = -(10 ** 9)


def _dqn():
    torch.manual_seed(0)
    return DQN(VEC, spaces.Discrete(3), hidden_sizes=(16,), lr=1e-2, target_update_every=4, seed=1, engine="torch")


def _sac():
    torch.manual_seed(0)
    return SAC(VEC, BOX, actor_hidden=(16,), critic_hidden=(16,), actor_lr=1e-2, critic_lr=1e-2, seed=1,
               engine="torch")


def _rows(rng, action_space, n):
    obs = rng.uniform(-1, 1, (n, 4)).astype(np.float32)
    if isinstance(action_space, spaces.Discrete):
        act = rng.integers(0, action_space.n, n).astype(np.int64)
    else:
        act = rng.uniform(action_space.low, action_space.high, (n, *action_space.shape)).astype(np.float32)
    return obs, act, rng.normal(size=n).astype(np.float32), obs[::-1].copy(), rng.random(n) < 0.2


def _replay(kind, action_space):
    spec = StorageSpec.from_spaces(VEC, action_space)
    if kind == "uniform":
        return UniformReplay(TorchStorage(spec, CAPACITY), rng=5)
    return PrioritizedReplay(TorchStorage(spec, CAPACITY), TorchSumTree(CAPACITY, 4), rng=5, beta_steps=20)


class FrozenCapture:
    """A CPU stand-in for ``cuda_capture``: replays run the captured function with the python a graph would
    have frozen poisoned, and fail if it changed python state."""

    def __init__(self, step):
        self.step, self.replays = step, 0

    def __call__(self, fn, device, generators):
        replay, trainer = self.step.replay, self.step.trainer

        def launch():
            storage = replay.storage
            saved = (getattr(replay, "_steps", None), storage._size, trainer.updates)
            pending = len(getattr(replay._device_state(), "pending", ()))
            if saved[0] is not None:
                replay._steps = POISON
            storage._size, trainer.updates = POISON, POISON
            try:
                fn()
                assert (getattr(replay, "_steps", None), storage._size, trainer.updates) == (
                    POISON if saved[0] is not None else None, POISON, POISON), "the iteration changed python state"
                assert len(getattr(replay._device_state(), "pending", ())) == pending
            finally:
                if saved[0] is not None:
                    replay._steps = saved[0]
                storage._size, trainer.updates = saved[1], saved[2]
            self.replays += 1

        return launch


def _run(build, kind, n_updates, *, graph=None, per_launch=1):
    """``n_updates`` updates in bursts, 12 inserts before each burst (so the slot count changes between
    launches and the ring wraps); the graphed run captures once, after the first inserts."""
    trainer = build()
    action_space = trainer.action_space if hasattr(trainer, "action_space") else None
    replay = _replay(kind, spaces.Discrete(3) if isinstance(trainer, DQN) else BOX)
    rng = np.random.default_rng(3)
    replay.add(*_rows(rng, action_space or (spaces.Discrete(3) if isinstance(trainer, DQN) else BOX), 40))
    step = LearnerStep(trainer, replay, B)
    assert step.on_device
    capture = None
    if graph:
        capture = FrozenCapture(step)
        note = step.use_graph("auto", per_launch=per_launch, capture=capture)
        assert note == "CUDA graph after 3 more eager update(s)", note
    done = step.updates
    while done < n_updates:
        replay.add(*_rows(rng, spaces.Discrete(3) if isinstance(trainer, DQN) else BOX, 12))
        burst = min(5, n_updates - done)
        step.run(burst)
        done += burst
    step.check_device()
    return trainer, replay, step, capture


def _state(trainer, replay):
    params = [p.detach().clone() for m in vars(trainer).values() if isinstance(m, torch.nn.Module)
              for p in m.parameters()]
    prio = replay.priorities(np.arange(replay.size)) if isinstance(replay, PrioritizedReplay) else None
    return params, prio


@pytest.mark.parametrize("kind", ["prioritized", "uniform"])
@pytest.mark.parametrize("build,per_launch", [(_dqn, 1), (_dqn, 2), (_sac, 1), (_sac, 3)],
                         ids=["dqn-k1", "dqn-k2", "sac-k1", "sac-k3"])
def test_a_graphed_run_trains_as_the_eager_device_path(build, per_launch, kind):
    n = 23  # not a multiple of K: the tail runs eagerly; DQN's target copy every 4 updates comes before a launch
    eager_t, eager_r, eager_s, _ = _run(build, kind, n)
    graph_t, graph_r, graph_s, capture = _run(build, kind, n, graph=True, per_launch=per_launch)
    assert graph_s.graph is not None and capture.replays >= 3
    assert graph_s.graph_note == f"CUDA graph, {graph_s.graph.per_launch} update(s) per launch"
    k = graph_s.graph.per_launch
    assert k == per_launch  # DQN: K divides its target period (4)
    assert graph_s.updates == eager_s.updates == graph_t.updates == eager_t.updates == n
    if kind == "prioritized":
        assert graph_r.steps == eager_r.steps == n
    if kind == "uniform":  # different draws (floor(u * size) against randint): the mechanism, not equality
        assert all(torch.isfinite(p).all() for p in _state(graph_t, graph_r)[0])
        return
    (ep, eprio), (gp, gprio) = _state(eager_t, eager_r), _state(graph_t, graph_r)
    for a, b in zip(ep, gp):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gprio, eprio, rtol=1e-5)
    assert graph_r.max_priority == pytest.approx(eager_r.max_priority, rel=1e-5)


def test_beta_and_the_slot_count_come_from_the_device_scalars():
    replay = _replay("prioritized", spaces.Discrete(3))
    replay.add(*_rows(np.random.default_rng(0), spaces.Discrete(3), 30))
    twin = _replay("prioritized", spaces.Discrete(3))
    twin.add(*_rows(np.random.default_rng(0), spaces.Discrete(3), 30))
    replay._steps = twin._steps = 7
    replay.graph_sync()
    drawn = replay.graph_sample(B)
    want = twin.sample_device(B)  # the eager draw at the same state: beta(7), 30 slots
    assert torch.equal(drawn.indices, want.indices)
    torch.testing.assert_close(drawn.weights, want.weights, rtol=1e-12, atol=0)
    assert replay._steps == 7  # the python count moves only in graph_advance
    replay.graph_advance(1)
    assert replay._steps == 8
    assert float(replay._graph_scalars().steps) == 8.0  # the draw moved the device count on


@pytest.mark.parametrize("build", [_dqn, _sac], ids=["dqn", "sac"])
def test_the_iteration_makes_no_host_synchronisation(build):
    _, _, step, _ = _run(build, "prioritized", 4, graph=True)
    assert host_syncs(step.graph.iteration) == []


def test_host_syncs_sees_a_python_read_of_a_tensor():
    t = torch.ones(3)
    assert host_syncs(lambda: float(t.sum())) == ["_local_scalar_dense"]
    assert host_syncs(lambda: t[t > 0]) == ["index (a boolean mask)"]
    assert host_syncs(lambda: t.nonzero()) == ["nonzero"]
    assert host_syncs(lambda: t[torch.tensor([0, 2])] * 2) == []


def test_a_failed_capture_leaves_an_eager_run_and_says_why(caplog):
    trainer = _dqn()
    replay = _replay("prioritized", spaces.Discrete(3))
    replay.add(*_rows(np.random.default_rng(0), spaces.Discrete(3), 40))
    step = LearnerStep(trainer, replay, B)

    def broken(fn, device, generators):
        raise RuntimeError("operation not permitted when stream is capturing")

    with caplog.at_level(logging.INFO, logger="pearl_core.runtime.step"):
        step.use_graph("auto", capture=broken)
        step.run(5)  # 3 eager updates warm it up, the capture fails, the other 2 run eagerly too
    assert step.graph is None
    note = step.graph_note
    assert note.startswith("eager: the CUDA graph capture failed (RuntimeError: operation not permitted")
    assert note in caplog.text
    assert step.updates == trainer.updates == 5
    step.run(4)
    assert step.updates == trainer.updates == 9


def test_what_cannot_be_graphed_is_named():
    step = LearnerStep(_dqn(), _replay("prioritized", spaces.Discrete(3)), B)
    assert graph_unsafe(step) == "the replay's device is cpu (CUDA graphs need a CUDA device)"
    assert step.use_graph("off") == "eager: CUDA graphs are off (cuda_graph='off')"
    torch.manual_seed(0)
    td3 = TD3(VEC, BOX, actor_hidden=(16,), critic_hidden=(16,), seed=1, engine="torch")
    step = LearnerStep(td3, _replay("prioritized", BOX), B)
    assert graph_unsafe(step, cuda_only=False) == ("TD3.graph_hooks() gave None (its update cannot be captured "
                                                   "as configured)")
    numpy_dqn = DQN(VEC, spaces.Discrete(3), hidden_sizes=(16,), engine="numpy")
    assert numpy_dqn.graph_hooks() is None
