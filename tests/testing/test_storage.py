"""The Data Storage conformance suite of pearl_core.testing, run on the core's host DataStorage and on the
FPGA backend's FpgaStorage (on the OpenCL FPGA emulator), and shown to catch planted bugs.

The planted bugs are subclasses of the host DataStorage written into a test module of their own and run
by pytest in a subprocess, next to a bug-free control built the same way (so a failure comes from the
bug, not from the set-up); the JUnit report says which tests failed, and with what.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from pearl_core.errors import BackendUnavailableError
from pearl_core.replay.storage import DataStorage
from pearl_core.testing import StorageConformance
from pearl_core.testing.storage import SPECS


def _fpga_backend():
    from pearl_core.plugins import get_backend

    try:
        return get_backend("fpga"), None
    except BackendUnavailableError as exc:
        return None, str(exc)


FPGA, FPGA_MISSING = _fpga_backend()


class TestHostStorageConformance(StorageConformance):
    device = "cpu"

    def make_storage(self, spec, capacity):
        return DataStorage(spec, capacity)


@pytest.mark.skipif(FPGA is None, reason=f"the FPGA backend is not usable here: {FPGA_MISSING}")
class TestFpgaStorageConformance(StorageConformance):
    device = "fpga:0"

    def make_storage(self, spec, capacity):
        return FPGA.make_storage(spec, capacity, "fpga:0")


# --------------------------------------------------------------------------- planted bugs
PLANTED = '''
import numpy as np

from pearl_core.replay.storage import DataStorage
from pearl_core.testing import StorageConformance


class ControlStorage(DataStorage):
    """No bug: a subclass defined here, as the buggy ones are."""


class DropsLastWrappedRow(DataStorage):
    def store(self, slots, rows):
        if len(slots) > 1 and slots[-1] < slots[0]:  # a write that wraps past the end of the ring
            slots, rows = slots[:-1], {name: values[:-1] for name, values in rows.items()}
        super().store(slots, rows)


class TakesTheNextSlot(DataStorage):
    def gather_into(self, idx, out=None):
        return super().gather_into((idx + 1) % max(self._size, 1), out)  # off by one slot


class ReversesRows(DataStorage):
    def gather_into(self, idx, out=None):
        return super().gather_into(idx[::-1], out)  # the right rows, last first


class IgnoresOut(DataStorage):
    def gather_into(self, idx, out=None):
        return super().gather_into(idx)  # new arrays: the caller's out arrays stay as they were


class KeepsTheOldHooks(DataStorage):
    """Written against the private hooks the public contract replaced: nothing calls them."""

    def _take(self, idx, out=None):
        return super().gather_into(idx, out)


class WritesBeforeValidating(DataStorage):
    def add(self, obs, action, reward, next_obs, done, steps=None):
        try:  # the observations go in before the other fields are checked
            with np.errstate(all="ignore"):
                o = np.asarray(obs).astype(self._layout["obs"][1])
            self._arrays["obs"][(self._cursor + np.arange(len(o))) % self._capacity] = o
        except Exception:
            pass
        return super().add(obs, action, reward, next_obs, done, steps)


class WriteableField(DataStorage):
    def field(self, name):
        return np.array(super().field(name))  # a writeable copy


def suite(cls):
    class Suite(StorageConformance):
        device = "cpu"

        def make_storage(self, spec, capacity):
            return cls(spec, capacity)
    return Suite


TestControlStorage = suite(ControlStorage)
TestDropsLastWrappedRow = suite(DropsLastWrappedRow)
TestTakesTheNextSlot = suite(TakesTheNextSlot)
TestReversesRows = suite(ReversesRows)
TestIgnoresOut = suite(IgnoresOut)
TestKeepsTheOldHooks = suite(KeepsTheOldHooks)
TestWritesBeforeValidating = suite(WritesBeforeValidating)
TestWriteableField = suite(WriteableField)
'''


def _outcomes(report: str) -> dict[str, dict[str, str]]:
    """``{class: {test: "passed" | "skipped" | "failure: <message>" | "error: <message>"}}`` from a JUnit report."""
    out: dict[str, dict[str, str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        cls = case.get("classname", "").rsplit(".", 1)[-1]
        result = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                result = f"{child.tag}: {child.get('message', '')}"
            elif child.tag == "skipped":
                result = "skipped"
        out.setdefault(cls, {})[case.get("name", "")] = result
    return out


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Run the planted-bug module with pytest in a subprocess; its outcomes per class and test."""
    root = tmp_path_factory.mktemp("planted-storage")
    (root / "test_planted_storage_bugs.py").write_text(PLANTED)
    report = root / "report.xml"
    env = dict(os.environ, PEARL_CONFORMANCE_EXAMPLES="60")  # a bug shows within a few programs
    env.pop("PEARL_DISABLE_PLUGIN_AUTOLOAD", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=line", f"--junitxml={report}",
           "test_planted_storage_bugs.py"]
    out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert report.exists(), out.stdout[-3000:] + out.stderr[-2000:]
    return _outcomes(str(report)), out.stdout


def _failed(outcomes: dict[str, str]) -> dict[str, str]:
    return {name: r for name, r in outcomes.items() if not r.startswith(("passed", "skipped"))}


def _ids(test: str, *inner: str) -> set[str]:
    """The ids of ``test`` on every spec, after each of ``inner`` (an inner parametrization's ids) if given."""
    return {f"{test}[{f}-{s}]" if f else f"{test}[{s}]" for f in (inner or ("",)) for s in SPECS}


@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
def test_the_planted_control_passes(planted):
    outcomes, stdout = planted
    control = outcomes.get("TestControlStorage")
    assert control, f"TestControlStorage did not run:\n{stdout[-3000:]}"
    assert not _failed(control), f"TestControlStorage failed without a bug: {_failed(control)}"
    assert len(control) == len(outcomes["TestDropsLastWrappedRow"]), "the suites ran different tests"


WRAPS, PROGRAMS = _ids("test_fixed_sequence_wraps_around"), _ids("test_random_programs_match_the_host_storage")
OUT_TESTS = _ids("test_gather_into_fills_the_callers_out_arrays", "contiguous", "strided")
REPLAYS = _ids("test_replay_samples_like_over_the_host_storage", "uniform", "prioritized")
REFUSED_ADDS = _ids("test_bad_input_raises_like_the_host_and_changes_nothing", "nan-reward", "inf-reward",
                    "lengths-differ", "done-not-a-flag", "complex-reward")


@pytest.mark.parametrize("cls,caught_by,says", [
    ("TestDropsLastWrappedRow", WRAPS | PROGRAMS | REPLAYS
     | _ids("test_store_writes_the_given_slots_and_leaves_size_and_cursor"), "differ"),
    ("TestTakesTheNextSlot", WRAPS | PROGRAMS | _ids("test_large_batches_match_the_host_storage") | OUT_TESTS,
     "differ"),
    ("TestReversesRows", WRAPS | _ids("test_large_batches_match_the_host_storage") | OUT_TESTS | REPLAYS, "differ"),
    ("TestKeepsTheOldHooks", {"test_implements_the_public_contract"}, "_take -> gather_into"),
    ("TestIgnoresOut", OUT_TESTS | WRAPS, "out["),
    ("TestWritesBeforeValidating", REFUSED_ADDS, "changed field('obs')"),
    ("TestWriteableField", _ids("test_field_is_a_read_only_host_array") | WRAPS, "writeable"),
])
@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
def test_the_storage_suite_catches_a_planted_bug(planted, cls, caught_by, says):
    outcomes, stdout = planted
    failed = _failed(outcomes.get(cls, {}))
    assert caught_by <= set(failed), (f"{cls}: expected {sorted(caught_by - set(failed))} to fail too; failed: "
                                      f"{sorted(failed)}\n{stdout[-2000:]}")
    assert all(r.startswith("failure") for r in failed.values()), f"{cls}: a test crashed instead of failing: {failed}"
    assert all(says in failed[name] for name in caught_by), (
        f"{cls}: a failure does not say {says!r}: { {n: failed[n][:300] for n in caught_by if says not in failed[n]} }")
