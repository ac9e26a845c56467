"""Data the replay and the trainers must refuse or skip (issue 43, the data-validation items).

1. A sum-tree update whose priorities are each finite but whose total overflows float64 is refused
   with InvalidValueError and changes nothing: on the native CPU tree, on every Python tree through
   the SumTree base class (no code in the backend), and in the conformance kit.
2. A TD error written back for a slot the ring overwrote since the sample is skipped: the new
   transition keeps the priority it entered with (host face and torch device face).
3. A Box whose bounds a scaling trainer cannot map [-1, 1] onto (infinite, a width that overflows
   float32, a zero width) is refused before training with a SpecError naming the env, the
   dimension, the bounds and the fix.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import pearl_core
from pearl_core.errors import InvalidValueError, SpecError
from pearl_core.replay import DataStorage, PrioritizedReplay, StorageSpec
from pearl_core.replay.device import TorchStorage, TorchSumTree
from pearl_core.sumtree import SumTree, check_capacity_fanout, check_indices, check_masses, check_priorities
from pearl_core.testing import ReferenceSumTree, SumTreeConformance

from cpu_backend import needs_cpu_backend

BIG = float(np.finfo(np.float64).max) * 0.6


# ------------------------------------------------------------------ 1. the sum tree's total
class PlainNumpyTree(SumTree):
    """A third-party tree written from the guide: it checks its input, and nothing about the total."""

    def __init__(self, capacity, fanout=2):
        self.capacity, self.fanout = check_capacity_fanout(capacity, fanout)
        self._p = np.zeros(self.capacity)

    def update(self, indices, priorities):
        idx = check_indices(indices, self.capacity)
        self._p[idx] = check_priorities(priorities, len(idx))

    def get(self, indices):
        return self._p[check_indices(indices, self.capacity)].copy()

    def total(self):
        with np.errstate(over="ignore"):
            return float(self._p.sum())

    def sample(self, masses):
        x = check_masses(masses, self.total())
        return np.minimum(np.searchsorted(np.cumsum(self._p), x, side="right"), self.capacity - 1)


TREES = [
    pytest.param(lambda: ReferenceSumTree(64, 4), id="reference"),
    pytest.param(lambda: TorchSumTree(64, 4), id="torch"),
    pytest.param(lambda: PlainNumpyTree(64, 4), id="plain-subclass"),
    pytest.param(lambda: pearl_core.get_backend("cpu").make_sum_tree(64, 4), id="cpu", marks=needs_cpu_backend),
]


@pytest.mark.parametrize("make", TREES)
def test_an_update_that_overflows_the_total_is_refused_and_changes_nothing(make):
    tree = make()
    tree.update(np.arange(64), np.arange(64) % 3 + 1.0)
    tree.update([10], [BIG])  # finite on its own
    leaves, total = tree.get(np.arange(64)).copy(), tree.total()
    for idx, prio in (([20], [BIG]), ([1, 2], [BIG, BIG]), (np.arange(64), np.full(64, BIG / 8))):
        with pytest.raises(InvalidValueError, match="overflow.*Nothing was updated"):
            tree.update(idx, prio)
        np.testing.assert_array_equal(tree.get(np.arange(64)), leaves)
        assert tree.total() == total and np.isfinite(total)
    tree.sample([0.0, total * 0.5])  # still samples
    tree.update([20, 20], [BIG, 2.0])  # last wins: small, accepted
    assert tree.get([20])[0] == 2.0


def test_the_conformance_kit_holds_a_tree_without_the_guard_to_the_rule():
    """A tree whose update bypasses the base class's guard (as a native per-instance binding does)
    fails the kit's case."""

    class Unguarded(PlainNumpyTree):
        def __init__(self, capacity, fanout=2):
            super().__init__(capacity, fanout)
            self.update = self._raw_update  # an instance attribute: the class wrapper never runs

        def _raw_update(self, indices, priorities):
            idx = check_indices(indices, self.capacity)
            self._p[idx] = check_priorities(priorities, len(idx))

    class Suite(SumTreeConformance):
        def make_tree(self, capacity, fanout):
            return Unguarded(capacity, fanout)

    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        Suite().test_update_that_overflows_the_total_changes_nothing(37)

    class Guarded(SumTreeConformance):
        def make_tree(self, capacity, fanout):
            return PlainNumpyTree(capacity, fanout)

    Guarded().test_update_that_overflows_the_total_changes_nothing(37)


# ------------------------------------------------------------------ 2. stale slots after a ring wrap
SPEC = StorageSpec((2,), np.float32, (), np.int64)


def _rows(k: int, start: float = 0.0):
    obs = np.arange(start, start + 2 * k, dtype=np.float32).reshape(k, 2)
    return obs, np.zeros(k, np.int64), np.ones(k, np.float32), obs + 1, np.zeros(k, bool)


def _full_replay(storage, tree) -> PrioritizedReplay:
    replay = PrioritizedReplay(storage, tree, alpha=1.0, eps=0.5, rng=0)
    replay.add(*_rows(8))
    return replay


def test_a_slot_overwritten_between_sample_and_write_back_keeps_its_fresh_priority():
    replay = _full_replay(DataStorage(SPEC, 8), ReferenceSumTree(8, 2))
    sampled = replay.sample(32)
    assert set(sampled.indices.tolist()) >= {0, 1}
    replay.add(*_rows(2, start=100.0))  # the ring wraps onto slots 0 and 1
    replay.update_priorities(sampled.indices, np.full(32, 49.5))  # priority |td| + eps = 50
    prio = replay.priorities(np.arange(8))
    np.testing.assert_array_equal(prio[:2], [1.0, 1.0])  # the new transitions: the running max at entry
    touched = sorted(set(sampled.indices.tolist()) - {0, 1})
    np.testing.assert_array_equal(prio[touched], 50.0)  # the others get their TD errors


def test_pipelined_batches_and_unsampled_indices():
    """Two batches in flight are matched in order; indices no sample drew are written as given."""
    replay = _full_replay(DataStorage(SPEC, 8), ReferenceSumTree(8, 2))
    first = replay.sample(64)
    replay.add(*_rows(1, start=100.0))  # overwrites slot 0 after the first sample
    second = replay.sample(64)  # may draw the new slot 0: that one is current
    replay.update_priorities(first.indices, np.full(64, 4.5))
    assert replay.priorities([0])[0] == 1.0
    replay.update_priorities(second.indices, np.full(64, 6.5))
    assert replay.priorities([0])[0] == (7.0 if 0 in second.indices else 1.0)
    replay.update_priorities([0], [8.5])  # not a sampled batch: applied
    assert replay.priorities([0])[0] == 9.0


def test_the_device_face_skips_stale_slots_too():
    replay = _full_replay(TorchStorage(SPEC, 8), TorchSumTree(8, 2))
    assert replay.device is not None
    sampled = replay.sample_device(32)
    assert {0, 1} <= set(sampled.indices.tolist())
    replay.add(*_rows(2, start=100.0))
    replay.update_priorities_device(sampled.indices, torch.full((32,), 49.5, dtype=torch.float64))
    replay.check_device_errors()
    prio = replay.priorities(np.arange(8))
    np.testing.assert_array_equal(prio[:2], [1.0, 1.0])
    touched = sorted(set(sampled.indices.tolist()) - {0, 1})
    np.testing.assert_array_equal(prio[touched], 50.0)


# ------------------------------------------------------------------ 3. action bounds a trainer cannot scale
OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
BAD_BOXES = {
    "overflowing-width": (np.array([-1.0, -3e38], np.float32), np.array([1.0, 3e38], np.float32), 1,
                          "overflows float32"),
    "zero-width": (np.array([-1.0, 0.5], np.float32), np.array([1.0, 0.5], np.float32), 1, "zero width"),
    "infinite": (np.array([-np.inf, -1.0], np.float32), np.array([1.0, 1.0], np.float32), 0, "not finite"),
}


@pytest.mark.parametrize("case", BAD_BOXES, ids=list(BAD_BOXES))
@pytest.mark.parametrize("trainer", ["TD3", "SAC", "DDPG"])
def test_unscalable_action_bounds_are_refused_before_training(case, trainer):
    from pearl_core.runtime.config import RunConfig
    from pearl_core.runtime.wiring import build_trainer

    low, high, dim, what = BAD_BOXES[case]
    box = gym.spaces.Box(low, high)
    cfg = RunConfig(env_id="MyRobot-v0", trainer=f"pearl_core.algorithms:{trainer}")
    with pytest.raises(SpecError) as info:
        build_trainer(cfg, OBS, box)
    msg = str(info.value)
    for text in ("'MyRobot-v0'", f"dimension {dim}", repr(float(low[dim])), what, "RescaleAction"):
        assert text in msg, f"{text!r} not in: {msg}"
    cls = getattr(pearl_core.algorithms, trainer)
    with pytest.raises(SpecError, match=f"dimension {dim}.*{what}"):  # built directly: the same check
        cls(OBS, box)


def test_bounds_that_scale_are_accepted():
    box = gym.spaces.Box(np.array([-1e38, 0.0], np.float32), np.array([1e38, 1e-3], np.float32))
    pearl_core.algorithms.TD3(OBS, box, actor_hidden=(8,), critic_hidden=(8,))
