"""pearl_core.plugin_guard: a plugin tree that breaks the contract is named as the plugin's fault, on the replay's
paths and the conformance kit's; plugin cost models run under a deadline."""

from __future__ import annotations

import threading
import time
import types

import numpy as np
import pytest

from pearl_core.backend import Availability, Backend
from pearl_core.errors import InvalidValueError, PluginContractError, PluginTimeoutError
from pearl_core.hookspecs import hookimpl
from pearl_core.plugins import PluginRegistry
from pearl_core.replay import DataStorage, PrioritizedReplay, StorageSpec
from pearl_core.testing import ReferenceSumTree, SumTreeConformance

OWNER = "backend 'broken' (plugin 'brk', broken-dist 0.2)"


class ListSample(ReferenceSumTree):
    def sample(self, masses):
        return list(super().sample(masses))


class FloatSample(ReferenceSumTree):
    def sample(self, masses):
        return super().sample(masses).astype(np.float64)


class ShortSample(ReferenceSumTree):
    def sample(self, masses):
        return super().sample(masses)[:-1]


class OutOfRange(ReferenceSumTree):
    def sample(self, masses):
        return super().sample(masses) + self.capacity


class ZeroLeaf(ReferenceSumTree):
    def sample(self, masses):
        out = super().sample(masses)
        out[0] = int(np.flatnonzero(self.priorities == 0)[0])
        return out


class RaisesInSample(ReferenceSumTree):
    def sample(self, masses):
        raise RuntimeError("device lost")


class RefusesMasses(ReferenceSumTree):
    def sample(self, masses):
        raise InvalidValueError("masses[0] is past the total")


class RaisesInUpdate(ReferenceSumTree):
    def update(self, indices, priorities):
        raise KeyError("oops")


class NanTotal(ReferenceSumTree):
    def total(self):
        return float("nan")


class WrongTotal(ReferenceSumTree):  # reports twice the sum of its leaves
    def total(self):
        return 2 * super().total()


class NanGet(ReferenceSumTree):
    def get(self, indices):
        out = super().get(indices)
        out[:] = np.nan
        return out


class UpdateReturns(ReferenceSumTree):
    def update(self, indices, priorities):
        super().update(indices, priorities)
        return "ok"


TREES = [(ListSample, "sample", "returned list"), (FloatSample, "sample", "dtype float64"),
         (ShortSample, "sample", "shape (7,)"), (OutOfRange, "sample", "indices in [0, 16)"),
         (ZeroLeaf, "sample", "whose priority is 0.0"), (RaisesInSample, "sample", "RuntimeError: device lost"),
         (RefusesMasses, "sample", "for masses the contract accepts"),
         (RaisesInUpdate, "update", "KeyError"), (NanTotal, "total", "returned nan"),
         (WrongTotal, "total", "while its leaves sum to"), (NanGet, "get", "returned priority nan"),
         (UpdateReturns, "update", "returned 'ok'")]


def registry_with(tree_cls=ReferenceSumTree, make=None, **methods):
    class Broken(Backend):
        name = "broken"
        device_kind = "brk"

        def availability(self):
            return Availability.yes()

        def devices(self):
            return []

        def make_sum_tree(self, capacity, fanout=16, **options):
            return make(capacity, fanout) if make else tree_cls(capacity, fanout)

    for key, fn in methods.items():
        setattr(Broken, key, fn)

    @hookimpl
    def pearl_register_backends(register):
        register(Broken)

    reg = PluginRegistry(autoload=False)
    reg.register_plugin(types.SimpleNamespace(pearl_register_backends=pearl_register_backends, PEARL_PLUGIN_API="1.1"),
                        name="brk", distribution="broken-dist", version="0.2")
    return reg


def assert_named(exc: BaseException, method: str, found: str) -> None:
    text = str(exc)
    assert isinstance(exc, PluginContractError), f"{type(exc).__name__}: {exc}"
    assert OWNER in text and f"broke the SumTree contract in {method}" in text and found in text, text
    assert "Fix:" in text


def run_replay(reg: PluginRegistry) -> None:
    """What the replay manager does with a plugin's tree: add, sample, update priorities."""
    spec = StorageSpec(obs_shape=(2,), obs_dtype=np.float32, action_shape=(), action_dtype=np.int64)
    replay = PrioritizedReplay(DataStorage(spec, 16), reg.get_backend("broken").make_sum_tree(16, 4), alpha=1.0,
                               rng=0)
    n = 12
    replay.add(np.zeros((n, 2), np.float32), np.zeros(n, np.int64), np.ones(n, np.float32),
               np.zeros((n, 2), np.float32), np.zeros(n, np.bool_))
    for _ in range(3):
        batch = replay.sample(8)
        replay.update_priorities(batch.indices, np.arange(1.0, 9.0))


@pytest.mark.parametrize("tree_cls,method,found", TREES, ids=lambda v: getattr(v, "__name__", None))
def test_a_contract_breaking_tree_is_named_on_the_replay_path(tree_cls, method, found):
    with pytest.raises(PluginContractError) as info:
        run_replay(registry_with(tree_cls))
    assert_named(info.value, method, found)


def test_a_conforming_tree_passes_the_same_path():
    run_replay(registry_with(ReferenceSumTree))


KIT = [(ListSample, "sample", "returned list"), (FloatSample, "sample", "dtype float64"),
       (ShortSample, "sample", "shape (3,)"), (OutOfRange, "sample", "indices in [0, 1)"),
       (RaisesInSample, "sample", "RuntimeError"), (RaisesInUpdate, "update", "KeyError"),
       (NanTotal, "total", "returned nan"), (NanGet, "get", "returned priority nan"),
       (UpdateReturns, "update", "returned 'ok'")]


@pytest.mark.parametrize("tree_cls,method,found", KIT, ids=lambda v: getattr(v, "__name__", None))
def test_a_contract_breaking_tree_is_named_on_the_conformance_kit_path(tree_cls, method, found):
    reg = registry_with(tree_cls)

    class Suite(SumTreeConformance):
        def backend_under_test(self):
            return reg.get_backend("broken")

    with pytest.raises(PluginContractError) as info:
        Suite().test_single_leaf()
    assert_named(info.value, method, found)


@pytest.mark.parametrize("make,found", [
    (lambda c, f: np.zeros(c), "returned ndarray"),
    (lambda c, f: ReferenceSumTree(c + 1, f), "capacity 17 and fanout 4"),
    (lambda c, f: {}["missing"], "KeyError"),
])
def test_make_sum_tree_that_breaks_the_contract_is_named(make, found):
    with pytest.raises(PluginContractError) as info:
        registry_with(make=make).get_backend("broken").make_sum_tree(16, 4)
    assert_named(info.value, "make_sum_tree", found)


def test_errors_the_contract_allows_pass_unchanged():
    tree = registry_with(ReferenceSumTree).get_backend("broken").make_sum_tree(16, 4)
    with pytest.raises(InvalidValueError, match=r"priorities\[0\]") as info:
        tree.update([0], [-1.0])
    assert not isinstance(info.value, PluginContractError)
    with pytest.raises(InvalidValueError, match="outside"):
        tree.update([0], [1.0]) or tree.sample([5.0])


# --------------------------------------------------------------------------- deadlines


def test_a_cost_model_that_never_returns_is_cut_at_its_deadline(monkeypatch):
    release = threading.Event()

    def analytic_cells(self, device, workload):
        release.wait(30)  # "never" returns within the test

    monkeypatch.setenv("PEARL_PLUGIN_DEADLINE_S", "0.3")
    backend = registry_with(analytic_cells=analytic_cells).get_backend("broken")
    try:
        start = time.monotonic()
        with pytest.raises(PluginTimeoutError, match=r"analytic_cells did not return within its deadline of 0\.3 s"
                           ) as info:
            backend.analytic_cells(None, None)
        assert time.monotonic() - start < 2
        assert OWNER in str(info.value) and "PEARL_PLUGIN_DEADLINE_S" in str(info.value)
        start = time.monotonic()  # not called again: a second plan does not wait again
        with pytest.raises(PluginTimeoutError, match="not called again"):
            backend.analytic_cells(None, None)
        assert time.monotonic() - start < 0.2
    finally:
        release.set()


def test_a_measurement_that_never_returns_is_cut_at_its_deadline(monkeypatch):
    release = threading.Event()

    def measure_primitive(self, device, workload, request):
        release.wait(30)  # "never" returns within the test

    monkeypatch.setenv("PEARL_PLUGIN_DEADLINE_S", "0.3")
    backend = registry_with(measure_primitive=measure_primitive).get_backend("broken")
    try:
        start = time.monotonic()
        with pytest.raises(PluginTimeoutError, match=r"measure_primitive did not return within its deadline"):
            backend.measure_primitive(None, None, None)
        assert time.monotonic() - start < 2
    finally:
        release.set()


def test_a_cost_model_within_its_deadline_returns_and_raises_as_before(monkeypatch):
    def analytic_cells(self, device, workload):
        if device == "bad":
            raise ValueError("model bug")
        return ("row", device)

    monkeypatch.setenv("PEARL_PLUGIN_DEADLINE_S", "5")
    backend = registry_with(analytic_cells=analytic_cells).get_backend("broken")
    assert backend.analytic_cells("d0", None) == ("row", "d0")
    with pytest.raises(ValueError, match="model bug"):
        backend.analytic_cells("bad", None)


def test_a_bad_deadline_setting_is_named(monkeypatch):
    monkeypatch.setenv("PEARL_PLUGIN_DEADLINE_S", "-1")
    backend = registry_with(analytic_cells=lambda self, d, w: None).get_backend("broken")
    with pytest.raises(PluginContractError, match="PEARL_PLUGIN_DEADLINE_S = '-1' is invalid"):
        backend.analytic_cells(None, None)


def test_planning_with_a_hung_cost_model_ends_and_names_plugin_and_hook(monkeypatch):
    """`pearl plan`'s path (make_plan): the hung model's device is left out, with the reason; the plan is made."""
    from pearl_core.composer import DeviceSpec, HardwareSpec, LearnerLayer, LinkSpec, Workload, make_plan

    release = threading.Event()
    monkeypatch.setenv("PEARL_PLUGIN_DEADLINE_S", "0.3")
    reg = registry_with(analytic_cells=lambda self, device, workload: release.wait(30))
    spec = HardwareSpec((DeviceSpec("xeon", "cpu", 2**36, 60, 185, cores=8),
                         DeviceSpec("brk0", "brk", 2**34, 10, 50, mem_bandwidth_Bps=1e11)),
                        (LinkSpec("xeon", "xeon", 2e-6, 2e10), LinkSpec("xeon", "brk0", 1e-5, 1e10)))
    layers = (LearnerLayer("q.0", "linear", 4, 64, 256, 320, True, "q"),
              LearnerLayer("q.1", "linear", 64, 2, 128, 130, True, "q"))
    wl = Workload(batch_size=32, obs_bytes=16, action_bytes=8, n_actors=1, layers=layers, env_id="CartPole-v1")
    try:
        start = time.monotonic()
        plan = make_plan(spec, wl, registry=reg)
        assert time.monotonic() - start < 10
        assert plan.rm_device == plan.learner_device == "xeon"
        (note,) = plan.matrix.row("brk0").notes
        assert "analytic_cells did not return within its deadline" in note and "plugin 'brk'" in note
    finally:
        release.set()


def test_a_guarded_tree_stands_in_for_the_plugins_tree():
    """isinstance against the plugin's class holds, plugin settings are the plugin tree's, and it pickles."""
    import pickle

    tree = registry_with(ReferenceSumTree).get_backend("broken").make_sum_tree(16, 4)
    assert isinstance(tree, ReferenceSumTree) and OWNER in repr(tree)
    tree.update([2], [3.0])
    tree.custom_setting = 7
    assert tree.inner.custom_setting == 7 and tree.custom_setting == 7
    again = pickle.loads(pickle.dumps(tree))
    assert again.total() == 3.0 and again.owner == OWNER and isinstance(again, ReferenceSumTree)
