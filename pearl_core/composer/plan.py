"""Algorithm 1's output: a frozen, JSON-serialisable :class:`PlacementPlan` with every number behind it.

A placement plan holds the hardware spec (in SI units), the workload, the
Primitive Device Assignment Matrix, Algorithm 1's
:class:`~pearl_core.composer.algorithm.Decision` (every candidate's predicted
time, throughput, power and traffic, the Data Storage costs, the choice) and the
backend that drives each device kind. It is data first;
:meth:`PlacementPlan.runtime_plan` turns it into the runtime's
:class:`~pearl_core.runtime.config.RuntimePlan` (what the runtime executes), and
:meth:`PlacementPlan.content_hash` identifies it in generated programs.
:meth:`Composer.run() <pearl_core.composer.api.Composer.run>` returns it inside a
:class:`~pearl_core.composer.composition.Composition`, with the run it was composed for.

Typical use::

    spec = HardwareSpec.load("examples/hardware/cpu-gpu-fpga.toml")
    wl = workload_for_env("CartPole-v1", batch_size=32, trainer_kwargs={"hidden_sizes": (64, 64)})
    plan = make_plan(spec, wl, metric="throughput")
    plan.rm_device, plan.learner_device, plan.ds_device, plan.setting
    plan.runtime_plan()          # RuntimePlan(rm_backend='cpu', learner_device='cuda:0', ...)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from pearl_core.composer.algorithm import Decision, algorithm1
from pearl_core.composer.backends import spec_backends, storage_unfit
from pearl_core.composer.costs import Profiler, fill_matrix
from pearl_core.composer.matrix import AssignmentMatrix
from pearl_core.composer.spec import HardwareSpec
from pearl_core.composer.tuning import host_variants, pick_variant
from pearl_core.composer.workload import Workload
from pearl_core.errors import SpecError
from pearl_core.runtime.config import Setting

if TYPE_CHECKING:
    from pearl_core.plugins import PluginRegistry
    from pearl_core.composer.tuning import Variant
    from pearl_core.runtime.config import RuntimePlan

__all__ = ["PLAN_FORMAT", "PlacementPlan", "forwarded", "make_plan", "pearl_version", "setting_label"]

#: Version of the plan's JSON layout (bump on incompatible changes).
PLAN_FORMAT = 1


def pearl_version() -> str:
    """The version of pearl-core (recorded in plans, profile caches and generated programs)."""
    from pearl_core._version import __version__

    return __version__


def setting_label(setting: int) -> str:
    """``"setting 2 (co-located)"`` or ``"setting 1 (through the host)"``."""
    setting = Setting(setting)
    return f"setting {int(setting)} " + ("(co-located)" if setting == Setting.COLOCATED else "(through the host)")


def _freeze(value: Any) -> Any:
    """Canonical JSON-compatible copy (tuples -> lists, mappings -> dicts) for equality and hashing."""
    return json.loads(json.dumps(value, sort_keys=True, allow_nan=False))


def forwarded(owner: str, name: str, doc: str) -> property:
    """A read-only attribute that reads ``self.<owner>.<name>`` (a value's view of a part it holds)."""
    return property(lambda self: getattr(getattr(self, owner), name), doc=doc)


@dataclass(frozen=True)
class PlacementPlan:
    """Where each primitive runs, and why: Algorithm 1's choice with every number that led to it.

    Attributes:
        spec: :meth:`HardwareSpec.to_dict` (SI units) of the hardware planned for.
        workload: :meth:`Workload.to_dict`.
        matrix: the Primitive Device Assignment Matrix used.
        decision: Algorithm 1's candidates, DS options and choice.
        backends: backend name per device kind (``{"cpu": "cpu", "cuda": "cuda"}``).
        pearl_version: version of pearl-core that made the plan.
        tuning: when the RM and the learner share the host CPU, the runtime
            variants (setting 1 / 2, thread split) with their predictions and the
            chosen one (:mod:`pearl_core.composer.tuning`): ``{"variants": [...],
            "chosen": index}``; empty otherwise.
    """

    spec: Mapping[str, Any]
    workload: Mapping[str, Any]
    matrix: AssignmentMatrix
    decision: Decision
    backends: Mapping[str, str] = field(default_factory=dict)
    pearl_version: str = ""
    tuning: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tuning", _freeze(dict(self.tuning)))
        object.__setattr__(self, "spec", _freeze(dict(self.spec)))
        object.__setattr__(self, "workload", _freeze(dict(self.workload)))
        object.__setattr__(self, "backends", dict(self.backends))

    # -- the choice ----------------------------------------------------------------
    rm_device = forwarded("decision", "rm_device", "Name of the device the replay manager runs on.")
    learner_device = forwarded("decision", "learner_device", "Name of the device the learner runs on.")
    ds_device = forwarded("decision", "ds_device", "Name of the device that holds the Data Storage.")
    metric = forwarded("decision", "metric", "The metric the plan was scored by.")
    chosen = forwarded("decision", "chosen", "The chosen (RM, learner) :class:`Candidate`.")
    candidates = forwarded("decision", "candidates", "Every (RM, learner) :class:`Candidate`, in spec order.")

    @property
    def setting(self) -> Setting:
        """The protocol :class:`~pearl_core.runtime.config.Setting` (the tuned variant's, if any)."""
        v = self.variant
        return v.setting if v is not None else self.decision.setting

    @property
    def predicted_iteration_s(self) -> float:
        """Predicted seconds per learner iteration of the choice (the tuned variant's, if any)."""
        v = self.variant
        return v.predicted_s if v is not None else float(self.chosen.iteration_s)

    @property
    def variants(self) -> "tuple[Variant, ...]":
        """The host-CPU runtime variants considered (empty unless RM and learner share the host)."""
        from pearl_core.composer.tuning import Variant

        return tuple(Variant.from_dict(v) for v in self.tuning.get("variants", ()))

    @property
    def variant(self) -> "Variant | None":
        """The chosen host-CPU variant, or ``None``."""
        vs, i = self.variants, self.tuning.get("chosen")
        return vs[i] if vs and isinstance(i, int) else None

    def hardware(self) -> HardwareSpec:
        """The spec as a :class:`HardwareSpec` again (kinds are not re-checked against plugins)."""
        kinds = {d["kind"] for d in self.spec["device"]}
        return HardwareSpec.from_dict(self.spec, source="plan", kinds=kinds)

    def workload_value(self) -> Workload:
        return Workload.from_dict(self.workload)

    def _device(self, name: str) -> Mapping[str, Any]:
        for d in self.spec["device"]:
            if d["name"] == name:
                return d
        raise SpecError(f"the plan's spec has no device {name!r}.")

    def device_string(self, name: str) -> str:
        """``"cpu"`` or ``"<kind>:<index>"`` of a device of the plan."""
        d = self._device(name)
        return "cpu" if d["kind"] == "cpu" else f"{d['kind']}:{d.get('index', 0)}"

    def runtime_plan(self, **overrides: Any) -> "RuntimePlan":
        """The runtime's :class:`RuntimePlan` for this choice.

        ``rm_backend`` is the backend of the RM device's kind, ``learner_device``
        and ``storage_device`` are device strings, ``setting`` is :attr:`setting`, thread
        counts come from the matrix rows (CPU devices), ``n_actors`` and
        ``envs_per_actor`` from the workload, ``vector_backend`` by
        :func:`~pearl_core.runtime.vector.choose_vector_backend` (``"loop"`` for one env
        per actor; for more, ``"envpool"`` where EnvPool has the env as PEARL builds it and was
        measured faster than the loop, else ``"gym-sync"`` if measured faster, else ``"loop"``).
        Keyword arguments override any field.
        """
        from pearl_core.runtime.config import RuntimePlan

        rm_kind = self._device(self.rm_device)["kind"]
        used = {self._device(n)["kind"] for n in (self.rm_device, self.learner_device, self.ds_device)}
        values: dict[str, Any] = {
            "rm_backend": self.backends.get(rm_kind, rm_kind),
            "rm_device": self.device_string(self.rm_device),
            "learner_device": self.device_string(self.learner_device),
            "storage_device": self.device_string(self.ds_device),
            "setting": self.setting,
            "n_actors": int(self.workload["n_actors"]),
            "envs_per_actor": int(self.workload.get("envs_per_actor", 1)),
            "backends": {k: v for k, v in sorted(self.backends.items()) if k in used},
            "device_config": self.device_config(),
        }
        rm_cfg = self.matrix.row(self.rm_device).config
        ln_cfg = self.matrix.row(self.learner_device).config
        if self.setting == Setting.COLOCATED:
            rm_t, ln_t = rm_cfg.get("co_rm_threads"), rm_cfg.get("co_learner_threads")
        else:
            rm_t, ln_t = rm_cfg.get("rm_threads"), ln_cfg.get("learner_threads")
        if isinstance(rm_t, int):
            values["rm_threads"] = rm_t
        if isinstance(ln_t, int) and self._device(self.learner_device)["kind"] == "cpu":
            values["learner_threads"] = ln_t
        v = self.variant
        if v is not None:
            values.update(setting=v.setting, learner_threads=v.learner_threads, rm_threads=v.rm_threads)
        values.update(overrides)
        if "vector_backend" not in overrides:  # the composer's rule (pearl_core.runtime.vector)
            from pearl_core.runtime.vector import choose_vector_backend

            values["vector_backend"] = choose_vector_backend(
                str(self.workload.get("env_id", "")), values["envs_per_actor"], self.workload.get("env_kwargs"),
                self.workload.get("env_wrappers"))[0]
        return RuntimePlan(**values)

    def device_config(self) -> dict[str, dict[str, Any]]:
        """The matrix-row ``config`` of the RM, learner and Data Storage devices that are not CPUs (their
        backend's settings, e.g. an FPGA's ``learner_dp``/``learner_uf``), for the runtime plan; the CPU
        rows' thread counts are already the plan's thread fields."""
        out = {}
        for key, name in (("rm", self.rm_device), ("learner", self.learner_device), ("storage", self.ds_device)):
            if self._device(name)["kind"] != "cpu":
                cfg = {k: v for k, v in self.matrix.row(name).config.items()
                       if isinstance(v, (str, int, float, bool)) or v is None}
                if cfg:
                    out[key] = cfg
        return out

    # -- serialisation --------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"format": PLAN_FORMAT, "pearl_version": self.pearl_version, "spec": self.spec,
                "workload": self.workload, "backends": dict(sorted(self.backends.items())),
                "matrix": self.matrix.to_dict(), "decision": self.decision.to_dict(), "tuning": dict(self.tuning)}

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=indent, allow_nan=False)

    def canonical_json(self) -> str:
        """Sorted keys, no whitespace, ASCII: the text :meth:`content_hash` digests."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)

    def content_hash(self) -> str:
        """sha256 (hex) of :meth:`canonical_json`: equal plans, equal hashes, across runs and machines."""
        return hashlib.sha256(self.canonical_json().encode("ascii")).hexdigest()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PlacementPlan":
        if data.get("format") != PLAN_FORMAT:
            raise SpecError(f"plan format = {data.get('format')!r} is not supported; expected {PLAN_FORMAT}. "
                            "Fix: re-run the composer with this version of PEARL.")
        return cls(data["spec"], data["workload"], AssignmentMatrix.from_dict(data["matrix"]),
                   Decision.from_dict(data["decision"]), data.get("backends", {}), data.get("pearl_version", ""),
                   data.get("tuning", {}))

    @classmethod
    def from_json(cls, text: str) -> "PlacementPlan":
        return cls.from_dict(json.loads(text))


#: The former name of :class:`PlacementPlan`, kept so that programs generated before the rename still run.
Plan = PlacementPlan


def make_plan(spec: HardwareSpec, workload: Workload, metric: str = "throughput", *,
              matrix: AssignmentMatrix | None = None, comm_inclusive: bool | None = None,
              registry: "PluginRegistry | None" = None, profiler: Profiler | None = None,
              choose: "Callable[[str, str], bool] | None" = None, constraint: str = "") -> PlacementPlan:
    """Fill the matrix (unless given), run Algorithm 1, and wrap everything in a :class:`PlacementPlan`.

    Args:
        spec: the hardware.
        workload: the iteration to plan for.
        metric: ``"throughput"`` or ``"power_efficiency"``.
        matrix: a matrix to use instead of filling one (e.g. the paper's; set
            ``comm_inclusive`` on it, or pass ``comm_inclusive``).
        comm_inclusive: override the matrix's flag.
        registry: plugin registry (backend models and names); default the installed one.
        profiler: optional measurement hook for present devices (see :func:`fill_matrix`).
        choose, constraint: restrict the choice (see :func:`~pearl_core.composer.algorithm.algorithm1`).

    Raises:
        SpecError: no feasible choice, or two backends drive one kind and the spec does not choose.
    """
    backends = spec_backends(spec, registry)
    if matrix is None:
        matrix = fill_matrix(spec, workload, registry=registry, profiler=profiler)
    decision = algorithm1(spec, matrix, workload, metric, comm_inclusive=comm_inclusive, choose=choose,
                          constraint=constraint, storage_unfit=storage_unfit(spec, backends, registry))
    tuning: dict[str, Any] = {}
    if decision.rm_device == decision.learner_device == spec.host:
        host = next(d for d in spec.devices if d.name == spec.host)
        variants = host_variants(host, matrix.row(spec.host), workload)
        if variants:
            tuning = {"variants": [v.to_dict() for v in variants], "chosen": pick_variant(variants, metric)}
    return PlacementPlan(spec.to_dict(), workload.to_dict(), matrix, decision, backends, pearl_version(), tuning)
