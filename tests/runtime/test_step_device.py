"""The learner step's device path (``LearnerStep.on_device``): sample -> update -> priorities as tensor
operations on the trainer's device, with the replay's device face (pearl_core.replay.device).

No GPU here: the device is the CPU. A run through the device path (a replay over ``TorchStorage`` +
``TorchSumTree``, a trainer that declares ``device_batches``) equals the same run through the host path
(``DataStorage`` + the reference tree, numpy batches), update for update, on the same uniform draws:
the same sampled slots, TD errors, parameters and priorities (within one float64 rounding: numpy's and
torch's ``pow`` may differ in the last bit). Trainers without the capability keep the host path over
the same device replay; a NaN TD error on the device path is reported at the next check, naming the
updates, with the replay's priorities untouched by it.
"""

from __future__ import annotations

import copy

import gymnasium.spaces as spaces
import numpy as np
import pytest
import torch

from pearl_core.algorithms import DQN, SAC, TD3
from pearl_core.errors import InvalidValueError
from pearl_core.replay import DataStorage, PrioritizedReplay, StorageSpec, UniformReplay
from pearl_core.replay.device import TorchStorage, TorchSumTree
from pearl_core.runtime.step import LearnerStep
from pearl_core.testing import ReferenceSumTree
from pearl_core.trainer import Trainer, UpdateResult

VEC = spaces.Box(-1.0, 1.0, (4,), np.float32)
IMAGE = spaces.Box(0, 255, (4, 16, 16), np.uint8)
BOX = spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32))
CAPACITY, B = 256, 16


def _dqn(obs_space):
    def build():
        torch.manual_seed(0)
        return DQN(obs_space, spaces.Discrete(3), hidden_sizes=(16,), lr=1e-2, target_update_every=2, seed=1,
                   engine="torch")
    return build, obs_space, spaces.Discrete(3)


def _ac(cls):
    def build():
        torch.manual_seed(0)
        return cls(VEC, BOX, actor_hidden=(16,), critic_hidden=(16,), actor_lr=1e-2, critic_lr=1e-2, seed=1,
                   engine="torch")
    return build, VEC, BOX


CASES = {"dqn-mlp": _dqn(VEC), "dqn-cnn": _dqn(IMAGE), "td3": _ac(TD3), "sac": _ac(SAC)}


def _rows(rng, obs_space, action_space, n):
    def values(space):
        if isinstance(space, spaces.Discrete):
            return rng.integers(0, space.n, n).astype(np.int64)
        if np.issubdtype(space.dtype, np.integer):
            return rng.integers(0, 256, (n, *space.shape)).astype(space.dtype)
        return rng.uniform(space.low, space.high, (n, *space.shape)).astype(space.dtype)

    return values(obs_space), values(action_space), rng.normal(size=n).astype(np.float32), values(obs_space), \
        rng.random(n) < 0.2


def _replays(kind, spec):
    if kind == "uniform":
        return UniformReplay(DataStorage(spec, CAPACITY), rng=5), UniformReplay(TorchStorage(spec, CAPACITY), rng=5)
    host = PrioritizedReplay(DataStorage(spec, CAPACITY), ReferenceSumTree(CAPACITY, 4), rng=5, beta_steps=20)
    dev = PrioritizedReplay(TorchStorage(spec, CAPACITY), TorchSumTree(CAPACITY, 4), rng=5, beta_steps=20)
    draws = np.random.default_rng(5)  # the host replay's draws, for the device face
    dev._device_uniforms = lambda n: torch.from_numpy(draws.random(n))
    return host, dev


@pytest.mark.parametrize("kind", ["prioritized", "uniform"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_device_path_trains_as_the_host_path_does(case, kind):
    build, obs_space, action_space = CASES[case]
    trainer = build()
    twin = copy.deepcopy(trainer)
    spec = StorageSpec.from_spaces(obs_space, action_space)
    host_replay, dev_replay = _replays(kind, spec)
    if kind == "uniform":  # the device face draws its slots with torch: hand the host the same ones
        host_replay._rng = _SlotsFrom(dev_replay)
    host, dev = LearnerStep(trainer, host_replay, B), LearnerStep(twin, dev_replay, B, check_every=3)
    assert (host.on_device, dev.on_device) == (False, True)
    rng = np.random.default_rng(0)
    for it in range(8):
        rows = _rows(rng, obs_space, action_space, 40)
        host_replay.add(*rows)
        dev_replay.add(*rows)
        sampled_h, sampled_d = host.sample(), dev.sample()
        assert isinstance(sampled_d.indices, torch.Tensor) and isinstance(sampled_d.batch.obs, torch.Tensor)
        np.testing.assert_array_equal(sampled_d.indices.numpy(), sampled_h.indices, err_msg=f"update {it}")
        td_h = host.train(sampled_h.batch, sampled_h.weights)
        td_d = dev.train(sampled_d.batch, sampled_d.weights)
        assert isinstance(td_d, torch.Tensor), "the device path keeps the TD errors a tensor"
        np.testing.assert_allclose(td_d.double().numpy(), td_h, rtol=2e-7, atol=1e-7, err_msg=f"update {it}")
        host.apply(sampled_h.indices, td_h)
        dev.apply(sampled_d.indices, td_d)
    assert host.updates == dev.updates == 8
    for (name, p), q in zip(trainer.get_weights().items(), twin.get_weights().values()):
        np.testing.assert_allclose(q, p, rtol=1e-5, atol=1e-6, err_msg=name)
    assert dev.metrics().keys() == host.metrics().keys()
    dev.checked_weights()  # reads the replay's flags back: nothing to report
    if kind == "prioritized":
        slots = np.arange(host_replay.size)
        np.testing.assert_allclose(dev_replay.priorities(slots), host_replay.priorities(slots), rtol=1e-6)


class _SlotsFrom:
    """A numpy-generator stand-in whose ``integers`` returns the slots the device replay drew last."""

    def __init__(self, dev_replay):
        self.dev = dev_replay
        self.real = dev_replay._rng

    def integers(self, low, high, size, dtype):
        dev = self.dev
        gen = dev._device_state().gen
        state = gen.get_state()
        slots = torch.randint(low, high, (size,), generator=gen, device=dev.device).numpy().astype(dtype)
        gen.set_state(state)  # the device replay draws the very same slots next
        return slots


class _NoDeviceBatches(Trainer):
    """A user trainer without the capability: numpy in, numpy out."""

    input_shape = (4,)
    action_kind = "discrete"

    def __init__(self, observation_space=None, action_space=None):
        self.seen: list[type] = []

    def get_action(self, obs, explore):
        return np.zeros(len(obs), np.int64)

    def update_policy(self, batch, weights):
        self.seen.append(type(batch.obs))
        return UpdateResult(td_errors=np.abs(batch.reward.astype(np.float64)), metrics={"loss": 1.0})

    def get_weights(self):
        return {}

    def set_weights(self, weights):
        pass


def test_a_trainer_without_device_batches_keeps_the_host_path_over_a_device_replay():
    spec = StorageSpec((4,), np.float32, (), np.int64)
    replay = PrioritizedReplay(TorchStorage(spec, 64), TorchSumTree(64, 4), rng=1)
    replay.add(*_rows(np.random.default_rng(1), VEC, spaces.Discrete(3), 30))
    trainer = _NoDeviceBatches()
    step = LearnerStep(trainer, replay, 8)
    assert replay.device == torch.device("cpu") and not step.on_device
    for _ in range(3):
        step.step()
    assert trainer.seen == [np.ndarray] * 3 and step.updates == 3
    assert step.metrics() == {"loss": 1.0}


class _NanOnThird(DQN):
    def update_policy(self, batch, weights):
        result = super().update_policy(batch, weights)
        if self.updates == 3:
            return UpdateResult(result.td_errors * float("nan"), result.metrics)
        return result


def _nan_on_third(check_every: int) -> tuple[LearnerStep, PrioritizedReplay]:
    """A device-path step whose trainer returns NaN TD errors at its third update."""
    torch.manual_seed(0)
    dqn = _NanOnThird(VEC, spaces.Discrete(3), hidden_sizes=(16,), seed=1, engine="torch")
    spec = StorageSpec.from_spaces(VEC, spaces.Discrete(3))
    replay = PrioritizedReplay(TorchStorage(spec, 64), TorchSumTree(64, 4), rng=1)
    replay.add(*_rows(np.random.default_rng(1), VEC, spaces.Discrete(3), 40))
    step = LearnerStep(dqn, replay, 8, check_every=check_every)
    assert step.on_device
    return step, replay


def test_a_nan_td_error_on_the_device_path_is_reported_at_the_check_and_writes_no_priority():
    step, replay = _nan_on_third(check_every=100)
    step.step()
    step.step()
    before = replay.priorities(np.arange(40))
    step.step()  # the NaN: flagged on the device, nothing read back yet
    np.testing.assert_array_equal(replay.priorities(np.arange(40)), before)
    with pytest.raises(InvalidValueError, match=r"updates 1-3"):
        step.checked_weights()


def test_the_check_runs_every_check_every_updates():
    step, _ = _nan_on_third(check_every=2)
    step.step()
    step.step()  # checked here: clean
    with pytest.raises(InvalidValueError, match=r"updates 3-4"):
        step.step()
        step.step()  # the 4th update reaches the check, which reports the 3rd's NaN
