"""``benchmarks/update_profile.py``'s cores columns: the CPU share of each role of a run, read from /proc.

The sampler is given a stand-in for the runtime (its ``pids()``): a busy child process as the learner and
an idle one as the actor, so the shares are known in kind without starting a run.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys
import time
import types

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "update_profile.py"

pytestmark = pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/stat"), reason="needs Linux's /proc")


@pytest.fixture(scope="module")
def profile() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("update_profile_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Runtime:
    """What the sampler reads of a ParallelRuntime: the live workers' process ids."""

    def __init__(self, learner: int, actor: int):
        self._pids = {"learner": [learner], "actors": [actor]}

    def pids(self) -> dict[str, list[int]]:
        return self._pids


def test_cpu_seconds_grow_with_work_and_a_gone_or_exited_process_reads_none(profile):
    me = os.getpid()
    before = profile._cpu_seconds(me)
    x = 0
    for i in range(3_000_000):
        x += i
    after = profile._cpu_seconds(me)
    assert before is not None and after is not None and after > before
    assert profile._cpu_seconds(2**22 + 12345) is None  # beyond Linux's largest pid_max: no such process
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 60
    state = ""
    while state != "Z" and time.monotonic() < deadline:  # exited, not reaped yet: a zombie
        time.sleep(0.01)
        with open(f"/proc/{child.pid}/stat", encoding="ascii") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    assert state == "Z"
    assert profile._cpu_seconds(child.pid) is None
    child.wait()


def test_sampler_tells_a_busy_learner_from_an_idle_actor(profile):
    busy = subprocess.Popen([sys.executable, "-c",
                             "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 2.5: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2.0)"])
    try:
        out: dict[str, float] = {}
        profile._sample_cores(_Runtime(busy.pid, idle.pid), 1.0, out)
    finally:
        busy.wait(timeout=30)
        idle.wait(timeout=30)
    assert set(out) == {"learner", "actors", "host"}
    assert out["learner"] > 0.2, out  # a spinning process: most of a core (less on a loaded machine)
    assert out["actors"] < out["learner"], out
    assert all(v >= 0 for v in out.values()), out


def test_report_has_the_cores_columns_and_their_sum(profile):
    args = types.SimpleNamespace(actor_slack=None, rounds=1, window=1.0)
    run = {"per_update_s": 700e-6, "updates": 1000,
           "phases": {"sample": 60e-6, "train": 550e-6, "priorities": 15e-6, "insert": 7e-6, "publish": 30e-6,
                      "wait": 10e-6, "other": 40e-6},
           "cores": {"learner": 1.0, "actors": 0.44, "host": 0.05}}
    partial = dict(run, cores={})  # a run whose sampler read nothing: dashes, not zeros
    text = profile.report(args, {(2, 1): [run], (1, 1): [partial]}, {1: 500e-6}, "0.10, 0.20, 0.30")
    assert "| cores: learner | actors | host | all |" in text
    row = next(line for line in text.splitlines() if line.startswith("| setting 2, 1"))
    assert row.rstrip(" |").split("|")[-4:] == [" 1.00 ", " 0.44 ", " 0.05 ", " 1.49"]
    row1 = next(line for line in text.splitlines() if line.startswith("| setting 1, 1"))
    assert row1.rstrip(" |").split("|")[-4:] == [" - ", " - ", " - ", " -"]
