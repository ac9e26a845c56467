"""Tests of pearl_core.replay: storage ring buffer, uniform and prioritized replay.

The sum tree is always pearl_core.testing's ReferenceSumTree, so a failure here
is a replay bug, not a backend's.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl_core.errors import (
    EmptyTreeError,
    InvalidDTypeError,
    InvalidIndexError,
    InvalidValueError,
    SpecError,
)
from pearl_core.replay import (
    Batch,
    DataStorage,
    PrioritizedReplay,
    SampledBatch,
    StorageSpec,
    UniformReplay,
)
from pearl_core.testing.reference import ReferenceSumTree

FIELDS = ("obs", "action", "reward", "next_obs", "done")
SPEC = StorageSpec(obs_shape=(3,), obs_dtype=np.float32, action_shape=(), action_dtype=np.int16)


def rows(start: int, n: int) -> dict[str, np.ndarray]:
    """``n`` transitions whose every field encodes the global row id ``start + k``."""
    ids = np.arange(start, start + n)
    return {
        "obs": np.repeat(ids[:, None], 3, axis=1).astype(np.float32),
        "action": ids.astype(np.int16),
        "reward": ids.astype(np.float32),
        "next_obs": np.repeat(ids[:, None] + 0.5, 3, axis=1).astype(np.float32),
        "done": ids % 2 == 1,
    }


def snapshot(storage: DataStorage) -> dict:
    state = {name: storage.field(name).copy() for name in FIELDS}
    state["size"], state["cursor"] = storage.size, storage.cursor
    return state


def assert_unchanged(storage: DataStorage, before: dict) -> None:
    after = snapshot(storage)
    assert (after["size"], after["cursor"]) == (before["size"], before["cursor"])
    for name in FIELDS:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)


def assert_batch_is_rows(batch: Batch, ids) -> None:
    expected = rows(0, int(max(ids)) + 1)
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(batch, name), expected[name][np.asarray(ids)], err_msg=name)


def make_per(capacity: int = 8, **kwargs) -> PrioritizedReplay:
    storage = DataStorage(SPEC, capacity)
    return PrioritizedReplay(storage, ReferenceSumTree(capacity, fanout=2), **kwargs)


# --- StorageSpec -------------------------------------------------------------------------------


def test_spec_from_cartpole_box_obs_discrete_action():
    env = gym.make("CartPole-v1")
    try:
        spec = StorageSpec.from_spaces(env.observation_space, env.action_space)
    finally:
        env.close()
    assert spec == StorageSpec((4,), np.float32, (), np.int64)


def test_spec_from_pendulum_box_action_and_real_rollout_round_trips():
    env = gym.make("Pendulum-v1")
    try:
        spec = StorageSpec.from_spaces(env.observation_space, env.action_space)
        assert spec == StorageSpec((3,), np.float32, (1,), np.float32)
        env.action_space.seed(0)
        obs, _ = env.reset(seed=0)
        steps = []
        for _ in range(5):
            action = env.action_space.sample()
            next_obs, reward, terminated, truncated, _ = env.step(action)
            steps.append((obs, action, reward, next_obs, terminated or truncated))
            obs = next_obs
    finally:
        env.close()
    storage = DataStorage(spec, 4)
    cols = [np.stack([s[k] for s in steps]) for k in range(5)]
    slots = storage.add(*cols)  # 5 rows into 4 slots: the first is dropped
    np.testing.assert_array_equal(slots, [1, 2, 3, 0])
    batch = storage.gather(slots)
    np.testing.assert_array_equal(batch.obs, cols[0][1:])
    np.testing.assert_array_equal(batch.action, cols[1][1:])
    np.testing.assert_array_equal(batch.reward, cols[2][1:].astype(np.float32))
    assert batch.action.dtype == np.float32 and batch.reward.dtype == np.float32


@pytest.mark.parametrize(
    "space",
    [gym.spaces.MultiDiscrete([2, 3]), gym.spaces.Dict({"a": gym.spaces.Discrete(2)}), gym.spaces.MultiBinary(4)],
)
def test_spec_from_unsupported_space_names_it(space):
    with pytest.raises(SpecError, match=type(space).__name__):
        StorageSpec.from_spaces(space, gym.spaces.Discrete(2))
    with pytest.raises(SpecError, match="action_space"):
        StorageSpec.from_spaces(gym.spaces.Discrete(2), space)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"obs_dtype": object},
        {"obs_dtype": np.complex64},
        {"action_dtype": "U3"},
        {"obs_shape": (-1,)},
        {"action_shape": ("a",)},
    ],
)
def test_spec_rejects_bad_fields(kwargs):
    base = {"obs_shape": (3,), "obs_dtype": np.float32, "action_shape": (), "action_dtype": np.int64}
    with pytest.raises(SpecError):
        StorageSpec(**{**base, **kwargs})


def test_storage_rejects_bad_construction():
    with pytest.raises(InvalidValueError, match="capacity"):
        DataStorage(SPEC, 0)
    with pytest.raises(InvalidDTypeError, match="capacity"):
        DataStorage(SPEC, 2.5)
    with pytest.raises(SpecError):
        DataStorage({"obs_shape": (3,)}, 4)


# --- DataStorage ring buffer ------------------------------------------------------------------


def test_layout_dtypes_and_initial_state():
    storage = DataStorage(SPEC, 5)
    assert (storage.size, len(storage), storage.capacity, storage.cursor) == (0, 0, 5, 0)
    assert storage.field("obs").shape == (5, 3) and storage.field("obs").dtype == np.float32
    assert storage.field("action").dtype == np.int16
    assert storage.field("reward").dtype == np.float32 and storage.field("done").dtype == np.bool_
    with pytest.raises(ValueError):
        storage.field("obs")[0, 0] = 1.0  # views are read-only


def test_add_wraps_when_batch_exceeds_space_left():
    storage = DataStorage(SPEC, 5)
    np.testing.assert_array_equal(storage.add(**rows(0, 3)), [0, 1, 2])
    slots = storage.add(**rows(3, 4))  # 2 slots left, 4 rows: wraps to 0 and 1
    assert slots.dtype == np.int64
    np.testing.assert_array_equal(slots, [3, 4, 0, 1])
    assert (storage.size, storage.cursor) == (5, 2)
    # slot s holds the newest row id with id % 5 == s
    assert_batch_is_rows(storage.gather(np.arange(5)), [5, 6, 2, 3, 4])


def test_add_more_than_capacity_keeps_the_last_capacity_rows():
    storage = DataStorage(SPEC, 4)
    storage.add(**rows(0, 1))
    slots = storage.add(**rows(1, 10))  # rows 1..10; only 7..10 survive
    np.testing.assert_array_equal(slots, [3, 0, 1, 2])
    assert (storage.size, storage.cursor) == (4, 3)
    assert_batch_is_rows(storage.gather(slots), [7, 8, 9, 10])


def test_add_empty_batch_is_a_no_op():
    storage = DataStorage(SPEC, 4)
    storage.add(**rows(0, 2))
    before = snapshot(storage)
    assert storage.add(**rows(2, 0)).shape == (0,)
    assert_unchanged(storage, before)


def test_gather_copies_and_keeps_order_and_repeats():
    storage = DataStorage(SPEC, 6)
    storage.add(**rows(0, 6))
    batch = storage.gather([4, 0, 4])
    assert_batch_is_rows(batch, [4, 0, 4])
    assert len(batch) == 3
    storage.add(**rows(6, 6))
    assert_batch_is_rows(batch, [4, 0, 4])  # a batch is a copy, not a view


def test_add_casts_safe_dtypes():
    storage = DataStorage(SPEC, 4)
    storage.add(
        obs=np.ones((2, 3), np.float64),
        action=[1, 2],
        reward=[0.5, 1.5],
        next_obs=np.ones((2, 3), np.int64),
        done=np.array([0, 1]),
    )
    batch = storage.gather([0, 1])
    np.testing.assert_array_equal(batch.done, [False, True])
    np.testing.assert_array_equal(batch.action, [1, 2])
    # NaN observations are stored as given; only rewards must be finite.
    storage.add(np.full((1, 3), np.nan), [0], [0.0], np.zeros((1, 3)), [False])
    assert np.isnan(storage.gather([2]).obs).all()


@given(
    capacity=st.integers(1, 8),
    batches=st.lists(st.integers(0, 12), max_size=8),
)
@settings(max_examples=60, deadline=None)
def test_ring_buffer_matches_a_list_model(capacity, batches):
    storage = DataStorage(SPEC, capacity)
    total = 0
    for n in batches:
        slots = storage.add(**rows(total, n))
        kept = np.arange(max(total, total + n - capacity), total + n)
        np.testing.assert_array_equal(slots, kept % capacity)
        total += n
    assert storage.size == min(total, capacity)
    assert storage.cursor == total % capacity
    if storage.size:
        newest = [max(g for g in range(total) if g % capacity == s) for s in range(storage.size)]
        assert_batch_is_rows(storage.gather(np.arange(storage.size)), newest)


BAD_ADDS = [
    ("obs", {"obs": np.zeros(3)}, InvalidValueError),  # unbatched
    ("obs", {"obs": np.zeros((2, 4))}, InvalidValueError),
    ("obs", {"obs": [[1.0, 2.0, 3.0], [1.0, 2.0]]}, InvalidValueError),  # ragged
    ("obs", {"obs": np.full((2, 3), "a")}, InvalidDTypeError),
    ("obs", {"obs": np.zeros((2, 3), np.complex64)}, InvalidDTypeError),
    ("obs", {"obs": np.full((2, 3), 1e300)}, InvalidValueError),  # overflows float32
    ("next_obs", {"next_obs": np.zeros((2, 3, 1))}, InvalidValueError),
    ("action", {"action": np.array([0.5, 1.5])}, InvalidDTypeError),
    ("action", {"action": np.array([0, 40_000])}, InvalidValueError),  # outside int16
    ("action", {"action": np.zeros((2, 1), np.int16)}, InvalidValueError),
    ("reward", {"reward": np.ones((2, 1))}, InvalidValueError),
    ("reward", {"reward": np.array([0.0, np.nan])}, InvalidValueError),
    ("reward", {"reward": np.array([np.inf, 0.0])}, InvalidValueError),
    ("reward", {"reward": np.array([0.0, 1e39])}, InvalidValueError),  # inf as float32
    ("done", {"done": np.array([0.0, 1.0])}, InvalidDTypeError),
    ("done", {"done": np.array([0, 2])}, InvalidValueError),
    ("done", {"done": np.zeros(3, bool)}, InvalidValueError),  # batch length mismatch
]


@pytest.mark.parametrize(("field", "override", "error"), BAD_ADDS)
def test_bad_add_raises_named_error_and_changes_nothing(field, override, error):
    storage = DataStorage(SPEC, 6)
    storage.add(**rows(0, 5))  # 1 slot left, so a write would also wrap
    before = snapshot(storage)
    with pytest.raises(error, match=field):
        storage.add(**{**rows(100, 2), **override})
    assert_unchanged(storage, before)


def test_bad_add_through_a_replay_changes_neither_storage_nor_tree():
    replay = make_per(6)
    replay.add(**rows(0, 5))
    replay.update_priorities([0, 1], [3.0, 0.1])
    before, prio = snapshot(replay.storage), replay.tree.priorities.copy()
    with pytest.raises(InvalidValueError, match="reward"):
        replay.add(**{**rows(5, 2), "reward": [1.0, np.nan]})
    assert_unchanged(replay.storage, before)
    np.testing.assert_array_equal(replay.tree.priorities, prio)


@pytest.mark.parametrize(
    ("indices", "error"),
    [([0, 3], InvalidIndexError), ([-1], InvalidIndexError), ([0.0, 1.0], InvalidDTypeError),
     ([[0]], InvalidValueError)],
)
def test_gather_rejects_unfilled_or_malformed_indices(indices, error):
    storage = DataStorage(SPEC, 6)
    storage.add(**rows(0, 3))
    with pytest.raises(error, match="indices"):
        storage.gather(indices)


# --- UniformReplay ----------------------------------------------------------------------------


def test_uniform_samples_only_filled_slots():
    replay = UniformReplay(DataStorage(SPEC, 100), rng=0)
    replay.add(**rows(0, 7))
    sampled = replay.sample(2000)
    assert isinstance(sampled, SampledBatch) and len(sampled) == 2000
    assert sampled.indices.dtype == np.int64 and sampled.weights.dtype == np.float32
    assert set(sampled.indices.tolist()) == set(range(7))
    np.testing.assert_array_equal(sampled.weights, np.ones(2000, np.float32))
    assert_batch_is_rows(sampled.batch, sampled.indices)


def test_uniform_errors_and_validated_no_op_update():
    replay = UniformReplay(DataStorage(SPEC, 10), rng=0)
    with pytest.raises(EmptyTreeError, match="empty"):
        replay.sample(4)
    replay.add(**rows(0, 4))
    with pytest.raises(InvalidValueError, match="batch_size"):
        replay.sample(0)
    with pytest.raises(InvalidDTypeError, match="batch_size"):
        replay.sample(2.0)
    before = snapshot(replay.storage)
    replay.update_priorities([0, 3], [0.5, -1.0])
    with pytest.raises(InvalidIndexError):
        replay.update_priorities([4], [0.5])
    with pytest.raises(InvalidValueError, match="td_errors"):
        replay.update_priorities([0], [np.nan])
    with pytest.raises(InvalidValueError, match="td_errors"):
        replay.update_priorities([0, 1], [0.5])
    assert_unchanged(replay.storage, before)


# --- PrioritizedReplay: construction ----------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"alpha": -0.1}, InvalidValueError),
        ({"beta": 1.5}, InvalidValueError),
        ({"beta_final": -1.0}, InvalidValueError),
        ({"eps": 0.0}, InvalidValueError),
        ({"eps": float("nan")}, InvalidValueError),
        ({"beta_steps": -1}, InvalidValueError),
        ({"beta_steps": 1.5}, InvalidDTypeError),
        ({"alpha": "big"}, InvalidDTypeError),
    ],
)
def test_per_rejects_bad_hyperparameters(kwargs, error):
    with pytest.raises(error):
        make_per(4, **kwargs)


def test_per_requires_a_sum_tree_of_the_storage_capacity():
    storage = DataStorage(SPEC, 8)
    with pytest.raises(SpecError, match="capacity"):
        PrioritizedReplay(storage, ReferenceSumTree(16))
    with pytest.raises(SpecError, match="SumTree"):
        PrioritizedReplay(storage, object())


def test_per_adopts_a_prefilled_storage_and_rejects_stray_priorities():
    storage = DataStorage(SPEC, 8)
    storage.add(**rows(0, 3))
    replay = PrioritizedReplay(storage, ReferenceSumTree(8))
    np.testing.assert_array_equal(replay.tree.priorities, [1, 1, 1, 0, 0, 0, 0, 0])
    stray = ReferenceSumTree(8)
    stray.update([5], [2.0])
    with pytest.raises(SpecError, match="slot 5"):
        PrioritizedReplay(storage, stray)


# --- PrioritizedReplay: priorities --------------------------------------------------------------


def test_new_items_enter_at_running_max_priority():
    replay = make_per(8, alpha=0.5, eps=1e-3)
    replay.add(**rows(0, 3))
    np.testing.assert_array_equal(replay.tree.priorities, [1, 1, 1, 0, 0, 0, 0, 0])
    assert replay.max_priority == 1.0
    replay.update_priorities([1, 2], [8.0, 0.01])
    top = (8.0 + 1e-3) ** 0.5
    assert replay.max_priority == top
    replay.add(**rows(3, 2))
    np.testing.assert_array_equal(replay.tree.get([3, 4]), [top, top])
    replay.update_priorities([0], [0.0])  # a smaller priority never lowers the max
    assert replay.max_priority == top


def test_slots_overwritten_by_wraparound_reset_to_running_max():
    replay = make_per(4, alpha=1.0, eps=1e-6)
    replay.add(**rows(0, 4))
    replay.update_priorities([0, 1, 2, 3], [0.1, 0.2, 0.3, 5.0])
    top = 5.0 + 1e-6
    replay.add(**rows(4, 2))  # overwrites slots 0 and 1
    np.testing.assert_array_equal(replay.tree.priorities, [top, top, 0.3 + 1e-6, top])
    slots = replay.add(**rows(6, 9))  # more than capacity: every slot reset
    np.testing.assert_array_equal(np.sort(slots), np.arange(4))
    np.testing.assert_array_equal(replay.tree.priorities, [top] * 4)


def test_update_priorities_sets_exact_formula_with_last_duplicate_winning():
    alpha, eps = 0.7, 1e-3
    replay = make_per(16, alpha=alpha, eps=eps)
    replay.add(**rows(0, 16))
    td = np.random.default_rng(1).normal(size=16).astype(np.float32)
    idx = np.arange(16)[::-1]
    replay.update_priorities(idx, td)
    expected = (np.abs(td.astype(np.float64)) + eps) ** alpha
    np.testing.assert_array_equal(replay.tree.get(idx), expected)
    np.testing.assert_array_equal(replay.priorities(idx), expected)
    replay.update_priorities([3, 3], [1.0, 2.0])
    assert replay.tree.get([3])[0] == (2.0 + eps) ** alpha


@pytest.mark.parametrize(
    ("indices", "td", "error"),
    [
        ([0, 5], [1.0, 1.0], InvalidIndexError),  # slot 5 not filled yet
        ([0, 1], [1.0, np.nan], InvalidValueError),
        ([0, 1], [np.inf, 1.0], InvalidValueError),
        ([0, 1], [1.0], InvalidValueError),
        ([0, 1], [[1.0, 1.0]], InvalidValueError),
        ([0.0, 1.0], [1.0, 1.0], InvalidDTypeError),
        ([0, 1], ["a", "b"], InvalidDTypeError),
        ([0, 1], [1e300, 1.0], InvalidValueError),  # priority overflows with alpha = 2
    ],
)
def test_bad_update_raises_and_leaves_tree_and_max_unchanged(indices, td, error):
    replay = make_per(8, alpha=2.0)
    replay.add(**rows(0, 5))
    replay.update_priorities([2], [3.0])
    prio, top = replay.tree.priorities.copy(), replay.max_priority
    with pytest.raises(error):
        replay.update_priorities(indices, td)
    np.testing.assert_array_equal(replay.tree.priorities, prio)
    assert replay.max_priority == top


@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(0, 9)),
            st.tuples(st.just("update"), st.lists(st.floats(-50, 50), min_size=1, max_size=6)),
        ),
        max_size=12,
    )
)
@settings(max_examples=60, deadline=None)
def test_per_priorities_match_a_model(ops):
    alpha, eps, cap = 0.6, 1e-6, 6
    replay = make_per(cap, alpha=alpha, eps=eps)
    model, top, total = np.zeros(cap), 1.0, 0
    for op, arg in ops:
        if op == "add":
            slots = replay.add(**rows(total, arg))
            model[slots] = top
            total += arg
        elif replay.size:
            idx = np.arange(len(arg)) % replay.size
            replay.update_priorities(idx, arg)
            prio = (np.abs(np.asarray(arg)) + eps) ** alpha
            for i, p in zip(idx, prio):
                model[i] = p
            top = max(top, prio.max())
        np.testing.assert_array_equal(replay.tree.priorities, model)
        assert replay.max_priority == top


# --- PrioritizedReplay: sampling ---------------------------------------------------------------


class RecordingTree(ReferenceSumTree):
    """Reference tree that remembers the masses it was asked to sample."""

    def sample(self, masses):
        self.last_masses = np.asarray(masses, dtype=np.float64).copy()
        return super().sample(masses)


def test_sample_errors_before_items_and_on_bad_batch_size():
    replay = make_per(4, rng=0)
    with pytest.raises(EmptyTreeError, match="empty"):
        replay.sample(2)
    replay.add(**rows(0, 2))
    with pytest.raises(InvalidValueError, match="batch_size"):
        replay.sample(0)
    with pytest.raises(InvalidValueError, match="batch_size"):
        replay.sample(-3)
    with pytest.raises(InvalidDTypeError, match="batch_size"):
        replay.sample(True)
    assert replay.steps == 0  # failed calls do not anneal beta


def test_importance_weights_match_hand_formula():
    replay = make_per(10, alpha=0.6, beta=0.4, beta_final=1.0, beta_steps=4, stratified=False, rng=3)
    replay.add(**rows(0, 6))  # N = 6 < capacity
    replay.update_priorities(np.arange(6), [0.1, 0.5, 1.0, 2.0, 4.0, 8.0])
    p = replay.tree.priorities
    for step in range(6):
        beta = replay.beta
        sampled = replay.sample(32)
        P = p[sampled.indices] / p.sum()
        w = (6 * P) ** -beta
        assert sampled.weights.dtype == np.float32
        np.testing.assert_allclose(sampled.weights, w / w.max(), rtol=1e-6)
        assert sampled.weights.max() == 1.0
        assert_batch_is_rows(sampled.batch, sampled.indices)
        assert replay.steps == step + 1


def test_beta_annealing_endpoints():
    replay = make_per(4, beta=0.4, beta_final=1.0, beta_steps=10, rng=0)
    replay.add(**rows(0, 4))
    assert replay.beta == 0.4 and replay.steps == 0
    for _ in range(5):
        replay.sample(2)
    assert replay.beta == pytest.approx(0.7)
    for _ in range(5):
        replay.sample(2)
    assert replay.steps == 10 and replay.beta == 1.0
    for _ in range(15):
        replay.sample(2)
    assert replay.beta == 1.0
    immediate = make_per(4, beta=0.2, beta_final=0.9, beta_steps=0)
    assert immediate.beta == 0.9


def test_stratified_masses_fall_one_per_segment():
    tree = RecordingTree(8)
    replay = PrioritizedReplay(DataStorage(SPEC, 8), tree, rng=5)
    replay.add(**rows(0, 8))
    replay.update_priorities(np.arange(8), np.linspace(0.0, 3.0, 8))
    for batch_size in (1, 3, 5, 16):
        replay.sample(batch_size)
        seg = tree.total() / batch_size
        k = np.arange(batch_size)
        assert np.all(tree.last_masses >= k * seg) and np.all(tree.last_masses <= (k + 1) * seg)


def test_stratified_with_equal_priorities_returns_each_slot_once():
    replay = make_per(5, rng=11)
    replay.add(**rows(0, 5))
    for _ in range(20):
        np.testing.assert_array_equal(replay.sample(5).indices, np.arange(5))


# Chi-square with 7 degrees of freedom exceeds 60 with probability about 1e-9, and the
# seeds are fixed: the PER checks cannot flake. A uniform sampler scores in the thousands.
CHI2_LIMIT = 60.0


def chi_square(indices: np.ndarray, probs: np.ndarray) -> float:
    counts = np.bincount(indices, minlength=probs.size)
    expected = probs * indices.size
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("stratified", [True, False])
def test_sample_frequencies_follow_priorities(stratified):
    replay = make_per(8, alpha=1.0, eps=1e-6, stratified=stratified, rng=2024)
    replay.add(**rows(0, 8))
    replay.update_priorities(np.arange(8), np.arange(1.0, 9.0))
    probs = replay.tree.priorities / replay.tree.total()
    drawn = np.concatenate([replay.sample(50).indices for _ in range(400)])
    assert chi_square(drawn, probs) < CHI2_LIMIT

    # Negative control: uniform draws from the same storage must fail the same test.
    uniform = UniformReplay(replay.storage, rng=2024)
    drawn = np.concatenate([uniform.sample(50).indices for _ in range(400)])
    assert chi_square(drawn, probs) > 10 * CHI2_LIMIT
