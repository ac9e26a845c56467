"""The composer: hardware spec, Primitive Device Assignment Matrix, Algorithm 1, and the plan."""

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
from pearl_core.composer.matrix import AssignmentMatrix, CostCell, DeviceRow
from pearl_core.composer.spec import DeviceSpec, HardwareSpec, LinkSpec, load_spec
from pearl_core.composer.workload import LearnerLayer, Workload, hidden_layers, learner_layers, workload_for_env

__all__ = [
    "METRICS", "AssignmentMatrix", "Candidate", "CostCell", "DSOption", "Decision", "DeviceRow", "DeviceSpec",
    "HardwareSpec", "LearnerLayer", "LinkSpec", "Message", "Workload", "algorithm1", "evaluate_candidate",
    "hidden_layers", "iteration_messages", "learner_layers", "load_spec", "place_storage", "workload_for_env",
]
