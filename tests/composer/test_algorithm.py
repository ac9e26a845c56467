"""Algorithm 1 regression tests.

The authors' hand-written Primitive Device Assignment Matrix (``SysConfig/PT.csv``,
ms per iteration) and link table (``SysConfig/BW.csv``, ms and GB/ms) from the
appendix of ``pearl-notes.md`` are injected with units made consistent (ms -> s,
GB/ms -> bytes/s with 1 GB = 1e9 B). Their cells are communication-inclusive, as
the paper's profiled cells are, so Eq. 7 is evaluated on the cells alone.
"""

from __future__ import annotations

import json
import math

import pytest

from pearl_core.composer import (
    AssignmentMatrix,
    Candidate,
    CostCell,
    DeviceRow,
    DeviceSpec,
    HardwareSpec,
    LinkSpec,
    Workload,
    algorithm1,
    evaluate_candidate,
    make_plan,
)
from pearl_core.errors import SpecError
from pearl_core.runtime.config import Setting

MS = 1e-3            # seconds per ms
GB_PER_MS = 1e12     # bytes/s per GB/ms

# PT.csv: RP-update, RP-insert, RP-sample, LN | RPLN-RP-update, RPLN-RP-insert, RPLN-RP-sample, RPLN-LN
PT = {
    "CPU": (0.002, 0.0013, 0.03, 0.6, 0.002, 0.0001, 0.3, 0.6),
    "GPU1": (0.001, 0.0006, 0.5, 0.2, 0.002, 0.0006, 0.6, 0.6),
    "GPU2": (0.001, 0.0008, 0.4, 0.3, 0.001, 0.0012, 0.53, 0.53),
    "FPGA": (0.0015, 0.00102, 0.1, 0.5, 0.0015, 0.0013, 0.2, 0.5),
}
PT_COLUMNS = ("rm_update", "rm_insert", "rm_sample", "learner",
              "co_rm_update", "co_rm_insert", "co_rm_sample", "co_learner")
# BW.csv: (latency ms, bandwidth GB/ms)
BW = {
    ("CPU", "CPU"): (0.002, 0.032),
    ("CPU", "GPU1"): (1, 0.016),
    ("CPU", "GPU2"): (1, 0.008),
    ("CPU", "FPGA"): (1, 0.016),
    ("GPU1", "GPU1"): (0.0002, 0.61),
    ("GPU2", "GPU2"): (0.0002, 0.32),
    ("FPGA", "FPGA"): (1.6e-7, 0.064),
}
KINDS = {"CPU": "cpu", "GPU1": "cuda", "GPU2": "cuda", "FPGA": "fpga"}
AGILEX = dict(dsp_blocks=4510, ram_blocks=7110, ram_block_bits=20480, logic_ram_blocks=24360,
              logic_ram_block_bits=640, clock_hz=250e6)

# The authors' defaults: --train_batch_size 512, --insert_batch_size 256, CartPole-v1
# (obs 4 x float32, action int64): E = 2*16 + 8 + 4 + 1 + 4 = 49 bytes (steps: int32).
WL = Workload(batch_size=512, obs_bytes=16, action_bytes=8, capacity=8192, fanout=16, insert_batch=256,
              env_id="CartPole-v1")


def authors_spec(order=("CPU", "GPU1", "GPU2", "FPGA"), power=None) -> HardwareSpec:
    devices = []
    for name in order:
        idle, active = (power or {}).get(name, (10.0, 100.0))
        extra = {"cores": 16} if KINDS[name] == "cpu" else AGILEX if KINDS[name] == "fpga" else {}
        devices.append(DeviceSpec(name, KINDS[name], 64 * 2**30, idle, active, **extra))
    links = [LinkSpec(a, b, lat * MS, bw * GB_PER_MS) for (a, b), (lat, bw) in BW.items()]
    return HardwareSpec(tuple(devices), tuple(links), host="CPU", name="authors")


def authors_matrix(**overrides) -> AssignmentMatrix:
    table = {dev: dict(zip(PT_COLUMNS, values)) for dev, values in PT.items()}
    for dev, cells in overrides.items():
        table[dev].update(cells)
    return AssignmentMatrix.from_table(table, kinds=KINDS, unit_s=MS, comm_inclusive=True)


# --------------------------------------------------------------------------- the authors' test vector
def test_authors_matrix_chooses_cpu_rm_gpu1_learner_at_0_23_ms_and_ds_on_cpu():
    dec = algorithm1(authors_spec(), authors_matrix(), WL, "throughput")
    assert (dec.rm_device, dec.learner_device, dec.ds_device, dec.setting) == ("CPU", "GPU1", "CPU", 1)
    chosen = dec.chosen
    assert chosen.iteration_s == pytest.approx(0.23e-3, rel=1e-12)
    assert not chosen.comm_counted
    # The authors printed 2226.09 "samples/sec"; it was samples per *ms* (their cells are in ms).
    assert chosen.throughput == pytest.approx(2226.09e3, abs=5)
    assert dec.tie_break == ""


@pytest.mark.parametrize("rm, learner, expected_ms", [
    ("CPU", "GPU1", 0.03 + max(0.002 + 0.0013, 0.2)),       # 0.23, the best
    ("FPGA", "GPU1", 0.1 + max(0.0015 + 0.00102, 0.2)),     # 0.30, the runner-up
    ("CPU", "GPU2", 0.03 + max(0.002 + 0.0013, 0.3)),       # 0.33
    ("CPU", "CPU", 0.3 + max(0.002 + 0.0001, 0.6)),         # 0.90: co-located column, learner counted once
    ("GPU1", "GPU1", 0.6 + max(0.002 + 0.0006, 0.6)),       # 1.20
    ("GPU2", "GPU2", 0.53 + max(0.001 + 0.0012, 0.53)),     # 1.06
    ("FPGA", "FPGA", 0.2 + max(0.0015 + 0.0013, 0.5)),      # 0.70
    ("GPU1", "CPU", 0.5 + max(0.001 + 0.0006, 0.6)),        # 1.10
])
def test_every_candidate_by_hand(rm, learner, expected_ms):
    dec = algorithm1(authors_spec(), authors_matrix(), WL, "throughput")
    c = dec.candidate(rm, learner)
    assert c.iteration_s == pytest.approx(expected_ms * MS, rel=1e-12)
    assert c.throughput == pytest.approx(512 / (expected_ms * MS), rel=1e-12)
    assert c.setting == (2 if rm == learner else 1)
    assert c.setting is (Setting.COLOCATED if rm == learner else Setting.THROUGH_HOST)
    assert Candidate.from_dict(json.loads(json.dumps(c.to_dict()))).setting is c.setting


def test_ranking_matches_the_notes():
    dec = algorithm1(authors_spec(), authors_matrix(), WL, "throughput")
    ranked = [(c.rm_device, c.learner_device) for c in dec.ranking()]
    assert ranked[:3] == [("CPU", "GPU1"), ("FPGA", "GPU1"), ("CPU", "GPU2")]
    assert len(dec.candidates) == 16 and all(c.feasible for c in dec.candidates)


def test_ds_placement_costs_by_hand_in_bytes_and_seconds():
    dec = algorithm1(authors_spec(), authors_matrix(), WL, "throughput")
    bs, bsi, e, i = 512, 256, 49, 8

    def c(pair, n):  # one message over a BW.csv row, SI units
        lat, bw = BW[pair]
        return lat * MS + n / (bw * GB_PER_MS)

    expected = {
        # indices RM(CPU)->DS, experiences DS->learner(GPU1), insertions host(CPU)->DS
        "CPU": c(("CPU", "CPU"), bs * i) + c(("CPU", "GPU1"), bs * e) + c(("CPU", "CPU"), bsi * e),
        "GPU1": c(("CPU", "GPU1"), bs * i) + c(("GPU1", "GPU1"), bs * e) + c(("CPU", "GPU1"), bsi * e),
        # GPU2 -> GPU1 has no link: two hops through the host CPU
        "GPU2": c(("CPU", "GPU2"), bs * i) + c(("CPU", "GPU2"), bs * e) + c(("CPU", "GPU1"), bs * e)
                + c(("CPU", "GPU2"), bsi * e),
        "FPGA": c(("CPU", "FPGA"), bs * i) + c(("CPU", "FPGA"), bs * e) + c(("CPU", "GPU1"), bs * e)
                + c(("CPU", "FPGA"), bsi * e),
    }
    for dev, cost in expected.items():
        assert dec.ds_option(dev).cost_s == pytest.approx(cost, rel=1e-12), dev
    assert dec.ds_device == "CPU"
    assert dec.ds_option("CPU").cost_s == pytest.approx(1.006088e-3, rel=1e-6)
    # Same ordering as the authors' printout (CPU < GPU1 < FPGA ~ GPU2), but now in seconds.
    assert expected["CPU"] < expected["GPU1"] < min(expected["GPU2"], expected["FPGA"])


# --------------------------------------------------------------------------- ties
def tie_matrix() -> AssignmentMatrix:
    # GPU1's co-located cells copy the (CPU, GPU1) pair's numbers: both iterations take 0.23 ms.
    return authors_matrix(GPU1={"co_rm_sample": 0.03, "co_rm_update": 0.002, "co_rm_insert": 0.0013,
                                "co_learner": 0.2})


@pytest.mark.parametrize("order", [("CPU", "GPU1", "GPU2", "FPGA"), ("GPU1", "CPU", "FPGA", "GPU2")])
def test_a_tie_is_broken_by_lower_traffic_whatever_the_order(order):
    spec = authors_spec(order)
    dec = algorithm1(spec, tie_matrix(), WL, "throughput")
    a, b = dec.candidate("CPU", "GPU1"), dec.candidate("GPU1", "GPU1")
    assert a.iteration_s == pytest.approx(b.iteration_s, rel=1e-12)
    # Setting 1 ships the batch and the TD errors over PCIe; setting 2 ships only the insertions.
    assert a.traffic_bytes == 512 * (49 + 4) + 512 * 8
    assert b.traffic_bytes == 256 * (49 + 8 + 8)
    assert (dec.rm_device, dec.learner_device, dec.setting) == ("GPU1", "GPU1", 2)
    assert dec.tie_break == "traffic" and dec.tied_with == (("CPU", "GPU1"),)


def test_scores_within_relative_tolerance_tie_but_clear_differences_do_not():
    nudged = tie_matrix()
    rows = list(nudged.rows)
    g = rows[1]
    rows[1] = DeviceRow(g.device, g.kind, g.rm_sample, g.rm_update, g.rm_insert, g.learner,
                        CostCell(0.03e-3 * (1 + 1e-12), 0, "given"), g.co_rm_update, g.co_rm_insert, g.co_learner)
    dec = algorithm1(authors_spec(), AssignmentMatrix(tuple(rows), True), WL, "throughput")
    assert dec.learner_device == "GPU1" and dec.tie_break == "traffic"
    rows[1] = DeviceRow(g.device, g.kind, g.rm_sample, g.rm_update, g.rm_insert, g.learner,
                        CostCell(0.031e-3, 0, "given"), g.co_rm_update, g.co_rm_insert, g.co_learner)
    dec = algorithm1(authors_spec(), AssignmentMatrix(tuple(rows), True), WL, "throughput")
    assert (dec.rm_device, dec.learner_device) == ("CPU", "GPU1") and dec.tie_break == ""


# --------------------------------------------------------------------------- power efficiency
POWER = {"CPU": (50.0, 150.0), "GPU1": (50.0, 300.0), "FPGA": (20.0, 40.0)}


def power_case() -> tuple[HardwareSpec, AssignmentMatrix]:
    spec = HardwareSpec(
        (DeviceSpec("CPU", "cpu", 2**36, 50, 150, cores=4),
         DeviceSpec("GPU1", "cuda", 2**36, 50, 300),
         DeviceSpec("FPGA", "fpga", 2**35, 20, 40, **AGILEX)),
        (LinkSpec("CPU", "CPU", 2e-6, 32e9), LinkSpec("CPU", "GPU1", 1e-5, 16e9),
         LinkSpec("CPU", "FPGA", 1e-5, 16e9), LinkSpec("GPU1", "GPU1", 1e-6, 600e9),
         LinkSpec("FPGA", "FPGA", 1e-7, 64e9)))
    cells = {  # ms; the same numbers alone and co-located
        "CPU": (0.05, 0.01, 0.01, 1.0),
        "GPU1": (0.2, 0.05, 0.05, 0.1),
        "FPGA": (0.02, 0.005, 0.005, 0.3),
    }
    table = {d: dict(zip(("rm_sample", "rm_update", "rm_insert", "learner"), v))
             | dict(zip(("co_rm_sample", "co_rm_update", "co_rm_insert", "co_learner"), v)) for d, v in cells.items()}
    matrix = AssignmentMatrix.from_table(table, kinds=KINDS, unit_s=MS, comm_inclusive=True,
                                         power_w={d: p[1] for d, p in POWER.items()})
    return spec, matrix


def test_power_metric_changes_the_choice_from_the_fast_gpu_to_the_frugal_fpga():
    spec, matrix = power_case()
    wl = Workload(batch_size=32, obs_bytes=16, action_bytes=8, capacity=8192, n_actors=1)
    fast = algorithm1(spec, matrix, wl, "throughput")
    assert (fast.rm_device, fast.learner_device) == ("FPGA", "GPU1")
    frugal = algorithm1(spec, matrix, wl, "power_efficiency")
    assert (frugal.rm_device, frugal.learner_device, frugal.setting) == ("FPGA", "FPGA", 2)

    # By hand: host = idle + actors' share (1 of 4 threads); each device idle + its cells' extra energy / T.
    host = 50 + (150 - 50) * 1 / 4
    fg = frugal.candidate("FPGA", "GPU1")
    t = 0.12e-3
    fpga = 20 + (40 - 20) * (0.02 + 0.005 + 0.005) * MS / t
    gpu = 50 + (300 - 50) * 0.1 * MS / t
    assert fg.iteration_s == pytest.approx(t, rel=1e-12)
    assert fg.power_w == pytest.approx(host + fpga + gpu, rel=1e-12)
    assert fg.score == pytest.approx(32 / t / (host + fpga + gpu), rel=1e-12)
    ff = frugal.candidate("FPGA", "FPGA")
    # 20 + 20 * 0.33 / 0.32 = 40.6 W exceeds the board's active power: capped at 40 W.
    assert ff.power_w == pytest.approx(host + 40.0, rel=1e-12)
    assert ff.score > fg.score
    assert fast.candidate("FPGA", "GPU1").throughput > fast.candidate("FPGA", "FPGA").throughput


# --------------------------------------------------------------------------- communication terms (Eq. 7)
def test_communication_terms_by_hand_when_cells_are_compute_only():
    spec = authors_spec()
    matrix = AssignmentMatrix(authors_matrix().rows, comm_inclusive=False)
    bs, bsi, e, i, p, w = 512, 256, 49, 8, 8, 4

    def c(pair, n):
        lat, bw = BW[pair]
        return lat * MS + n / (bw * GB_PER_MS)

    cc = ("CPU", "CPU")
    cand = evaluate_candidate(spec, matrix, WL, "CPU", "GPU1")
    c_s = c(cc, 0) + c(cc, bs * (i + p))                      # request, then indices + priorities back
    c_u = c(cc, bs * (i + p)) + c(cc, bsi * (i + p))          # new priorities, insert requests
    c_l = c(("CPU", "GPU1"), bs * (e + w)) + c(("CPU", "GPU1"), bs * p)   # batch out, TD errors back
    assert (cand.sample_comm_s, cand.update_insert_comm_s, cand.learner_comm_s) == pytest.approx((c_s, c_u, c_l),
                                                                                                  rel=1e-12)
    expected = (0.03 * MS + c_s) + max(0.0033 * MS + c_u, 0.2 * MS + c_l)
    assert cand.iteration_s == pytest.approx(expected, rel=1e-12) and cand.comm_counted

    gg = ("GPU1", "GPU1")
    co = evaluate_candidate(spec, matrix, WL, "GPU1", "GPU1")
    c_s = c(gg, bs * (i + p))
    c_u = c(gg, bs * (i + p)) + c(("CPU", "GPU1"), bsi * (e + i + p))   # insertions carry the experiences
    c_l = c(gg, bs * (e + w)) + c(gg, bs * p)
    expected = (0.6 * MS + c_s) + max((0.002 + 0.0006) * MS + c_u, 0.6 * MS + c_l)
    assert co.iteration_s == pytest.approx(expected, rel=1e-12)

    # Two accelerators talk through the host: GPU1 -> FPGA costs both hops.
    route = spec.link("GPU1", "FPGA")
    assert route.via == ("CPU",) and route.crossings == 2
    assert route.cost_s(1000) == pytest.approx(c(("CPU", "GPU1"), 1000) + c(("CPU", "FPGA"), 1000), rel=1e-12)


def test_given_mode_still_reports_the_communication_it_leaves_out():
    dec = algorithm1(authors_spec(), authors_matrix(), WL, "throughput")
    c = dec.chosen
    assert c.learner_comm_s > 1e-3 and c.iteration_s == pytest.approx(0.23e-3)
    # Counted on top of the cells, the table's 1 ms PCIe latencies (batch out, TD errors back) put
    # 2 ms on the GPU pair's critical path, and the all-CPU co-located pair wins instead.
    forced = algorithm1(authors_spec(), authors_matrix(), WL, "throughput", comm_inclusive=False)
    assert forced.candidate("CPU", "GPU1").iteration_s > 2.2e-3
    assert (forced.rm_device, forced.learner_device, forced.setting) == ("CPU", "CPU", 2)


def test_uniform_replay_sends_no_priorities():
    wl = Workload(batch_size=512, obs_bytes=16, action_bytes=8, replay="uniform", insert_batch=256)
    c = evaluate_candidate(authors_spec(), authors_matrix(), wl, "CPU", "GPU1")
    names = [m.name for msgs in c.messages.values() for m in msgs]
    assert "priority update" not in names
    assert {m.name: m.nbytes for msgs in c.messages.values() for m in msgs}["training batch"] == 512 * 49


# --------------------------------------------------------------------------- infeasible pairs and errors
def test_missing_cells_make_a_pair_infeasible_with_a_reason():
    rows = list(authors_matrix().rows)
    f = rows[3]
    rows[3] = DeviceRow(f.device, f.kind, f.rm_sample, f.rm_update, f.rm_insert, f.learner,
                        notes=("RM and learner do not fit together: over by 3 Mbit",))
    dec = algorithm1(authors_spec(), AssignmentMatrix(tuple(rows), True), WL)
    bad = dec.candidate("FPGA", "FPGA")
    assert not bad.feasible and "over by 3 Mbit" in bad.reason and bad.iteration_s is None
    assert dec.candidate("FPGA", "GPU1").feasible


def test_errors_name_the_problem():
    with pytest.raises(SpecError, match="metric"):
        algorithm1(authors_spec(), authors_matrix(), WL, "speed")
    with pytest.raises(SpecError, match="no row for device 'GPU2'"):
        algorithm1(authors_spec(), AssignmentMatrix(authors_matrix().rows[:2], True), WL)
    empty = AssignmentMatrix(tuple(DeviceRow(d, KINDS[d]) for d in PT), True)
    with pytest.raises(SpecError, match="no \\(RM, learner\\) assignment is feasible"):
        algorithm1(authors_spec(), empty, WL)
    huge = Workload(batch_size=512, obs_bytes=2**20, action_bytes=8, capacity=10**6)
    with pytest.raises(SpecError, match="Data Storage"):
        algorithm1(authors_spec(), authors_matrix(), huge)


def test_make_plan_with_the_given_matrix_keeps_every_number():
    plan = make_plan(authors_spec(), WL, matrix=authors_matrix())
    assert (plan.rm_device, plan.learner_device, plan.ds_device, plan.setting) == ("CPU", "GPU1", "CPU", 1)
    assert all(math.isfinite(c.iteration_s) for c in plan.candidates)
    rp = plan.runtime_plan()
    assert (rp.rm_backend, rp.learner_device, rp.storage_device, rp.setting) == ("cpu", "cuda:0", "cpu", 1)
