"""The learner-kernel and transport conformance suites of pearl_core.testing, run on the core's own
implementations (PipeQueue, the CPU backend's native dqn_mlp step), and shown to catch planted bugs.

The planted bugs are written into a test module of their own and run by pytest in a subprocess, next
to bug-free controls built the same way (so a failure comes from the bug, not from the set-up); the
JUnit report says which tests failed, and with what.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from pearl_core.errors import BackendUnavailableError
from pearl_core.runtime.queues import PipeQueue
from pearl_core.testing import DQNKernelConformance, TransportConformance
from pearl_core.testing.learner_kernels import CASES


def _cpu_kernel():
    from pearl_core.plugins import get_backend

    try:
        return get_backend("cpu").learner_kernel("dqn_mlp")
    except BackendUnavailableError:
        return None


CPU_KERNEL = _cpu_kernel()
needs_cpu_kernel = pytest.mark.skipif(
    CPU_KERNEL is None, reason="the CPU backend's native dqn_mlp kernel is not installed here (pip install "
                               "./plugins/pearl_cpu)")


class TestPipeQueueConformance(TransportConformance):
    def make_queue(self, maxsize, ctx):
        return PipeQueue(maxsize, ctx)


@needs_cpu_kernel
class TestCpuKernelConformance(DQNKernelConformance):
    def kernel_factory(self):
        return CPU_KERNEL


# --------------------------------------------------------------------------- planted bugs
PLANTED = '''
import dataclasses
import queue

from pearl_core.plugins import get_backend
from pearl_core.runtime.queues import PipeQueue
from pearl_core.testing import DQNKernelConformance, TransportConformance

LOST = 500  # the message the buggy queues lose or duplicate (the suite sends 1000)


class ControlQueue(PipeQueue):
    """No bug: a subclass defined here, as the buggy ones are (it must work across processes too)."""


class DroppingQueue(PipeQueue):
    def put(self, item, block=True, timeout=None):
        if isinstance(item, tuple) and item and item[0] == LOST:
            return  # silently lost
        super().put(item, block, timeout)


class DuplicatingQueue(PipeQueue):
    def put(self, item, block=True, timeout=None):
        super().put(item, block, timeout)
        if isinstance(item, tuple) and item and item[0] == LOST:
            super().put(item, block, timeout)  # sent twice


class UnboundedQueue(PipeQueue):
    def put(self, item, block=True, timeout=None):
        self._writer.send(item)  # never waits for room: maxsize is ignored

    def get(self, block=True, timeout=None):
        with self._rlock:
            if not self._reader.poll(timeout if block else 0):
                raise queue.Empty
            return self._reader.recv()


def queue_suite(cls):
    class Suite(TransportConformance):
        def make_queue(self, maxsize, ctx):
            return cls(maxsize, ctx)
    return Suite


TestControlQueue = queue_suite(ControlQueue)
TestDroppingQueue = queue_suite(DroppingQueue)
TestDuplicatingQueue = queue_suite(DuplicatingQueue)
TestUnboundedQueue = queue_suite(UnboundedQueue)

def tweaked(from_step=1, **changes):
    """The CPU backend's kernel with some fields of its step record changed on the way in, from the
    kernel object's ``from_step``-th step on."""
    real = get_backend("cpu").learner_kernel("dqn_mlp")

    class Kernel:
        def __init__(self, *arrays):
            self.inner = real(*arrays)
            self.batch = self.inner.batch
            self.steps = 0

        def step(self, args):
            self.steps += 1
            if self.steps >= from_step:
                args = dataclasses.replace(args, **{name: change(getattr(args, name))
                                                    for name, change in changes.items()})
            return self.inner.step(args)

    return Kernel


def tuple_result():
    """The CPU backend's kernel returning the old ABI's tuple instead of the result record."""
    real = get_backend("cpu").learner_kernel("dqn_mlp")

    class Kernel:
        def __init__(self, *arrays):
            self.inner = real(*arrays)
            self.batch = self.inner.batch

        def step(self, args):
            r = self.inner.step(args)
            return r.td, r.loss, r.q_mean

    return Kernel


def kernel_suite(factory):
    class Suite(DQNKernelConformance):
        def kernel_factory(self):
            return factory
    return Suite


TestControlKernel = kernel_suite(tweaked())
TestWrongGammaKernel = kernel_suite(tweaked(gamma=lambda g: g * 0.99))
TestNoClippingKernel = kernel_suite(tweaked(max_grad_norm=lambda m: 0.0))
TestNoDoubleDQNKernel = kernel_suite(tweaked(double_dqn=lambda d: False))
TestThirdStepKernel = kernel_suite(tweaked(from_step=3, gamma=lambda g: g * 0.9))
TestTupleResultKernel = kernel_suite(tuple_result())
'''


def _outcomes(report: str) -> dict[str, dict[str, str]]:
    """``{class: {test name: "passed" | "skipped" | "failed: <message>" | "error: <message>"}}`` from a JUnit report."""
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
    root = tmp_path_factory.mktemp("planted")
    (root / "test_planted_bugs.py").write_text(PLANTED)
    report = root / "report.xml"
    env = dict(os.environ)
    env.pop("PEARL_DISABLE_PLUGIN_AUTOLOAD", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
           "test_planted_bugs.py"]
    out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert report.exists(), out.stdout[-3000:] + out.stderr[-2000:]
    return _outcomes(str(report)), out.stdout


def _failed(outcomes: dict[str, str]) -> dict[str, str]:
    return {name: r for name, r in outcomes.items() if not r.startswith(("passed", "skipped"))}


@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
def test_the_planted_controls_pass(planted):
    outcomes, stdout = planted
    for cls in ("TestControlQueue", "TestControlKernel"):
        if cls == "TestControlKernel" and CPU_KERNEL is None:
            continue
        assert outcomes.get(cls), f"{cls} did not run:\n{stdout[-3000:]}"
        assert not _failed(outcomes[cls]), f"{cls} failed without a bug: {_failed(outcomes[cls])}"


@pytest.mark.parametrize("cls,caught_by,says", [
    ("TestDroppingQueue", {"test_spawned_producer_delivers_every_message_once_then_eof",
                           "test_spawned_consumer_receives_every_message_in_order"}, "message 500"),
    ("TestDuplicatingQueue", {"test_spawned_producer_delivers_every_message_once_then_eof",
                              "test_spawned_consumer_receives_every_message_in_order"}, "message 501"),
    ("TestUnboundedQueue", {"test_put_raises_full_at_maxsize", "test_bounded_across_processes"}, "Full"),
])
@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
def test_the_transport_suite_catches_a_planted_bug(planted, cls, caught_by, says):
    outcomes, stdout = planted
    failed = _failed(outcomes.get(cls, {}))
    assert caught_by <= set(failed), f"{cls}: expected {sorted(caught_by)} to fail; failed: {failed}\n{stdout[-2000:]}"
    assert all(r.startswith("failure") for r in failed.values()), f"{cls}: a test crashed instead of failing: {failed}"
    assert any(says in r for r in failed.values()), f"{cls}: no failure mentions {says!r}: {failed}"


STEP_CASES = {f"test_matches_torch_step_by_step[{c.id}]" for c in CASES}
#: the cases whose clipping is active (max_grad_norm 10 is configured but never reached)
CLIPPED = {f"test_matches_torch_step_by_step[{c.id}]" for c in CASES if c.max_grad_norm and c.max_grad_norm < 1}
DOUBLE = {f"test_matches_torch_step_by_step[{c.id}]" for c in CASES if c.double_dqn}


@needs_cpu_kernel
@pytest.mark.parametrize("cls,caught_by", [
    ("TestWrongGammaKernel", STEP_CASES | {"test_free_run_matches_torch"}),
    ("TestNoClippingKernel", CLIPPED | {"test_free_run_matches_torch"}),
    ("TestNoDoubleDQNKernel", DOUBLE | {"test_free_run_matches_torch"}),
])
@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
def test_the_kernel_suite_catches_a_planted_bug(planted, cls, caught_by):
    outcomes, stdout = planted
    failed = _failed(outcomes.get(cls, {}))
    assert caught_by <= set(failed), (f"{cls}: expected {sorted(caught_by - set(failed))} to fail too; failed: "
                                      f"{sorted(failed)}\n{stdout[-2000:]}")
    assert all(r.startswith("failure") for r in failed.values()), f"{cls}: a test crashed instead of failing: {failed}"
    assert all("differ" in r for r in failed.values()), f"{cls}: a failure does not say what differs: {failed}"


@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
@needs_cpu_kernel
def test_the_kernel_suite_catches_a_kernel_that_goes_wrong_from_its_third_step(planted):
    """The synced comparisons bind a new kernel object every update, so no kernel there reaches its third
    step and they pass; the free run (one kernel object for five updates) fails, at that kernel's step 3."""
    outcomes, stdout = planted
    results = outcomes.get("TestThirdStepKernel", {})
    failed = _failed(results)
    assert set(failed) == {"test_free_run_matches_torch"}, f"failed: {sorted(failed)}\n{stdout[-2000:]}"
    assert STEP_CASES <= {name for name, r in results.items() if r == "passed"}
    assert "the kernel's step 3)" in failed["test_free_run_matches_torch"], failed


@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
@needs_cpu_kernel
def test_the_kernel_suite_catches_a_step_that_returns_a_tuple(planted):
    outcomes, stdout = planted
    failed = _failed(outcomes.get("TestTupleResultKernel", {}))
    contract = failed.get("test_factory_makes_a_kernel_that_updates_in_place", "")
    assert "returned tuple" in contract and "DQNStepResult" in contract, f"{failed}\n{stdout[-2000:]}"
