"""Sum trees too large for the machine (:mod:`pearl_core.sumtree`'s size check) are refused before allocating.
"""

from __future__ import annotations

import random

import pytest

from pearl_core.errors import InvalidValueError


# ------------------------------------------------------------------ huge sum trees
def _tree_classes():
    from pearl_core.testing.reference import ReferenceSumTree

    out = [ReferenceSumTree]
    try:
        from pearl_cpu.sumtree import CpuSumTree
    except ImportError:  # pragma: no cover - the CPU plugin is installed in the dev environment
        return out
    return out + [CpuSumTree]


@pytest.mark.parametrize("cls", _tree_classes(), ids=lambda c: c.__name__)
@pytest.mark.parametrize("capacity", [10**15, 2**64, 10**30])
def test_a_sum_tree_that_cannot_fit_is_refused_before_allocating(cls, capacity):
    with pytest.raises(InvalidValueError, match=r"sum tree capacity") as info:
        cls(capacity, 16)
    assert "Fix:" in str(info.value) and "capacity" in str(info.value)
    assert not isinstance(info.value, (MemoryError, TypeError))


@pytest.mark.parametrize("cls", _tree_classes(), ids=lambda c: c.__name__)
def test_the_tree_size_is_checked_against_the_free_memory(cls, monkeypatch):
    import pearl_core.sumtree as sumtree

    monkeypatch.setattr(sumtree, "memory_available_bytes", lambda: 100 * 2**20)
    monkeypatch.setattr(sumtree, "memory_total_bytes", lambda: 200 * 2**20)
    with pytest.raises(InvalidValueError, match=r"sum tree capacity = 16,777,216 \(fanout 16\) needs [0-9.]+ GiB of "
                                                r"memory; this machine has 0\.10 GiB available \(0\.20 GiB in all\), "
                                                r"so nothing was allocated\. Fix: use a smaller replay capacity"):
        cls(2**24, 16)
    assert cls(2**16, 16).capacity == 2**16  # small trees are not even measured


def test_the_cpu_trees_size_is_known_before_it_is_built():
    cpu = pytest.importorskip("pearl_cpu.sumtree")
    rng = random.Random(0)
    cases = [(1, 2), (7, 3), (1000, 16), (10**6, 2), (37, 10**12), (2**20, 5)]
    cases += [(rng.randint(1, 100_000), rng.randint(2, 3000)) for _ in range(50)]
    for capacity, fanout in cases:
        assert cpu.native_bytes(capacity, fanout) == cpu.CpuSumTree(capacity, fanout).memory_bytes, (capacity, fanout)
    with pytest.raises(InvalidValueError, match=r"fanout = 1,099,511,627,776 is too wide for the CPU tree.*Fix"):
        cpu.CpuSumTree(2**40, 2**40)
