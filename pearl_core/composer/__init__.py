"""The composer: hardware spec, Primitive Device Assignment Matrix, Algorithm 1, and the plan.

The pieces, in the order they are used::

    spec   = HardwareSpec.load("examples/hardware/cpu-gpu-fpga.toml")   # or HardwareSpec.detect()
    wl     = workload_for_env("CartPole-v1", batch_size=32, trainer_kwargs={"hidden_sizes": (64, 64)})
    matrix = fill_matrix(spec, wl)               # profiled / analytic cells, one row per device
    dec    = algorithm1(spec, matrix, wl, "throughput")   # every candidate, the choice, DS placement
    plan   = make_plan(spec, wl, "throughput")   # the two steps above, as a frozen JSON-able Plan
    plan.runtime_plan()                          # -> pearl_core.runtime.config.RuntimePlan

Nothing here imports a plugin: device kinds, backend names and FPGA cost models
come through the plugin registry (``Backend.analytic_cells``).
"""

from pearl_core.composer.algorithm import (
    METRICS,
    Candidate,
    Decision,
    DSOption,
    Message,
    algorithm1,
    evaluate_candidate,
    iteration_messages,
    place_storage,
)
from pearl_core.composer.api import ComposedRun, Composer, ComposerError, RuntimeGen, print_plan
from pearl_core.composer.costs import fill_matrix, row_for_device
from pearl_core.composer.matrix import AssignmentMatrix, CostCell, DeviceRow
from pearl_core.composer.plan import Plan, make_plan
from pearl_core.composer.spec import DeviceSpec, HardwareSpec, LinkSpec, load_spec
from pearl_core.composer.workload import LearnerLayer, Workload, hidden_layers, learner_layers, workload_for_env

__all__ = [
    "METRICS",
    "AssignmentMatrix",
    "Candidate",
    "ComposedRun",
    "Composer",
    "ComposerError",
    "CostCell",
    "DSOption",
    "Decision",
    "DeviceRow",
    "DeviceSpec",
    "HardwareSpec",
    "LearnerLayer",
    "LinkSpec",
    "Message",
    "Plan",
    "RuntimeGen",
    "Workload",
    "algorithm1",
    "evaluate_candidate",
    "fill_matrix",
    "hidden_layers",
    "iteration_messages",
    "learner_layers",
    "load_spec",
    "make_plan",
    "place_storage",
    "print_plan",
    "row_for_device",
    "workload_for_env",
]
