"""Every built-in trainer takes device batches and returns device TD errors (``Trainer.device_batches``).

A *device batch* is a :class:`~pearl_core.replay.Batch` of torch tensors on the trainer's device
(with ``float32`` weights there); the trainer returns its TD errors as a ``float32`` tensor on that
device and its metrics as detached 0-d tensors (or floats), without a host synchronisation. No GPU
here: the device is the CPU, where a device batch is CPU tensors, and the checks are

* equality: two identical trainers, one fed numpy batches and one the same values as tensors, give
  bit-identical TD errors and metrics at every update and end with identical networks, optimizer
  states and random streams (DQN with an MLP and with a CNN, DDPG, TD3, SAC; the torch engine, the
  DQN's numpy engine and, where pearl-cpu is built, the native CPU steps; n-step batches too);
* not vacuous: different importance weights give different TD errors and parameters, and a planted
  trainer that drops the weights on the device path fails the equality check;
* no host synchronisation in the torch path: a torch function mode records every ``.item()``,
  ``float(t)``, ``int(t)``, ``bool(t)`` (a python ``if`` on a tensor), ``.cpu()``, ``.numpy()``,
  ``.tolist()`` and ``np.asarray(t)`` while a device batch trains, and there is none (a planted one is
  caught). On a GPU these are the calls that would wait for the device.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium.spaces as spaces
import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

import pearl_core
from pearl_core.algorithms import DDPG, DQN, SAC, TD3
from pearl_core.replay.storage import TRANSITION_FIELDS, Batch
from pearl_core.trainer import Trainer, UpdateResult, is_device_batch

from cpu_backend import needs_cpu_backend

B = 16
UPDATES = 5
VEC = spaces.Box(-1.0, 1.0, (4,), np.float32)
IMAGE = spaces.Box(0, 255, (4, 16, 16), np.uint8)  # the small (MinAtar-style) encoder: one 3x3 conv
IMAGE_HWC = spaces.Box(0, 255, (10, 10, 3), np.uint8)  # channels last: transposed on the device
BOX = spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32))
BOX64 = spaces.Box(np.array([-2.0, -2.0], np.float64), np.array([2.0, 1.0], np.float64), dtype=np.float64)


def _kernels():
    return pearl_core.plugins.kernel_lookup("cpu")


@dataclass
class Case:
    """One trainer set-up: how to build it, its spaces, the engine it must end up with, n-step or not."""

    name: str
    build: Callable[[], Trainer]
    obs_space: Any
    action_space: Any
    engine: str
    n_step: bool
    marks: list = field(default_factory=list)

    def param(self):
        return pytest.param(self, id=self.name, marks=self.marks)


def _dqn(obs_space, action_space, **kw) -> Callable[[], DQN]:
    def build():
        torch.manual_seed(0)
        return DQN(obs_space, action_space, **{"hidden_sizes": (16,), "lr": 1e-2, "target_update_every": 2,
                                               "seed": 1, **kw})
    return build


def _ac(cls, action_space, **kw) -> Callable[[], Trainer]:
    def build():
        torch.manual_seed(0)
        return cls(VEC, action_space, **{"actor_hidden": (16,), "critic_hidden": (16,), "actor_lr": 1e-2,
                                         "critic_lr": 1e-2, "seed": 1, **kw})
    return build


NATIVE = [needs_cpu_backend]
CASES = [
    Case("dqn-mlp-torch-nstep", _dqn(VEC, spaces.Discrete(3, start=1), engine="torch", double_dqn=True),
         VEC, spaces.Discrete(3, start=1), "torch", True),
    Case("dqn-mlp-torch-polyak", _dqn(VEC, spaces.Discrete(3), engine="torch", dueling=True, tau=0.5),
         VEC, spaces.Discrete(3), "torch", False),
    Case("dqn-cnn-torch-nstep", _dqn(IMAGE, spaces.Discrete(4), engine="torch"), IMAGE, spaces.Discrete(4),
         "torch", True),
    Case("dqn-cnn-torch-channels-last", _dqn(IMAGE_HWC, spaces.Discrete(2), engine="torch", max_grad_norm=None),
         IMAGE_HWC, spaces.Discrete(2), "torch", False),
    Case("dqn-mlp-default-engine-nstep", _dqn(VEC, spaces.Discrete(3)), VEC, spaces.Discrete(3), "numpy", True),
    Case("dqn-mlp-native-nstep", lambda: _dqn(VEC, spaces.Discrete(3), learner_kernels=_kernels())(),
         VEC, spaces.Discrete(3), "native", True, NATIVE),
    Case("dqn-cnn-native", lambda: _dqn(IMAGE, spaces.Discrete(4), learner_kernels=_kernels())(),
         IMAGE, spaces.Discrete(4), "native", False, NATIVE),
    Case("ddpg-torch-nstep", _ac(DDPG, BOX, engine="torch", policy_delay=2, max_grad_norm=1.0),
         VEC, BOX, "torch", True),
    Case("ddpg-torch-float64-actions", _ac(DDPG, BOX64, engine="torch"), VEC, BOX64, "torch", False),
    Case("td3-torch", _ac(TD3, BOX, engine="torch"), VEC, BOX, "torch", False),
    Case("td3-torch-nstep", _ac(TD3, BOX64, engine="torch", policy_delay=1, max_grad_norm=1.0),
         VEC, BOX64, "torch", True),
    Case("sac-torch-nstep", _ac(SAC, BOX, engine="torch"), VEC, BOX, "torch", True),
    Case("sac-torch-fixed-alpha", _ac(SAC, BOX, engine="torch", ent_coef=0.2, max_grad_norm=1.0),
         VEC, BOX, "torch", False),
    Case("ddpg-native", lambda: _ac(DDPG, BOX, learner_kernels=_kernels())(), VEC, BOX, "native", True, NATIVE),
    Case("td3-native-nstep", lambda: _ac(TD3, BOX, policy_delay=1, learner_kernels=_kernels())(),
         VEC, BOX, "native", True, NATIVE),
    Case("sac-native-nstep", lambda: _ac(SAC, BOX, learner_kernels=_kernels())(), VEC, BOX, "native", True,
         NATIVE),
]
TORCH_CASES = [c for c in CASES if c.engine == "torch"]


# ------------------------------------------------------------------------------ batches
def _values(rng: np.random.Generator, space, n: int) -> np.ndarray:
    if isinstance(space, spaces.Discrete):
        return rng.integers(space.start, space.start + space.n, n).astype(np.int64)
    if np.issubdtype(space.dtype, np.integer):
        return rng.integers(0, 256, (n, *space.shape)).astype(space.dtype)
    return rng.uniform(space.low, space.high, (n, *space.shape)).astype(space.dtype)


def host_batch(rng: np.random.Generator, case: Case) -> Batch:
    """Random transitions in the stored dtypes; ``steps`` in 1..3 (some > 1) for an n-step case."""
    steps = rng.integers(1, 4, B).astype(np.int32) if case.n_step else np.ones(B, np.int32)
    if case.n_step:
        steps[0] = 3
    return Batch(_values(rng, case.obs_space, B), _values(rng, case.action_space, B),
                 rng.normal(size=B).astype(np.float32), _values(rng, case.obs_space, B), rng.random(B) < 0.3, steps)


def device_batch(batch: Batch, device: torch.device) -> Batch:
    """The same values as tensors on ``device``, in their own memory (not the numpy batch's)."""
    return Batch(*(torch.tensor(getattr(batch, name), device=device) for name in TRANSITION_FIELDS))


# ------------------------------------------------------------------------------ comparisons
def assert_same_state(a: Trainer, b: Trainer) -> None:
    """Every network, optimizer state and learner random stream of ``a`` equals ``b``'s, bit for bit."""
    va, vb = vars(a), vars(b)
    compared = 0
    for name, value in va.items():
        if isinstance(value, torch.nn.Module):
            for (k, x), (_, y) in zip(value.state_dict().items(), vb[name].state_dict().items()):
                assert torch.equal(x, y), f"{name}.{k} differs"
                compared += 1
        elif isinstance(value, torch.optim.Optimizer):
            sa, sb = value.state_dict()["state"], vb[name].state_dict()["state"]
            assert sa.keys() == sb.keys(), name
            for i in sa:
                for key in sa[i]:
                    assert torch.equal(torch.as_tensor(sa[i][key]), torch.as_tensor(sb[i][key])), \
                        f"{name} state {key} of param {i} differs"
        elif isinstance(value, torch.Generator):
            assert torch.equal(value.get_state(), vb[name].get_state()), f"{name} differs"
    assert compared > 0
    assert a.updates == b.updates  # type: ignore[attr-defined]


def check_device_result(trainer: Trainer, result: UpdateResult) -> None:
    """The contract's shape of a device batch's result."""
    td = result.td_errors
    assert isinstance(td, torch.Tensor), type(td)
    assert td.dtype == torch.float32 and td.shape == (B,) and td.device == trainer.device  # type: ignore[attr-defined]
    assert not td.requires_grad
    for name, value in result.metrics.items():
        if isinstance(value, torch.Tensor):
            assert value.dim() == 0 and not value.requires_grad, name
            assert value.device == trainer.device, name  # type: ignore[attr-defined]
        else:
            assert type(value) is float, (name, type(value))


def run_pair(host_fed: Trainer, device_fed: Trainer, case: Case, seed: int = 5) -> None:
    """``UPDATES`` updates, numpy batches to one trainer and the same values as tensors to the other;
    asserts equal TD errors and metrics at each update and equal state at the end."""
    rng = np.random.default_rng(seed)
    device = device_fed.device  # type: ignore[attr-defined]
    for i in range(UPDATES):
        batch = host_batch(rng, case)
        weights = rng.uniform(0.2, 1.0, B).astype(np.float32)
        tensors = device_batch(batch, device)
        w = torch.tensor(weights, device=device)
        before = {name: getattr(tensors, name).clone() for name in TRANSITION_FIELDS}
        a = host_fed.update_policy(batch, weights)
        b = device_fed.update_policy(tensors, w)
        assert type(a.td_errors) is np.ndarray
        assert all(isinstance(v, float) for v in a.metrics.values()), a.metrics
        check_device_result(device_fed, b)
        assert torch.equal(torch.from_numpy(a.td_errors), b.td_errors), f"update {i}: TD errors differ"
        assert a.metrics.keys() == b.metrics.keys()
        for name, value in a.metrics.items():
            assert float(b.metrics[name]) == value or (np.isnan(value) and np.isnan(float(b.metrics[name]))), \
                f"update {i}: metric {name} differs"
        for name in TRANSITION_FIELDS:  # a device batch's buffers are reused: never written by the update
            assert torch.equal(getattr(tensors, name), before[name]), name
    assert_same_state(host_fed, device_fed)


def _pair(case: Case) -> tuple[Trainer, Trainer]:
    a, b = case.build(), case.build()
    assert a.engine == b.engine == case.engine  # type: ignore[attr-defined]
    assert type(a).device_batches is True
    assert_same_state(a, b)
    return a, b


# ------------------------------------------------------------------------------ the contract
def test_device_batches_is_false_by_default_and_for_a_user_trainer():
    assert Trainer.device_batches is False

    class Mine(Trainer):  # a user's trainer that says nothing about device batches
        action_kind = "discrete"

        def get_action(self, obs, explore):
            return np.zeros(len(obs), np.int64)

        def update_policy(self, batch, weights):
            return UpdateResult(np.zeros(len(weights), np.float32))

        def get_weights(self):
            return {}

        def set_weights(self, weights):
            pass

    assert Mine.device_batches is False and Mine().device_batches is False
    for cls in (DQN, DDPG, TD3, SAC):
        assert cls.device_batches is True, cls.__name__


def test_is_device_batch_tells_tensors_from_arrays_and_trainer_module_imports_no_torch():
    case = CASES[0]
    batch = host_batch(np.random.default_rng(0), case)
    assert not is_device_batch(batch)
    assert is_device_batch(device_batch(batch, torch.device("cpu")))
    assert not is_device_batch(object())
    code = "import sys, pearl_core.trainer as t; assert 'torch' not in sys.modules; print(t.is_device_batch(1))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_a_device_batch_trains_bit_identically_to_the_host_batch(case):
    run_pair(*_pair(case), case)


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_the_equality_is_not_vacuous_other_weights_give_other_results(case):
    """A third trainer fed the same device batches with other importance weights ends elsewhere: the
    weights reach the device path, so the equality above compares something."""
    a, b = _pair(case)
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    tds_a, tds_b = [], []
    for _ in range(UPDATES):
        batch = host_batch(rng_a, case)
        assert host_batch(rng_b, case).obs.tobytes() == batch.obs.tobytes()
        weights = rng_a.uniform(0.2, 1.0, B).astype(np.float32)
        tds_a.append(torch.from_numpy(a.update_policy(batch, weights).td_errors))
        other = torch.tensor(rng_b.uniform(0.2, 1.0, B).astype(np.float32) ** 3 + 0.5)
        tds_b.append(b.update_policy(device_batch(batch, b.device), other).td_errors)
    assert not all(torch.equal(x, y) for x, y in zip(tds_a, tds_b))
    with pytest.raises(AssertionError):
        assert_same_state(a, b)


class _DropsWeightsOnTheDevice(DQN):
    """A planted bug: the device path trains with unit weights (a host-path TD error 'off by the weights')."""

    def update_policy(self, batch, weights):
        if is_device_batch(batch):
            weights = torch.ones_like(weights)
        return super().update_policy(batch, weights)


def test_a_planted_device_path_bug_fails_the_equality_check():
    case = CASES[0]
    host_fed = case.build()
    torch.manual_seed(0)
    planted = _DropsWeightsOnTheDevice(case.obs_space, case.action_space, hidden_sizes=(16,), lr=1e-2,
                                       target_update_every=2, seed=1, engine="torch", double_dqn=True)
    assert_same_state(host_fed, planted)
    with pytest.raises(AssertionError, match="differ"):
        run_pair(host_fed, planted, case)


# ------------------------------------------------------------------------------ no host synchronisation
_SYNCS = {"item", "__float__", "__int__", "__bool__", "__index__", "cpu", "numpy", "tolist", "__array__"}


class RecordSyncs(TorchFunctionMode):
    """Records every tensor call that reads values on the host (a device->host wait on a GPU)."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in _SYNCS:
            caller = sys._getframe(1)
            self.calls.append(f"{name} at {caller.f_code.co_filename}:{caller.f_lineno}")
        return func(*args, **(kwargs or {}))


def _device_updates(trainer: Trainer, case: Case, n: int = 3) -> list[str]:
    rng = np.random.default_rng(9)
    calls: list[str] = []
    for _ in range(n):  # past the first update: the optimizers' state exists, targets and delays cycle
        batch = device_batch(host_batch(rng, case), trainer.device)  # type: ignore[attr-defined]
        w = torch.tensor(rng.uniform(0.2, 1.0, B).astype(np.float32))
        with RecordSyncs() as mode:
            result = trainer.update_policy(batch, w)
        calls += mode.calls
        check_device_result(trainer, result)
    return calls


@pytest.mark.parametrize("case", [c.param() for c in TORCH_CASES])
def test_the_torch_path_never_reads_a_device_value_on_the_host(case):
    assert _device_updates(case.build(), case) == []


def test_the_sync_recorder_catches_a_planted_sync():
    class ReadsTheLoss(DDPG):
        def update_policy(self, batch, weights):
            result = super().update_policy(batch, weights)
            if result.metrics["critic_loss"] > 0:  # a python `if` on a tensor: waits for the device
                pass
            return result

    case = next(c for c in TORCH_CASES if c.name.startswith("ddpg"))
    torch.manual_seed(0)
    planted = ReadsTheLoss(VEC, BOX, actor_hidden=(16,), critic_hidden=(16,), engine="torch")
    calls = _device_updates(planted, case, n=1)
    assert calls and calls[0].startswith("__bool__ at ") and __file__ in calls[0]

