"""Absurd core counts: refused by the hardware spec, and the widest valid CPU planned without a linear loop
(the composer's thread split search and host tuning, :mod:`pearl_core.composer.tuning`).
"""

from __future__ import annotations

import random

import pytest
from typer.testing import CliRunner

from pearl_core.composer import (
    DeviceSpec,
    HardwareSpec,
    Workload,
)
from pearl_core.errors import SpecError
from pearl_core.validation import MAX_THREADS


# ------------------------------------------------------------------ absurd core counts
SPEC = """
name = "absurd"
[[device]]
name = "cpu0"
kind = "cpu"
cores = {cores}
memory_GiB = 16
idle_power_W = 10
active_power_W = 50
mem_bandwidth_GBps = 10
"""


@pytest.mark.parametrize("key, value", [("cores", 10**18), ("cores", MAX_THREADS + 1), ("threads", 10**18)])
def test_absurd_core_counts_are_refused_by_the_spec(key, value):
    text = SPEC.format(cores=value) if key == "cores" else SPEC.format(cores=2) + f"threads = {value}\n"
    with pytest.raises(SpecError, match=rf"{key} = {value} is invalid; expected an integer >= 1 and <= 4096"):
        HardwareSpec.from_toml(text)
    with pytest.raises(SpecError, match=rf"{key} = {value} is invalid"):
        DeviceSpec("cpu0", "cpu", 2**30, 1, 2, **({"cores": value} if key == "cores" else {"cores": 2, key: value}))


def test_pearl_plan_with_absurd_cores_prints_an_error_and_exits_2(tmp_path):
    from pearl_core.cli import app

    spec = tmp_path / "absurd.toml"
    spec.write_text(SPEC.format(cores=10**18))
    res = CliRunner().invoke(app, ["plan", "-H", str(spec)])
    assert res.exit_code == 2, res.output
    assert "error:" in res.output and "cores = 1000000000000000000 is invalid" in res.output
    assert "Traceback" not in res.output


def test_the_widest_valid_cpu_is_planned_without_a_linear_loop():
    """4096 threads: the co-located split is found as if every split were tried, in O(bs + log threads) evaluations."""
    from pearl_core.composer.analytic import cpu_row

    wl = Workload(batch_size=64, obs_bytes=16, action_bytes=8, n_actors=1, insert_batch=2,
                  layers=_layers(), env_id="CartPole-v1", capacity=100_000, fanout=16)
    dev = DeviceSpec("big", "cpu", 2**40, 100, 800, cores=MAX_THREADS, threads=MAX_THREADS)
    row = cpu_row(dev, wl, is_host=True)
    assert row.config["co_learner_threads"] + row.config["co_rm_threads"] <= MAX_THREADS - 1
    small = cpu_row(DeviceSpec("small", "cpu", 2**34, 10, 65, cores=8, threads=8), wl, is_host=True)
    assert small.config["co_rm_threads"] >= 1


def _brute_force_split(avail, bs, rm, learn):
    best = None
    for t_l in range(1, avail):
        t_r = max(1, min(avail - t_l, bs))
        cs, cu, cn = rm(t_r)
        cl = learn(t_l)
        total = cs + max(cu + cn, cl)
        if best is None or total < best[0]:
            best = (total, t_l, t_r, (cs, cu, cn), cl)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_the_fast_split_search_equals_trying_every_split(seed):
    from pearl_core.composer.analytic import _best_split

    rng = random.Random(seed)
    avail, bs = rng.randint(2, 300), rng.randint(1, 80)
    plateau = rng.randint(1, avail)  # the learner stops getting faster past some thread count (a tie region)
    scale = rng.choice([1e-6, 1e-3, 1.0])

    def rm(t):
        return (scale * (3 + 50 / t), scale * (1 + 20 / t), scale * (2 + 10 / t))

    def learn(t):
        return scale * (5 + 400 / min(t, plateau))

    assert _best_split(avail, bs, rm, learn) == _brute_force_split(avail, bs, rm, learn)


def test_host_tuning_reads_only_the_profiled_thread_counts():
    from pearl_core.composer.matrix import CostCell, DeviceCosts, DeviceRow
    from pearl_core.composer.spec import DeviceSpec
    from pearl_core.composer.tuning import host_variants
    from pearl_core.composer.workload import Workload

    cell = CostCell(1e-4, 1.0, "profiled")
    row = DeviceRow("c", "cpu", cell, cell, cell, cell, costs=DeviceCosts(1e-5, 1e-5, ((1, 0.01), (2, 0.008))))
    wl = Workload(batch_size=8, obs_bytes=16, action_bytes=8)
    big = DeviceSpec("c", "cpu", 2**30, 1.0, 2.0, cores=4096)  # the spec's count bounds only what was measured
    assert sorted({v.learner_threads for v in host_variants(big, row, wl)}) == [1, 2]
    two = DeviceSpec("c", "cpu", 2**30, 1.0, 2.0, cores=2)  # one actor leaves one core
    assert {v.learner_threads for v in host_variants(two, row, wl)} == {1}


def _layers():
    from pearl_core.composer import LearnerLayer

    return (LearnerLayer("q_net.0", "linear", 4, 64, 256, 320, True, "q_net"),
            LearnerLayer("q_net.2", "linear", 64, 2, 128, 130, True, "q_net"))
