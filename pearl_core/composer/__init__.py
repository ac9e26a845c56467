"""The composer: hardware spec, Primitive Device Assignment Matrix, Algorithm 1, and the plan.

The pieces, in the order they are used::

    spec   = HardwareSpec.load("examples/hardware/cpu-gpu-fpga.toml")   # or detect_hardware()
    wl     = workload_for_env("CartPole-v1", batch_size=32, trainer_kwargs={"hidden_sizes": (64, 64)})
    matrix = fill_matrix(spec, wl)               # profiled / analytic cells, one row per device
    dec    = algorithm1(spec, matrix, wl, "throughput")   # every candidate, the choice, DS placement
    plan   = make_plan(spec, wl, "throughput")   # the two steps above, as a frozen JSON-able PlacementPlan
    plan.runtime_plan()                          # -> pearl_core.runtime.config.RuntimePlan (what runs)

and, for users, the paper's listing: ``Composer`` collects the settings,
``Composer.run()`` returns a frozen ``Composition`` (placement plan, run config,
runtime plan, user script) and ``RuntimeGen(composition, path)`` writes the program.

Nothing here imports a plugin: device kinds, backend names and FPGA cost models
come through the plugin registry (the ``AnalyticCostModel`` protocol of :mod:`pearl_core.composer.costs`).
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
from pearl_core.composer.api import Composer, ComposerError, RuntimeGen, print_plan
from pearl_core.composer.composition import Composition
from pearl_core.composer.costs import fill_matrix, row_for_device
from pearl_core.composer.matrix import AssignmentMatrix, CostCell, DeviceRow
from pearl_core.composer.plan import PlacementPlan, make_plan
from pearl_core.composer.plan import Plan  # noqa: F401 - former name of PlacementPlan (older generated programs)
from pearl_core.composer.spec import DeviceSpec, HardwareSpec, LinkSpec, load_spec
from pearl_core.composer.workload import LearnerLayer, Workload, hidden_layers, learner_layers, workload_for_env

__all__ = [
    "METRICS",
    "AssignmentMatrix",
    "Candidate",
    "Composer",
    "ComposerError",
    "Composition",
    "CostCell",
    "DSOption",
    "Decision",
    "DeviceRow",
    "DeviceSpec",
    "HardwareSpec",
    "LearnerLayer",
    "LinkSpec",
    "Message",
    "PlacementPlan",
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
