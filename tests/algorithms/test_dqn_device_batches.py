"""DQN's device batches: ``device_batch_slot`` (the learner step's hook) and torch-tensor batches.

On the CPU nothing changes: a CPU DQN asks no storage for device destinations
(its batches stay numpy arrays), and a batch of CPU torch tensors trains it
bit for bit as the same values in numpy arrays do. The hook's other branch
(networks off the CPU) is driven here with torch's ``meta`` device, which
needs no GPU; the CUDA storage that answers it is tested in
``plugins/pearl_cuda`` (fake cupy, and on a GPU in ``test_cuda_gpu.py``).
"""

from __future__ import annotations

import copy

import gymnasium.spaces as spaces
import numpy as np
import pytest
import torch

from pearl_core.algorithms.dqn import DQN
from pearl_core.errors import InvalidValueError
from pearl_core.replay import UniformReplay
from pearl_core.replay.storage import TRANSITION_FIELDS, Batch, DataStorage, StorageSpec
from pearl_core.runtime.step import LearnerStep


class _OffersDestinations(DataStorage):
    """A host storage that also offers device destinations; it records what it was asked."""

    def __init__(self, *args, answer="tensors", **kwargs):
        super().__init__(*args, **kwargs)
        self.asked: list[tuple[int, torch.device]] = []
        self.answer = answer

    def device_out(self, batch_size, torch_device):
        self.asked.append((batch_size, torch_device))
        if self.answer is None:
            return None
        fields = TRANSITION_FIELDS if self.answer == "tensors" else TRANSITION_FIELDS[:-1]
        return {name: torch.empty(batch_size, device=torch_device) for name in fields}


def _dqn(obs_dtype=np.float32, action_start=0, **kw):
    torch.manual_seed(0)
    obs_space = spaces.Box(0, 255, (6,), obs_dtype) if obs_dtype == np.uint8 else spaces.Box(-5, 5, (6,), obs_dtype)
    return DQN(obs_space, spaces.Discrete(3, start=action_start), hidden_sizes=(16, 16), lr=1e-2,
               target_update_every=2, seed=1, **kw)


def _numpy_batch(rng, n, obs_dtype, action_start):
    if obs_dtype == np.uint8:
        obs, nxt = (rng.integers(0, 256, (n, 6)).astype(np.uint8) for _ in range(2))
    else:
        obs, nxt = (rng.normal(size=(n, 6)).astype(obs_dtype) for _ in range(2))
    act = rng.integers(action_start, action_start + 3, n).astype(np.int64)
    return Batch(obs, act, rng.normal(size=n).astype(np.float32), nxt, rng.random(n) < 0.3)


def _spec(obs_dtype=np.float32):
    return StorageSpec((6,), obs_dtype, (), np.int64)


@pytest.mark.parametrize("engine", ["torch", "numpy", "auto"])
def test_a_cpu_dqn_asks_for_no_device_slot(engine):
    dqn = _dqn(engine=engine)
    storage = _OffersDestinations(_spec(), 16)
    assert dqn.device_batch_slot(storage, 8) is None
    assert storage.asked == []  # not even asked: a CPU learner keeps host batches
    assert dqn.device_batch_slot(DataStorage(_spec(), 16), 8) is None
    step = LearnerStep(dqn, UniformReplay(storage, rng=0), 8)
    assert step.device_slot is None  # the runtime's learner step samples into host arrays, as before


def test_an_off_cpu_dqn_takes_the_storages_destinations():
    """torch's meta device stands for a GPU here (no GPU needed): the hook's off-CPU branch."""
    dqn = _dqn(device="meta")
    assert dqn.engine == "torch"
    storage = _OffersDestinations(_spec(), 16)
    slot = dqn.device_batch_slot(storage, 8)
    assert storage.asked == [(8, torch.device("meta"))]
    assert set(slot) == {*TRANSITION_FIELDS, "weights"}
    assert all(slot[name].device.type == "meta" for name in TRANSITION_FIELDS)
    w = slot["weights"]
    assert type(w) is np.ndarray and w.dtype == np.float32 and w.shape == (8,)  # replay writes weights on the host
    step = LearnerStep(dqn, UniformReplay(storage, rng=0), 8)
    assert step.device_slot is not None and storage.asked[-1] == (8, torch.device("meta"))
    # a storage without the method, or one that declines, gives host batches
    assert dqn.device_batch_slot(DataStorage(_spec(), 16), 8) is None
    assert dqn.device_batch_slot(_OffersDestinations(_spec(), 16, answer=None), 8) is None
    with pytest.raises(InvalidValueError, match=rf"returned no \['{TRANSITION_FIELDS[-1]}'\]"):
        dqn.device_batch_slot(_OffersDestinations(_spec(), 16, answer="incomplete"), 8)


def _as_tensors(batch: Batch) -> Batch:
    return Batch(*(torch.tensor(getattr(batch, name)) for name in TRANSITION_FIELDS))  # own memory, CPU


def _assert_same_state(a: DQN, b: DQN):
    for net in ("q_net", "target_net"):
        for (k, x), (_, y) in zip(getattr(a, net).state_dict().items(), getattr(b, net).state_dict().items()):
            assert torch.equal(x, y), f"{net}.{k} differs"
    sa, sb = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    for i in sa:
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(sa[i][key], sb[i][key]), f"Adam {key} of param {i} differs"
    assert a.updates == b.updates


@pytest.mark.parametrize("obs_dtype,action_start,kw", [
    (np.float32, 0, {}),
    (np.float32, 2, {"double_dqn": True, "tau": 0.5}),
    (np.uint8, 1, {"max_grad_norm": None}),
    (np.float64, 0, {"double_dqn": True}),
])
def test_a_tensor_batch_trains_bit_identically_to_the_numpy_batch(obs_dtype, action_start, kw):
    numpy_fed = _dqn(obs_dtype, action_start, engine="torch", **kw)
    tensor_fed = copy.deepcopy(numpy_fed)
    rng = np.random.default_rng(5)
    for _ in range(7):  # across several target updates (every 2)
        batch = _numpy_batch(rng, 32, obs_dtype, action_start)
        weights = rng.uniform(0.2, 1.0, 32).astype(np.float32)
        tensors = _as_tensors(batch)
        before = {name: getattr(tensors, name).clone() for name in TRANSITION_FIELDS}
        a = numpy_fed.update_policy(batch, weights)
        b = tensor_fed.update_policy(tensors, weights)
        # a device batch's TD errors and metrics stay tensors on the trainer's device (Trainer.device_batches)
        assert isinstance(b.td_errors, torch.Tensor) and b.td_errors.device == tensor_fed.device
        assert b.td_errors.dtype == torch.from_numpy(a.td_errors).dtype
        np.testing.assert_array_equal(b.td_errors.numpy(), a.td_errors)
        assert {k: float(v) for k, v in b.metrics.items()} == a.metrics  # loss and mean Q, exactly
        for name in TRANSITION_FIELDS:  # a reused device slot must not be written by the update
            assert torch.equal(getattr(tensors, name), before[name]), name
        _assert_same_state(numpy_fed, tensor_fed)


def test_tensor_fields_already_on_the_device_are_used_without_a_copy():
    dqn = _dqn(engine="torch")
    t = torch.zeros(8, dtype=torch.float32)
    assert dqn._batch_field(t, torch.float32, np.float32) is t
    obs = torch.zeros((8, 6), dtype=torch.float32)
    assert dqn._batch_input(obs).data_ptr() == obs.data_ptr()
    done = torch.zeros(8, dtype=torch.bool)
    assert dqn._batch_field(done, torch.bool, np.bool_) is done


@pytest.mark.parametrize("engine", ["numpy", "auto"])
def test_the_numpy_engines_are_unchanged_and_read_cpu_tensors_too(engine):
    """The numpy/native engines run on the CPU only and get host batches there (the slot is None); their
    numpy path is the code it was, and a CPU tensor batch reads as the same values."""
    numpy_fed = _dqn(engine=engine)
    tensor_fed = copy.deepcopy(numpy_fed)
    assert numpy_fed.engine in ("numpy", "native")
    rng = np.random.default_rng(6)
    for _ in range(3):
        batch = _numpy_batch(rng, 16, np.float32, 0)
        weights = rng.uniform(0.2, 1.0, 16).astype(np.float32)
        a, b = numpy_fed.update_policy(batch, weights), tensor_fed.update_policy(_as_tensors(batch), weights)
        assert isinstance(b.td_errors, torch.Tensor)  # a device batch (on the CPU): a tensor viewing the engine's td
        np.testing.assert_array_equal(b.td_errors.numpy(), a.td_errors)
        assert b.metrics == a.metrics
