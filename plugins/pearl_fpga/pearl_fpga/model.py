r"""Analytic FPGA cost model: the paper's Eq. 2-6 (pure Python, no device library).

PEARL maps the Replay Manager onto an FPGA as a pipeline of one kernel per tree
level (each level's priorities in on-chip memory) and the learner onto ``DP``
parallel pipelines of per-layer stages (forward, backward, weight update), each
stage unrolled ``UF_s`` times. The paper's rule: *pipeline latency = per-stage
latency x (BS + D) + communication*, where ``D`` is the fill/drain overhead
(tree depth for the RM, layer propagations for the learner). The formulas below
are reconstructed in ``pearl-notes.md`` §4.3-4.4 from the paper's prose and the
authors' ``FPGA_perfmodel.py``; communication is left out here because the
composer adds ``latency + bytes / bandwidth`` from the hardware spec.

Symbols: ``f`` clock (Hz), ``II`` initiation interval (cycles, device option
``initiation_interval``, default 2 as in the authors' model), ``K`` fanout,
``D`` tree levels below the root (``K^D >= capacity``), ``BS``/``BS_i`` batch
and insertion batch.

* **Eq. 4, sampling**: ``T_s = (K * II / f) * (BS + D)`` -- each level stage scans K siblings.
* **Eq. 5, update**:   ``T_u = (II / f) * (BS + D)``; an insertion is a retrieval pass
  followed by an update pass: ``T_i = 2 * (II / f) * (BS_i + D)``. (The authors'
  code dropped the ``BS`` term for updates; the paper's rule keeps it.)
* **RM resources**: level ``l`` (1..D) holds ``w_l = min(K^l, ceil(capacity / K^(D-l)))``
  words of ``word_bits`` (32); a level smaller than one RAM block goes to logic RAM
  (MLAB, ``ceil(bits / logic_ram_block_bits)`` blocks), a larger one to RAM blocks
  (M20K, ``ceil(bits / ram_block_bits)``); 2 DSPs per level (compare + add).
* **Learner stages** (``nn.Linear`` only), per layer ``l`` with ``MAC_l = in_l * out_l``:
  ``FW_l`` for every layer (target networks included); for trainable layers
  ``WA_l`` (weight gradient) and ``BW_l`` (error to the previous layer, not for
  the first layer of a network). Every stage does ``ops_s = MAC_l`` MACs per
  sample. Its natural parallelism (the most MAC units it can use, as in the
  authors' ``Learner_DSE``): ``FW_l``: ``out_l`` (one output neuron per unit),
  ``BW_l``: ``in_l``, ``WA_l``: ``in_l * out_l``. ``D_L`` = number of stages.
* **Eq. 3, balance**: with ``U`` MAC units per pipeline,
  ``UF_s = min(MAC_s, max(1, floor(U * ops_s / sum(ops))))``, so that
  ``ops_1/UF_1 ~ ops_2/UF_2 ~ ...``.
* **Eq. 2, pipelines**: ``DP`` pipelines need ``DP * sum(UF_s) * dsp_per_mac <= DSP``
  and ``DP * 2 * W * 32 + BS * A * 32 <= on-chip bits`` (each pipeline keeps its
  weights and gradient accumulators, ``W`` parameters; activations of ``A``
  values per sample are kept for the batch). ``U = floor(DSP / (DP * dsp_per_mac))``.
  Every ``DP`` from 1 to ``BS`` that fits is evaluated and the fastest kept (the
  paper's "largest DP that fits" is among them; a smaller DP with wider stages
  can be faster).
* **Eq. 6, learner**: ``T_L = (max_s ceil(ops_s / UF_s) / f) * (ceil(BS / DP) + D_L)``.
* **Co-location** (setting 2): RM and learner share the device only if the
  learner still fits in the DSPs and on-chip RAM the RM leaves; otherwise the
  co-located cells are empty and the notes say by how much it overflows.

Power: every cell draws the board's ``active_power_w`` while it runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    from pearl_core.sdk import DeviceRow, DeviceSpec, LearnerLayer, Workload

__all__ = ["FpgaBudget", "LearnerDesign", "RMDesign", "Stage", "device_row", "learner_design", "learner_stages",
           "rm_design", "rm_insert_s", "rm_sample_s", "rm_update_s"]

WORD_BITS = 32


@dataclass(frozen=True)
class FpgaBudget:
    """Resources available to a design."""

    dsp: int
    ram_blocks: int
    ram_block_bits: int
    logic_ram_blocks: int
    logic_ram_block_bits: int

    @property
    def bits(self) -> int:
        return self.ram_blocks * self.ram_block_bits + self.logic_ram_blocks * self.logic_ram_block_bits

    def minus(self, rm: "RMDesign") -> "FpgaBudget":
        return FpgaBudget(self.dsp - rm.dsp, self.ram_blocks - rm.ram_blocks, self.ram_block_bits,
                          self.logic_ram_blocks - rm.logic_ram_blocks, self.logic_ram_block_bits)


# --------------------------------------------------------------------------- replay manager
def rm_sample_s(batch: int, levels: int, fanout: int, clock_hz: float, ii: int = 2) -> float:
    """Eq. 4: ``(K * II / f) * (BS + D)``."""
    return fanout * ii / clock_hz * (batch + levels)


def rm_update_s(batch: int, levels: int, clock_hz: float, ii: int = 2) -> float:
    """Eq. 5: ``(II / f) * (BS + D)``."""
    return ii / clock_hz * (batch + levels)


def rm_insert_s(batch: int, levels: int, clock_hz: float, ii: int = 2) -> float:
    """Insertion = retrieval pass + update pass: ``2 * (II / f) * (BS_i + D)``."""
    return 2 * rm_update_s(batch, levels, clock_hz, ii)


@dataclass(frozen=True)
class RMDesign:
    """On-chip footprint of the per-level RM pipeline."""

    levels: int
    widths: tuple[int, ...]
    dsp: int
    ram_blocks: int
    logic_ram_blocks: int
    bits: int


def rm_design(capacity: int, fanout: int, levels: int, budget: FpgaBudget) -> RMDesign:
    """Per-level buffers and DSPs of the RM (see the module docstring)."""
    widths, ram, logic = [], 0, 0
    for lvl in range(1, levels + 1):
        width = min(fanout ** lvl, math.ceil(capacity / fanout ** (levels - lvl)))
        widths.append(width)
        bits = width * WORD_BITS
        if bits < budget.ram_block_bits:
            logic += math.ceil(bits / budget.logic_ram_block_bits)
        else:
            ram += math.ceil(bits / budget.ram_block_bits)
    return RMDesign(levels, tuple(widths), 2 * levels, ram, logic, sum(widths) * WORD_BITS)


def rm_fit_problem(rm: RMDesign, budget: FpgaBudget) -> str | None:
    """Why the RM does not fit ``budget``, or ``None``."""
    if rm.dsp > budget.dsp:
        return f"the RM needs {rm.dsp} DSPs; {budget.dsp} available"
    if rm.ram_blocks > budget.ram_blocks or rm.logic_ram_blocks > budget.logic_ram_blocks:
        over = rm.bits - budget.bits
        return (f"the sum tree needs {rm.ram_blocks} RAM blocks and {rm.logic_ram_blocks} logic RAM blocks "
                f"({rm.bits / 1e6:.2f} Mbit); {budget.ram_blocks} and {budget.logic_ram_blocks} available"
                + (f" (over by {over / 1e6:.2f} Mbit)" if over > 0 else ""))
    return None


# --------------------------------------------------------------------------- learner
@dataclass(frozen=True)
class Stage:
    """One learner pipeline stage: ``ops`` MACs per sample, at most ``maxpar`` in parallel."""

    name: str
    ops: int
    maxpar: int


def learner_stages(layers: Sequence["LearnerLayer"]) -> tuple[Stage, ...]:
    """FW for every layer; WA and BW (not for a network's first layer) for trainable ones, in pipeline order."""
    stages: list[Stage] = []
    first_of_group: set[str] = set()
    seen_groups: set[str] = set()
    for ly in layers:
        if ly.group not in seen_groups:
            seen_groups.add(ly.group)
            first_of_group.add(ly.name)
    for ly in layers:
        stages.append(Stage(f"FW {ly.name}", ly.macs, ly.out_features))
    for ly in reversed(layers):
        if ly.trainable:
            if ly.name not in first_of_group:
                stages.append(Stage(f"BW {ly.name}", ly.macs, ly.in_features))
            stages.append(Stage(f"WA {ly.name}", ly.macs, ly.macs))
    return tuple(stages)


@dataclass(frozen=True)
class LearnerDesign:
    """A learner configuration: ``dp`` pipelines with unroll ``uf`` per stage (Eq. 2-3), latency by Eq. 6."""

    dp: int
    uf: tuple[int, ...]
    latency_s: float
    dsp: int
    bits: int
    depth: int


def balanced_uf(stages: Sequence[Stage], units: int) -> tuple[int, ...]:
    """Eq. 3: ``UF_s = min(maxpar_s, max(1, floor(units * ops_s / sum(ops))))``."""
    total = sum(s.ops for s in stages) or 1
    return tuple(min(s.maxpar, max(1, units * s.ops // total)) for s in stages)


def learner_bits(layers: Iterable["LearnerLayer"], batch: int, dp: int) -> int:
    """On-chip bits: ``dp * 2 * W * 32 + BS * A * 32`` (weights + gradient accumulators per pipeline, activations)."""
    layers = list(layers)
    weights = sum(ly.params for ly in layers)
    acts = sum(ly.out_features for ly in layers) + (layers[0].in_features if layers else 0)
    return dp * 2 * weights * WORD_BITS + batch * acts * WORD_BITS


def learner_design(layers: Sequence["LearnerLayer"], batch: int, budget: FpgaBudget, clock_hz: float,
                   dsp_per_mac: int = 1) -> tuple[LearnerDesign | None, str]:
    """The fastest design that fits ``budget`` (Eq. 2, 3, 6), or ``(None, why not)``."""
    stages = learner_stages(layers)
    if not stages:
        return None, "the trainer declares no layers"
    best: LearnerDesign | None = None
    smallest_bits = learner_bits(layers, batch, 1)
    for dp in range(1, batch + 1):
        units = budget.dsp // (dp * dsp_per_mac)
        if units < len(stages):
            break  # fewer MAC units than stages: no more pipelines fit (Eq. 2)
        uf = balanced_uf(stages, units)
        dsp = dp * sum(uf) * dsp_per_mac
        bits = learner_bits(layers, batch, dp)
        if dsp > budget.dsp or bits > budget.bits:
            continue
        interval = max(math.ceil(s.ops / u) for s, u in zip(stages, uf))
        latency = interval / clock_hz * (math.ceil(batch / dp) + len(stages))
        if best is None or latency < best.latency_s:
            best = LearnerDesign(dp, uf, latency, dsp, bits, len(stages))
    if best is not None:
        return best, ""
    if budget.dsp < len(stages) * dsp_per_mac:
        return None, (f"the learner needs at least {len(stages) * dsp_per_mac} DSPs (one per stage); "
                      f"{budget.dsp} available")
    over = smallest_bits - budget.bits
    return None, (f"the learner needs {smallest_bits / 1e6:.2f} Mbit of on-chip RAM; "
                  f"{budget.bits / 1e6:.2f} Mbit available (over by {over / 1e6:.2f} Mbit)")


# --------------------------------------------------------------------------- matrix row
def _int_option(device: "DeviceSpec", name: str, default: int) -> int:
    from pearl_core.errors import SpecError

    value = device.options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(f"device {device.name!r}: options.{name} = {value!r} is invalid; expected an integer >= 1.")
    return value


def device_row(device: "DeviceSpec", workload: "Workload") -> "DeviceRow":
    """The composer's matrix row for an FPGA described in a hardware spec (compute only, no communication).

    Device options: ``initiation_interval`` (default 2), ``dsp_per_mac`` (default 1).
    """
    from pearl_core.sdk import CostCell, DeviceRow

    ii = _int_option(device, "initiation_interval", 2)
    dsp_per_mac = _int_option(device, "dsp_per_mac", 1)
    f = float(device.clock_hz)  # type: ignore[arg-type]
    budget = FpgaBudget(int(device.dsp_blocks), int(device.ram_blocks), int(device.ram_block_bits),  # type: ignore[arg-type]
                        int(device.logic_ram_blocks), int(device.logic_ram_block_bits))  # type: ignore[arg-type]
    p = device.active_power_w
    notes: list[str] = []
    config: dict = {"initiation_interval": ii}
    bs, bsi, levels, k = workload.batch_size, int(workload.insert_batch or 1), workload.tree_levels, workload.fanout

    rm_cells: list[CostCell] | None = None
    rm = None
    if workload.replay == "uniform":
        notes.append("uniform replay: no sum tree on the FPGA (index generation only)")
        rm_cells = [CostCell(ii / f * (bs + 1), p, "analytic"), CostCell(0.0, p, "analytic"),
                    CostCell(0.0, p, "analytic")]
    else:
        rm = rm_design(workload.capacity, k, levels, budget)
        problem = rm_fit_problem(rm, budget)
        if problem:
            notes.append(problem)
        else:
            rm_cells = [CostCell(rm_sample_s(bs, levels, k, f, ii), p, "analytic"),
                        CostCell(rm_update_s(bs, levels, f, ii), p, "analytic"),
                        CostCell(rm_insert_s(bsi, levels, f, ii), p, "analytic")]
            config.update(rm_levels=levels, rm_dsp=rm.dsp, rm_ram_blocks=rm.ram_blocks,
                          rm_logic_ram_blocks=rm.logic_ram_blocks)

    convs = [ly.name for ly in workload.layers if ly.kind != "linear"]
    learner = co_learner = None
    if convs:
        notes.append(f"the FPGA learner pipeline supports nn.Linear stacks only; found {convs}")
    else:
        design, why = learner_design(workload.layers, bs, budget, f, dsp_per_mac)
        if design is None:
            notes.append(why)
        else:
            learner = CostCell(design.latency_s, p, "analytic")
            config.update(learner_dp=design.dp, learner_uf=",".join(map(str, design.uf)), learner_dsp=design.dsp)
        if rm_cells is not None:
            left = budget.minus(rm) if rm is not None else budget
            co_design, co_why = learner_design(workload.layers, bs, left, f, dsp_per_mac)
            if co_design is None:
                notes.append(f"RM and learner do not fit together: beside the RM, {co_why}")
            else:
                co_learner = CostCell(co_design.latency_s, p, "analytic")
                config.update(co_learner_dp=co_design.dp, co_learner_uf=",".join(map(str, co_design.uf)))
    co_rm = rm_cells if co_learner is not None else None
    return DeviceRow(device.name, device.kind,
                     *(rm_cells or (None, None, None)), learner,
                     *(co_rm or (None, None, None)), co_learner,
                     config=config, notes=tuple(notes))
