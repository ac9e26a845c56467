"""The machine check (:func:`pearl_core.runtime.machine.check_machine`): a plan that does not fit the machine is
refused before anything starts, with what, expected vs found, and the fix.
"""

from __future__ import annotations


import pytest

from pearl_core.errors import SpecError
from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
from pearl_core.runtime.machine import ENVS_PER_CORE, check_machine, host_memory_bytes, row_bytes

DQN = "pearl_core.algorithms:DQN"


def good_config(tmp_path=None, **kw) -> RunConfig:
    values = dict(env_id="CartPole-v1", trainer=DQN, trainer_kwargs={"hidden_sizes": [16]}, batch_size=16,
                  learning_starts=32, replay=ReplayConfig(capacity=512), stop=StopCriteria(max_env_steps=200),
                  log_dir=str(tmp_path / "run") if tmp_path is not None else "runs/pearl")
    values.update(kw)
    return RunConfig(**values)


# ============================================================================ the machine check
def plan_for(setting: int, **kw) -> RuntimePlan:
    return RuntimePlan(setting=setting, **{"n_actors": 1, "envs_per_actor": 2, "insert_batch": 8, "queue_size": 4,
                                           **kw})


@pytest.mark.parametrize("setting", [1, 2])
def test_check_machine_accepts_a_plan_that_fits(tmp_path, setting):
    assert check_machine(good_config(tmp_path), plan_for(setting)) is None


@pytest.mark.parametrize("setting", [1, 2])
def test_check_machine_refuses_a_batch_larger_than_the_replay(tmp_path, setting):
    config = good_config(tmp_path, batch_size=1024, replay=ReplayConfig(capacity=512))
    with pytest.raises(SpecError, match=r"batch_size = 1,024 is larger than the replay's capacity = 512; expected "
                                        r"batch_size <= capacity.*Fix: a smaller batch_size or ReplayConfig\(capacity "
                                        r">= 1,024\)"):
        check_machine(config, plan_for(setting))


@pytest.mark.parametrize("setting", [1, 2])
def test_check_machine_refuses_far_more_environments_than_cores(tmp_path, setting):
    config = good_config(tmp_path)
    plan = plan_for(setting, n_actors=100, envs_per_actor=3)
    with pytest.raises(SpecError, match=rf"n_actors \* envs_per_actor = 100 \* 3 = 300 environments is far beyond "
                                        rf"this machine's 2 core\(s\); expected at most {ENVS_PER_CORE} per core "
                                        rf"\(128\)\. Fix: about one actor per core"):
        check_machine(config, plan, cores=2)
    assert check_machine(config, plan, cores=8) is None  # the same plan fits a bigger machine


@pytest.mark.parametrize("setting", [1, 2])
def test_check_machine_refuses_a_replay_beyond_the_available_memory(tmp_path, setting):
    config = good_config(tmp_path, replay=ReplayConfig(capacity=50_000_000))  # 49 B/row: 2.3 GiB + the tree
    with pytest.raises(SpecError, match=r"this run needs about [0-9.]+ GiB of host memory \(Data Storage 2\.28 GiB, "
                                        r"sum tree [0-9.]+ MiB, .*49 bytes per transition of 'CartPole-v1'\) but "
                                        r"1\.00 GiB is available.*Fix: a smaller replay capacity \(about [0-9,]+ would "
                                        r"fill the memory free now\)"):
        check_machine(config, plan_for(setting), memory_bytes=2**30)
    assert check_machine(config, plan_for(setting), memory_bytes=2**34) is None


def test_host_memory_counts_only_what_lives_in_host_memory():
    config = good_config(replay=ReplayConfig(capacity=1000))
    host = host_memory_bytes(config, RuntimePlan(), 45)
    assert host["Data Storage"] == 45_000 and host["sum tree"] > 16_000
    on_device = host_memory_bytes(config, RuntimePlan(storage_device="cuda:0", rm_backend="cuda",
                                                      learner_device="cuda:0"), 45)
    assert on_device["Data Storage"] == 0 and on_device["sum tree"] == 0
    uniform = host_memory_bytes(good_config(replay=ReplayConfig("uniform", capacity=1000)), RuntimePlan(), 45)
    assert uniform["sum tree"] == 0
    assert row_bytes("CartPole-v1") == 4 * 4 * 2 + 8 + 4 + 1 + 4  # obs, next_obs (float32 x4), action, reward,
    #                                                                done, steps


def test_check_machine_refuses_a_log_dir_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(SpecError, match=r"log_dir = .*a-file/run'.*is a file, not a directory.*Fix: choose another"):
        check_machine(good_config(log_dir=str(blocker / "run")), plan_for(1))
    with pytest.raises(SpecError, match=r"expected a path without a NUL byte"):
        check_machine(good_config(log_dir="runs/\x00x"), plan_for(2))
    assert blocker.read_text() == "x" and not (tmp_path / "run").exists()  # nothing was written


def test_check_machine_needs_a_config_and_a_plan():
    with pytest.raises(SpecError, match=r"check_machine needs a RunConfig and a RuntimePlan; found dict"):
        check_machine({}, RuntimePlan())  # type: ignore[arg-type]


# ============================================================================ the address-space limit (ulimit -v)
def test_check_machine_counts_the_address_space_limit_when_it_binds(tmp_path, monkeypatch):
    from pearl_core.runtime import machine

    config = good_config(tmp_path, replay=ReplayConfig(capacity=10_000_000))  # 49 B/row: 467 MiB + the tree
    need = sum(host_memory_bytes(config, plan_for(1), row_bytes("CartPole-v1")).values())
    limit, mapped = 2**30, 3 * 2**28  # ulimit -v 1 GiB, 0.75 GiB of it mapped: 0.25 GiB left
    monkeypatch.setattr(machine, "address_space_limit", lambda: (limit, limit - mapped))
    with pytest.raises(SpecError, match=r"needs about 0\.[0-9]+ GiB of host memory \(Data Storage 467\.3 MiB.*but "
                                        r"this process's address-space limit \(ulimit -v = 1\.00 GiB, 0\.75 GiB of it "
                                        r"mapped already\) leaves 0\.25 GiB; expected at most the memory it may use\. "
                                        r"Fix: a smaller replay capacity \(about [0-9,]+ would fit in what the limit "
                                        r"leaves\), or raise ulimit -v"):
        check_machine(config, plan_for(1), memory_bytes=2**40)  # plenty of memory: the limit binds
    # less memory than the limit leaves: the memory binds, and the message says so
    with pytest.raises(SpecError, match=r"but 0\.10 GiB is available;.*or run where more memory is free"):
        check_machine(config, plan_for(1), memory_bytes=2**30 // 10)
    # a limit that leaves enough, or none: accepted
    monkeypatch.setattr(machine, "address_space_limit", lambda: (4 * need, 2 * need))
    assert check_machine(config, plan_for(1), memory_bytes=2**40) is None
    monkeypatch.setattr(machine, "address_space_limit", lambda: None)
    assert check_machine(config, plan_for(1), memory_bytes=2**40) is None


LIMITED = """
import resource
from pearl_core.errors import SpecError
from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan
from pearl_core.runtime.machine import check_machine
from pearl_core.validation import address_space_limit

with open("/proc/self/statm") as fh:
    mapped = int(fh.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (mapped + 256 * 2**20, resource.RLIM_INFINITY))  # `ulimit -v`: 256 MiB more
limit, left = address_space_limit()
print("LEFT", limit == mapped + 256 * 2**20, 0 < left <= 256 * 2**20)
plan = RuntimePlan(n_actors=1, envs_per_actor=2, insert_batch=8, queue_size=4)
for capacity in (20_000_000, 100_000):  # about 1.2 GiB (refused), 6 MiB (fits)
    config = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", batch_size=16,
                       replay=ReplayConfig(capacity=capacity), log_dir=LOG_DIR)
    try:
        check_machine(config, plan, memory_bytes=2**40)  # plenty of memory: only the limit can refuse
        print("FITS", capacity)
    except SpecError as exc:
        print("REFUSED", capacity, exc)
"""


def test_a_run_beyond_ulimit_v_is_refused_by_the_check_before_anything_is_allocated(tmp_path):
    import subprocess
    import sys

    script = f"LOG_DIR = {str(tmp_path / 'run')!r}\n" + LIMITED
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "LEFT True True", out.stdout
    assert lines[1].startswith("REFUSED 20000000 this run needs about 1.2"), lines[1]
    for text in ("address-space limit (ulimit -v = ", "Fix: a smaller replay capacity", "raise ulimit -v"):
        assert text in lines[1], lines[1]
    assert lines[2] == "FITS 100000", out.stdout
