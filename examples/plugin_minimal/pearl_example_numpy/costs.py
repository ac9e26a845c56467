r"""The example's analytic cost model: a ``numpy`` device's row of the composer's matrix.

Every cell is the compute of one iteration (the composer adds communication from
the hardware spec's links), as a count of numpy calls from Python plus the time
to stream their bytes or do their FLOPs. Symbols (spec field, default when absent)::

    o    launch_latency_s     [10 us]        one numpy call from Python
    B    mem_bandwidth_Bps    [10 GB/s]
    Pk   peak_flops           [50 GFLOP/s]
    eta  options.gemm_efficiency  [0.5]      achieved fraction of Pk in the small GEMMs
    BS, BS_i, F, S, N: batch, insertion batch, fanout, priority bytes (8), blocks = ceil(capacity / F)

Replay manager (the two-level tree of ``sumtree.py``)::

    sample = 8 o + (N + BS F) S / B     prefix sums of the N block sums, then of each sampled block
    update = 6 o + BS F S / B           dedupe, scatter, re-sum the touched blocks
    insert = 6 o + BS_i F S / B
    uniform replay (no tree): sample = o, update = insert = 0

Learner (the kernel of ``learner.py``; ``L`` trainable layers, FLOPs and bytes from the workload)::

    learner = (40 L + 20) o + max(FLOPs / (eta Pk), bytes / B)
    bytes   = params + 7 trainable params + 3 activations      (as the core's CPU/GPU models)

    calls per layer: 3 in each of the 2-3 forward passes, 5 backward, 2 (clipping) and
    12 (Adam) for each of its 2 parameter arrays; about 20 more for targets and the loss.

Co-located (setting 2): one process drives the device, so the replay manager
and the learner take turns: the RM cells stay, ``co_learner = learner + update +
insert``. Every cell draws the device's ``active_power_w``. The row's ``config`` holds
what the plan reads from it: ``rm_threads`` / ``co_rm_threads`` become the plan's
``rm_threads``, which reach ``make_sum_tree(threads=...)`` (one: this tree is single-threaded).
"""

import math

from pearl_core.errors import SpecError
from pearl_core.sdk import CostCell, DeviceRow

DEFAULTS = {"launch_latency_s": 10e-6, "mem_bandwidth_Bps": 10e9, "peak_flops": 50e9}


def device_row(device, workload):
    """The row of a ``numpy`` device a hardware spec describes (compute only; touches no device)."""
    notes = []
    o, bw, peak = (_field(device, name, notes) for name in ("launch_latency_s", "mem_bandwidth_Bps", "peak_flops"))
    eta = device.options.get("gemm_efficiency", 0.5)
    if isinstance(eta, bool) or not isinstance(eta, (int, float)) or not 0 < eta <= 1:
        raise SpecError(f"device {device.name!r}: options.gemm_efficiency = {eta!r} is invalid; expected a number "
                        "in (0, 1]. Fix: correct it in the hardware spec, or leave it out (0.5).")

    bs, bsi, fanout, s = workload.batch_size, workload.insert_batch, workload.fanout, workload.priority_bytes
    if workload.replay == "uniform":
        sample, update, insert = o, 0.0, 0.0
    else:
        blocks = math.ceil(workload.capacity / fanout)
        sample = 8 * o + (blocks + bs * fanout) * s / bw
        update = 6 * o + bs * fanout * s / bw
        insert = 6 * o + bsi * fanout * s / bw

    layers = sum(1 for ly in workload.layers if ly.trainable)
    moved = workload.param_bytes + 7 * workload.trainable_param_bytes + 3 * workload.activation_bytes
    learner = (40 * layers + 20) * o + max(workload.train_flops / (eta * peak), moved / bw)

    def cell(seconds):
        return CostCell(seconds, device.active_power_w, "analytic")

    rm = [cell(sample), cell(update), cell(insert)]
    return DeviceRow(device.name, device.kind, *rm, cell(learner), *rm, cell(learner + update + insert),
                     config={"rm_threads": 1, "co_rm_threads": 1}, notes=tuple(notes))


def _field(device, name, notes):
    value = getattr(device, name)
    if value is None:
        notes.append(f"assumed {name} = {DEFAULTS[name]:g}")
        return DEFAULTS[name]
    return float(value)
