"""The conformance kit and a backend's ``max_fanout`` (:mod:`pearl_core.testing.conformance`): the kit runs only
the fanouts the backend declares, and its fanout strategy respects the cap.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings

from backend_registry import registry_with

import pearl_core.testing.strategies as pst
from pearl_core.backend import Availability, Backend
from pearl_core.errors import InvalidValueError
from pearl_core.testing import ReferenceSumTree, SumTreeConformance


# =========================================================================== the conformance kit
class NarrowTree(ReferenceSumTree):
    """A correct tree whose kernel only supports fanouts up to 32."""

    def __init__(self, capacity, fanout=2):
        super().__init__(capacity, fanout)
        if self.fanout > 32:
            raise InvalidValueError(f"NarrowTree supports fanouts 2..32; found {self.fanout}. Fix: use <= 32.")


class NarrowBackend(Backend):
    name = "narrow"
    device_kind = "cpu"
    max_fanout = 32

    def availability(self):
        return Availability.yes()

    def devices(self):
        return []

    def make_sum_tree(self, capacity, fanout=16, **options):
        return NarrowTree(capacity, fanout)


_KIT_MODULE = '''
from pearl_core.backend import Availability, Backend
from pearl_core.errors import InvalidValueError, PearlError
from pearl_core.testing import ReferenceSumTree, SumTreeConformance


class NarrowTree(ReferenceSumTree):
    def __init__(self, capacity, fanout=2):
        super().__init__(capacity, fanout)
        if self.fanout > 32:
            raise InvalidValueError(f"NarrowTree supports fanouts 2..32; found {self.fanout}")


class Narrow(Backend):
    name = "narrow"
    device_kind = "cpu"
    max_fanout = 32

    def availability(self):
        return Availability.yes()

    def devices(self):
        return []

    def make_sum_tree(self, capacity, fanout=16, **options):
        return NarrowTree(capacity, fanout)


class Undeclared(Narrow):
    max_fanout = None


class TestDeclared(SumTreeConformance):
    def backend_under_test(self):
        return Narrow()


class TestUndeclared(SumTreeConformance):
    def backend_under_test(self):
        return Undeclared()
'''


def _outcomes(junit: Path) -> dict[str, dict[str, int]]:
    """``{class name: {"passed": n, "failed": n}}`` from a junit XML report."""
    out: dict[str, dict[str, int]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        cls = case.get("classname", "").rsplit(".", 1)[-1]
        bad = case.find("failure") is not None or case.find("error") is not None
        counts = out.setdefault(cls, {"passed": 0, "failed": 0})
        counts["failed" if bad else "passed"] += 1
    return out


@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
def test_the_kit_runs_only_the_fanouts_the_backend_declares(tmp_path):
    """The whole suite, run by pytest: a max_fanout=32 backend passes; the same tree undeclared fails at 33+."""
    (tmp_path / "test_generated_kit.py").write_text(_KIT_MODULE, encoding="utf-8")
    junit = tmp_path / "junit.xml"
    env = {**os.environ, "PEARL_CONFORMANCE_EXAMPLES": "8", "PEARL_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                           "test_generated_kit.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    got = _outcomes(junit)
    assert got["TestDeclared"]["failed"] == 0 and got["TestDeclared"]["passed"] >= 30, proc.stdout[-3000:]
    # without the declaration the kit draws fanouts the tree refuses: proof that the first run was bounded
    assert got["TestUndeclared"]["failed"] >= 1, proc.stdout[-3000:]
    assert "supports fanouts 2..32; found" in proc.stdout


def test_the_kit_reads_max_fanout_of_the_backend_named(monkeypatch):
    reg = registry_with(NarrowBackend)
    monkeypatch.setattr("pearl_core.plugins.default_registry", lambda: reg)

    class Suite(SumTreeConformance):
        backend_name = "narrow"  # no make_tree: the kit asks get_backend("narrow")

    suite = Suite()
    assert suite.fanout_limit() == 32
    suite.test_large_batches_match_reference(4096, 64)  # 64 is capped at the declared 32
    suite.test_drift_clamps_to_last_nonzero_leaf(16)
    suite.test_duplicates_last_wins()
    assert isinstance(suite.make_tree(8, 32), NarrowTree)

    class Lower(Suite):
        max_fanout = 8  # a suite may test fewer fanouts than the backend supports

    assert Lower().fanout_limit() == 8

    class Higher(Suite):
        max_fanout = 64

    with pytest.raises(InvalidValueError, match=r"max_fanout = 64 exceeds the max_fanout = 32 .*Fix"):
        Higher().fanout_limit()


def test_a_suite_without_a_backend_keeps_its_own_bound():
    class Plain(SumTreeConformance):
        max_fanout = 5

        def make_tree(self, capacity, fanout):
            return ReferenceSumTree(capacity, fanout)

    assert Plain().fanout_limit() == 5 and Plain()._fanout(16) == 5
    assert type("Any", (Plain,), {"max_fanout": None})().fanout_limit() is None

    class Nothing(SumTreeConformance):
        pass

    with pytest.raises(NotImplementedError, match="backend_name"):
        Nothing().make_tree(4, 2)


def test_fanout_strategy_rejects_impossible_bounds_and_respects_the_cap():
    with pytest.raises(InvalidValueError, match="expected None or an int >= 2"):
        pst.fanouts(1)

    @settings(max_examples=60, deadline=None)
    @given(pst.fanouts(7))
    def check(f):
        assert 2 <= f <= 7

    check()
