"""A GPU learner's host traffic without waiting (pearl_core.runtime.devicemove), on CPU tensors.

The CUDA parts (the event, pinned host tensors, cudaHostRegister) are arguments: here a fake event whose
copy "completes" when the test says so, CPU host tensors, a fake registration. What is checked is the
logic a GPU run relies on: weights are published only once their copy is done, as they were at the
update that started it, checked finite (a NaN is a DataError naming that update); a newer copy
supersedes one in flight; a setting-1 batch moved to the device equals the slot's rows.
"""

from __future__ import annotations

import gymnasium.spaces as spaces
import numpy as np
import pytest
import torch

from pearl_core.algorithms import DQN
from pearl_core.errors import DataError
from pearl_core.replay.storage import TRANSITION_FIELDS
from pearl_core.runtime.devicemove import BatchMover, WeightCopier
from pearl_core.runtime.shm import ShmArena, SlotRing

VEC = spaces.Box(-1.0, 1.0, (4,), np.float32)


class FakeEvent:
    done = False
    made: list["FakeEvent"] = []

    def __init__(self):
        FakeEvent.made.append(self)

    def record(self):
        pass

    def query(self):
        return self.done

    def synchronize(self):
        self.done = True


def _dqn():
    torch.manual_seed(0)
    return DQN(VEC, spaces.Discrete(2), hidden_sizes=(8,), engine="torch", seed=0)


def _copier(trainer):
    FakeEvent.made = []
    return WeightCopier(trainer, asynchronous=True, event=FakeEvent, host_like=lambda t: torch.empty_like(t))


def test_weights_are_published_once_their_copy_is_done_as_they_were_at_its_update():
    trainer = _dqn()
    copier = _copier(trainer)
    assert copier.asynchronous and not copier.in_flight
    want = trainer.get_weights()
    copier.start(10)
    assert copier.in_flight and copier.poll() is None  # the copy is not done: nothing to publish yet
    FakeEvent.made[-1].done = True
    got = copier.poll()
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    assert copier.poll() is None and not copier.in_flight  # published once


def test_a_newer_copy_supersedes_one_in_flight_and_wait_finishes_it():
    trainer = _dqn()
    copier = _copier(trainer)
    copier.start(10)
    with torch.no_grad():
        for p in trainer.q_net.parameters():
            p.add_(1.0)
    copier.start(20)
    got = copier.wait()
    np.testing.assert_array_equal(got["0.bias"], trainer.get_weights()["0.bias"])


def test_nonfinite_weights_are_a_data_error_naming_the_update_and_are_not_published():
    trainer = _dqn()
    copier = _copier(trainer)
    with torch.no_grad():
        next(trainer.q_net.parameters())[0, 0] = float("nan")
    copier.start(30)
    FakeEvent.made[-1].done = True
    with pytest.raises(DataError, match="30"):
        copier.poll()
    assert not copier.in_flight


def test_without_a_gpu_the_weights_are_taken_at_once():
    trainer = _dqn()
    copier = WeightCopier(trainer)
    assert not copier.asynchronous  # the CPU: get_weights(), as before
    copier.start(5)
    got = copier.poll()
    np.testing.assert_array_equal(got["0.weight"], trainer.get_weights()["0.weight"])


class _NoTensors(DQN):
    def weight_tensors(self):
        return None


def test_a_trainer_without_weight_tensors_is_copied_synchronously():
    torch.manual_seed(0)
    trainer = _NoTensors(VEC, spaces.Discrete(2), hidden_sizes=(8,), engine="torch")
    assert not WeightCopier(trainer, asynchronous=True).asynchronous


def test_a_setting_1_slot_moves_to_the_device_as_its_rows():
    arena = ShmArena()
    try:
        layout = {"obs": ((4,), "<f4"), "action": ((), "<i8"), "reward": ((), "<f4"), "next_obs": ((4,), "<f4"),
                  "done": ((), "|b1"), "steps": ((), "<i4"), "weights": ((), "<f4"), "td": ((), "<f4")}
        ring = SlotRing.create(arena, layout, n_slots=2, rows=8, tag="test")
        slots = [ring.slot(i) for i in range(2)]
        rng = np.random.default_rng(0)
        for s in slots:
            s["obs"][:] = rng.normal(size=s["obs"].shape)
            s["reward"][:] = rng.normal(size=8)
            s["weights"][:] = rng.random(8)
            s["done"][:] = rng.random(8) < 0.5
        pinned = []
        mover = BatchMover(slots, "cpu", memory=ring.block.memory(), pin=lambda p, n: pinned.append((p, n)))
        assert mover.pinned and pinned == [ring.block.memory()] and pinned[0][1] >= 2 * 8 * 4
        batch, weights = mover.move(1)
        for name in TRANSITION_FIELDS:
            np.testing.assert_array_equal(getattr(batch, name).numpy(), slots[1][name])
        np.testing.assert_array_equal(weights.numpy(), slots[1]["weights"])
        slots[1]["reward"][:] = 7.0  # the next batch in that slot: moved again, into the same tensors
        batch2, _ = mover.move(1)
        assert batch2.reward is batch.reward and float(batch2.reward[0]) == 7.0
        refused = BatchMover(slots, "cpu", memory=(0, 1), pin=lambda p, n: "cudaHostRegister returned 1")
        assert not refused.pinned  # still moves, from unpinned memory
        np.testing.assert_array_equal(refused.move(0)[0].obs.numpy(), slots[0]["obs"])
    finally:
        arena.close()
