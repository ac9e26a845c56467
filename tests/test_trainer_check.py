"""check_trainer: every way a trainer can break the contract raises TrainerError with a useful message."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import pearl_core
from pearl_core.algorithms import DDPG, DQN
from pearl_core.errors import PearlError, TrainerError
from pearl_core.trainer import Trainer, UpdateResult
from pearl_core.trainer_check import check_trainer, smoke_batch

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
DISCRETE = gym.spaces.Discrete(2)
BOX = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


class Toy(Trainer):
    """A small, correct discrete trainer whose faults are switched on by hyper-parameters."""

    action_kind = "discrete"

    def __init__(self, observation_space, action_space, *, input_shape=None, kind=None, layers=True,
                 action_fault=None, td_fault=None, boom=False):
        if boom:
            raise ValueError("hidden size must be positive")
        self.input_shape = tuple(observation_space.shape) if input_shape is None else input_shape
        if kind is not None:
            self.action_kind = kind
        self.n = int(getattr(action_space, "n", 2))
        if layers:
            self.net = nn.Sequential(nn.Linear(int(np.prod(observation_space.shape)), 8), nn.ReLU(),
                                     nn.Linear(8, self.n))
        else:
            self.w = nn.Parameter(torch.zeros(3))
            self.holder = nn.Module()
        self.action_fault = action_fault
        self.td_fault = td_fault

    def get_action(self, obs, explore):
        n = obs.shape[0]
        a = np.zeros(n, np.int64)
        if self.action_fault == "shape":
            return a[:, None]
        if self.action_fault == "dtype":
            return a.astype(np.float32)
        if self.action_fault == "range":
            return a + self.n
        if self.action_fault == "list":
            return a.tolist()
        if self.action_fault == "raise":
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")
        return a

    def update_policy(self, batch, weights):
        b = len(batch)
        td = np.abs(batch.reward).astype(np.float32)
        if self.td_fault == "scalar":
            td = np.full(b, float(np.mean(td)), np.float32)
        elif self.td_fault == "short":
            td = td[:-1]
        elif self.td_fault == "nan":
            td[2] = np.nan
        elif self.td_fault == "tensor":
            return UpdateResult(td_errors=torch.from_numpy(td))
        elif self.td_fault == "loss":
            return float(td.mean())
        return UpdateResult(td_errors=td)

    def get_weights(self):
        return {k: v.detach().numpy().copy() for k, v in self.state_dict_modules().items()}

    def state_dict_modules(self):
        return self.net.state_dict() if hasattr(self, "net") else {}

    def set_weights(self, weights):
        if hasattr(self, "net"):
            self.net.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})


def raises(match: str, *args, **kw) -> str:
    with pytest.raises(TrainerError, match=match) as info:
        check_trainer(*args, **kw)
    return str(info.value)


def test_error_is_exported_and_a_pearl_error():
    assert pearl_core.TrainerError is TrainerError
    assert issubclass(TrainerError, PearlError)


def test_correct_trainers_pass_and_come_back_untouched():
    torch.manual_seed(0)
    checked = check_trainer(DQN, OBS, DISCRETE, seed=1)
    torch.manual_seed(0)
    fresh = DQN(OBS, DISCRETE, seed=1)
    assert checked.updates == 0 and checked.optimizer.state_dict()["state"] == {}
    for k, v in fresh.get_weights().items():
        np.testing.assert_array_equal(checked.get_weights()[k], v)
    # the smoke calls ran on a copy: the exploration stream was not advanced
    assert checked._rng.random() == fresh._rng.random()
    assert isinstance(check_trainer(DDPG, OBS, BOX), DDPG)
    assert isinstance(check_trainer(Toy, OBS, DISCRETE), Toy)


def test_smoke_calls_leave_the_callers_rng_streams_where_construction_left_them():
    torch.manual_seed(123)
    np.random.seed(7)
    DDPG(OBS, BOX)  # construction itself draws the initial weights
    expected_t, expected_np = torch.rand(1), np.random.rand()
    torch.manual_seed(123)
    np.random.seed(7)
    check_trainer(DDPG, OBS, BOX)
    assert torch.rand(1) == expected_t and np.random.rand() == expected_np


def test_not_a_class():
    raises("expected a trainer class", Toy(OBS, DISCRETE), OBS, DISCRETE)
    raises("expected a trainer class", "pearl_core.algorithms:DQN", OBS, DISCRETE)


def test_subclass_missing_abstract_methods_are_named():
    class Half(Trainer):
        action_kind = "discrete"

        def get_action(self, obs, explore):
            return np.zeros(len(obs), np.int64)

    msg = raises("does not implement", Half, OBS, DISCRETE)
    for name in ("get_weights", "set_weights", "update_policy"):
        assert name in msg
    assert "get_action" not in msg.split("does not implement")[1].split("abstract")[0]


def test_duck_typed_class_missing_methods_are_named():
    class Duck:
        action_kind = "discrete"

        def __init__(self, observation_space, action_space):
            self.input_shape = (4,)

        def get_action(self, obs, explore):
            return np.zeros(len(obs), np.int64)

    msg = raises("is not a pearl_core.Trainer subclass", Duck, OBS, DISCRETE)
    assert "update_policy" in msg and "get_weights" in msg and "set_weights" in msg
    assert "Fix:" in msg


def test_complete_duck_typed_class_is_accepted():
    class Duck:
        action_kind = "discrete"

        def __init__(self, observation_space, action_space):
            self.inner = Toy(observation_space, action_space)
            self.input_shape = self.inner.input_shape
            self.net = self.inner.net

        def get_action(self, obs, explore):
            return self.inner.get_action(obs, explore)

        def update_policy(self, batch, weights):
            return self.inner.update_policy(batch, weights)

        def get_weights(self):
            return self.inner.get_weights()

        def set_weights(self, weights):
            self.inner.set_weights(weights)

    assert isinstance(check_trainer(Duck, OBS, DISCRETE), Duck)


def test_constructor_failure_is_wrapped_with_context():
    with pytest.raises(TrainerError, match="constructing the trainer failed") as info:
        check_trainer(Toy, OBS, DISCRETE, boom=True)
    msg = str(info.value)
    assert "ValueError: hidden size must be positive" in msg and "Toy(" in msg
    assert isinstance(info.value.__cause__, ValueError)


def test_unknown_hyper_parameter_names_the_signature():
    msg = raises("constructing the trainer failed", DQN, OBS, DISCRETE, hiden_sizes=(8,))
    assert "hiden_sizes" in msg and "hidden_sizes" in msg  # the bad kwarg and the signature


def test_input_shape_mismatch_names_both_shapes():
    msg = raises("input_shape", Toy, OBS, DISCRETE, input_shape=(5,))
    assert "(5,)" in msg and "(4,)" in msg and "Fix:" in msg


def test_missing_input_shape():
    class NoShape(Toy):
        def __init__(self, observation_space, action_space):
            super().__init__(observation_space, action_space)
            del self.input_shape

    raises(r"no input_shape; expected input_shape = \(4,\)", NoShape, OBS, DISCRETE)


def test_discrete_trainer_on_box_space_and_vice_versa():
    msg = raises("'discrete' trainer but the environment's action space is Box", Toy, OBS, BOX)
    assert "continuous" in msg and "DDPG" in msg
    raises("'continuous' trainer but the environment's action space is Discrete", Toy, OBS, DISCRETE,
           kind="continuous")
    raises("'continuous' trainer", Toy, OBS, DISCRETE, kind="continuous")


def test_bad_action_kind():
    raises("action_kind = 'categorical'", Toy, OBS, DISCRETE, kind="categorical")


def test_no_layers():
    raises("no nn.Linear or nn.Conv2d", Toy, OBS, DISCRETE, layers=False)


@pytest.mark.parametrize(
    "fault, match",
    [
        ("shape", r"returned shape \(8, 1\) dtype int64; expected shape \(8,\)"),
        ("dtype", r"dtype float32; expected shape \(8,\) of int64"),
        ("range", r"outside the action space Discrete\(2\)"),
        ("list", "returned list; expected a numpy array"),
        ("raise", "raised RuntimeError: mat1 and mat2"),
    ],
)
def test_get_action_smoke_call(fault, match):
    msg = raises(match, Toy, OBS, DISCRETE, action_fault=fault)
    assert "get_action" in msg and "Fix:" in msg


def test_continuous_actions_out_of_bounds_or_wrong_shape():
    class Wild(DDPG):
        def get_action(self, obs, explore):
            return np.full((len(obs), 1), 3.0, np.float32)

    raises(r"outside the action space bounds", Wild, OBS, BOX)

    class Flat(DDPG):
        def get_action(self, obs, explore):
            return np.zeros(len(obs), np.float32)

    raises(r"returned shape \(8,\) dtype float32; expected shape \(8, 1\)", Flat, OBS, BOX)


@pytest.mark.parametrize(
    "fault, match",
    [
        ("scalar", "identical td_errors .* one scalar loss copied B times"),
        ("short", r"td_errors of shape \(7,\) .* expected shape \(8,\)"),
        ("nan", "non-finite td_errors"),
        ("tensor", "td_errors of type Tensor; expected a numpy array"),
        ("loss", "returned float; expected a pearl_core.trainer.UpdateResult"),
    ],
)
def test_update_policy_smoke_call(fault, match):
    msg = raises(match, Toy, OBS, DISCRETE, td_fault=fault)
    assert "update_policy" in msg and "Fix:" in msg


def test_smoke_batch_follows_the_spaces():
    b = smoke_batch(OBS, BOX, n=5)
    assert b.obs.shape == (5, 4) and b.action.shape == (5, 1) and b.reward.shape == (5,)
    assert b.done.dtype == np.bool_ and np.all(np.abs(b.action) <= 2.0)
    d = smoke_batch(OBS, gym.spaces.Discrete(3, start=1), n=50)
    assert d.action.dtype == np.int64 and set(np.unique(d.action)) <= {1, 2, 3}


def test_messages_quote_expected_and_found():
    msg = raises("input_shape", Toy, gym.spaces.Box(0, 1, (2, 3), np.float32), DISCRETE, input_shape=(6,))
    assert re.search(r"\(6,\).*\(2, 3\)", msg)


# --------------------------------------------------------------------------- rule 9: the device path
class DeviceToy(Toy):
    """Toy declaring device batches; ``device_fault`` breaks the device path's contract."""

    device_batches = True

    def __init__(self, observation_space, action_space, *, device_fault=None, **kw):
        super().__init__(observation_space, action_space, **kw)
        self.device_fault = device_fault
        if device_fault != "no-device":
            self.device = torch.device("cpu")

    def update_policy(self, batch, weights):
        if not isinstance(batch.reward, torch.Tensor):
            return super().update_policy(batch, weights)
        td = batch.reward.abs() * weights
        if self.device_fault == "numpy":
            return UpdateResult(td_errors=td.numpy())
        if self.device_fault == "short":
            return UpdateResult(td_errors=td[:-1])
        return UpdateResult(td_errors=td)


def test_a_trainer_declaring_device_batches_passes_when_its_device_path_keeps_the_contract():
    assert isinstance(check_trainer(DeviceToy, OBS, DISCRETE), DeviceToy)
    for cls, space, kw in ((DQN, DISCRETE, {"engine": "torch"}), (DDPG, BOX, {})):
        assert cls.device_batches and isinstance(check_trainer(cls, OBS, space, seed=1, **kw), cls)


@pytest.mark.parametrize("fault,match", [("numpy", "td_errors as ndarray; expected a tensor on cpu"),
                                         ("short", r"shape \(7,\)"),
                                         ("no-device", "declares device_batches = True but has no torch device")])
def test_a_broken_device_path_is_refused_with_the_fix(fault, match):
    msg = raises(match, DeviceToy, OBS, DISCRETE, device_fault=fault)
    assert "Fix:" in msg and "device_batches = False" in msg
