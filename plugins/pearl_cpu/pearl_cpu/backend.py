"""The CPU backend: a native n-ary sum tree (C++, pybind11, threads) and a native DQN learner step."""

from __future__ import annotations

import os
import platform
from typing import TYPE_CHECKING, Any, Callable

from pearl_core.errors import InvalidOptionError
from pearl_core.sdk import Availability, Backend, DeviceInfo, SumTree

if TYPE_CHECKING:
    from pearl_core.sdk import DeviceSpec, MeasureRequest, PrimitiveCost, Workload


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


class CpuBackend(Backend):
    """Host CPU backend. Sum-tree options: ``threads`` (default: all cores), ``device`` (``"cpu"``).

    The learner runs torch on the CPU (``torch_device_type``), with the native
    ``"dqn_mlp"``, ``"td3_mlp"`` and ``"sac_mlp"`` steps where they apply; the Data Storage is the core's
    host-memory one and the transports are the core's shared-memory queues
    (this backend overrides neither ``make_storage`` nor ``make_transport``).
    """

    name = "cpu"
    device_kind = "cpu"
    torch_device_type = "cpu"

    def availability(self) -> Availability:
        try:
            from pearl_cpu import _sumtree  # noqa: F401 - the compiled extension
        except ImportError as exc:
            return Availability.no(
                f"the native extension pearl_cpu._sumtree failed to import ({exc}); "
                "reinstall pearl-cpu so it is compiled for this Python"
            )
        return Availability.yes()

    def devices(self) -> list[DeviceInfo]:
        if not self.availability().available:
            return []
        cores = os.cpu_count() or 1
        details = {"cores": cores, "memory_bytes": _memory_bytes(), "machine": platform.machine()}
        return [DeviceInfo("cpu0", "cpu", self.name, _cpu_model(), details)]

    def make_sum_tree(self, capacity: int, fanout: int = 16, **options: Any) -> SumTree:
        from pearl_cpu.sumtree import CpuSumTree

        threads = options.pop("threads", None)
        device = options.pop("device", "cpu")
        if options:
            raise InvalidOptionError(f"cpu backend: unknown sum-tree options {sorted(options)}; "
                                     "known: ['device', 'threads']")
        if str(device).split(":", 1)[0] != "cpu":
            raise InvalidOptionError(f"cpu backend: device = {device!r}; expected 'cpu' (this backend drives the "
                                     "host CPU). Fix: ask the backend of that device's kind.")
        return CpuSumTree(capacity, fanout, threads=threads)

    def learner_kernel(self, name: str) -> Callable[..., Any] | None:
        """``"dqn_mlp"``: the native DQN step (:func:`pearl_cpu.learner.dqn_mlp_kernel`); ``"dqn_cnn"``: the
        same after one convolution (:func:`pearl_cpu.learner.dqn_cnn_kernel`, the small image encoder);
        ``"td3_mlp"``: the native TD3/DDPG step (:func:`pearl_cpu.learner.td3_mlp_kernel`);
        ``"sac_mlp"``: the native SAC step (:func:`pearl_cpu.learner.sac_mlp_kernel`); each when
        its extension imports and numpy's BLAS exposes ``cblas_sgemm``; else ``None``."""
        modules = {"dqn_mlp": "_learner", "dqn_cnn": "_learner", "td3_mlp": "_learner_ac", "sac_mlp": "_learner_ac"}
        if name not in modules:
            return None
        try:
            import importlib

            importlib.import_module(f"pearl_cpu.{modules[name]}")  # the compiled extension
            from pearl_cpu import learner
        except ImportError:
            return None
        return getattr(learner, f"{name}_kernel") if learner.find_sgemm() is not None else None

    def measure_primitive(self, device: "DeviceSpec", workload: "Workload",
                          request: "MeasureRequest") -> "PrimitiveCost":
        """Measure one primitive of ``workload`` on this CPU at the threads the composer asks for.

        The composer decides what to measure (thread counts, variants, calibration runs:
        :mod:`pearl_core.composer.hostprofile`); this runs the real replay classes and the real trainer on
        synthetic data with the SDK's measuring helpers (the replay's sum tree is this backend's, with
        ``request.threads`` threads) and reports medians.
        """
        from pearl_core.sdk import (
            PrimitiveCost,
            profile_actor_step,
            profile_learner,
            profile_message_hop,
            profile_replay_ops,
            profile_worker_loop,
        )

        kind, t, budget = request.primitive, request.threads, request.budget_s
        n, warm = request.iterations, request.warmup
        if kind == "actor_step":
            return PrimitiveCost(kind, t, profile_actor_step(workload, iterations=n, budget_s=budget))
        if kind == "learner":
            return PrimitiveCost(kind, t, profile_learner(workload, threads=t, iterations=n, warmup=warm,
                                                          budget_s=budget))
        if kind == "message_hop":
            return PrimitiveCost(kind, t, profile_message_hop())
        plan = {"rm_backend": self.name, "rm_threads": t}
        if kind == "replay":
            rm = profile_replay_ops(workload, plan, iterations=n, warmup=warm, budget_s=budget)
            return PrimitiveCost(kind, t, rm["sample"] + rm["update"] + rm["insert"], sample_s=rm["sample"],
                                 update_s=rm["update"], insert_s=rm["insert"])
        if kind == "worker_loop":
            co = profile_worker_loop(workload, plan, threads=t, iterations=n, warmup=warm, budget_s=budget)
            return PrimitiveCost(kind, t, sum(co.values()), sample_s=co["sample"], update_s=co["update"],
                                 insert_s=co["insert"], learner_s=co["learner"])
        raise InvalidOptionError(f"cpu backend: cannot measure primitive {kind!r}; expected one of "
                                 "['actor_step', 'learner', 'replay', 'worker_loop', 'message_hop'].")
