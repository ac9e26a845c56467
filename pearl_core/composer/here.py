"""Fitting a composed plan to this machine: the best runnable plan, and thread counts sized to the cores here.

:meth:`Composer.run(runnable=True) <pearl_core.composer.api.Composer.run>` asks two
things of a plan composed for described hardware:

* :func:`runnable_plan`: Algorithm 1 again, over the same matrix, restricted to the
  placements that pass the runtime's own preflight here (every device present,
  every primitive built by its backend) on devices that detection matched
  (:func:`not_detected`: a device the spec describes but no backend detects here is
  a what-if device, whatever its device string, so it never passes as the real one);
* :func:`fit_threads_here`: the runtime plan's learner and replay-manager threads
  sized to the cores here when the spec's host CPU is not this machine. A spec
  describing a 16-core Xeon plans 16 learner threads; run as written on a 2-core
  machine, those threads share two cores with the actors and each other (torch's
  OpenMP threads wait for one another at every parallel region). The CPU backend's
  rule for a profiled host is applied instead: the learner gets at most the cores
  the actors leave, the RM (setting 1) the cores left after both, at least one
  each; in setting 2 the RM runs in the learner's worker and gets at most its
  threads. The placement plan (and its hash) stays the one composed for the spec;
  the composition's runtime plan (what RuntimeGen writes) is resized, and a notice
  printed with the plan names both thread counts and this machine's cores.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

from pearl_core.runtime.config import Setting

if TYPE_CHECKING:
    from pearl_core.composer.plan import PlacementPlan
    from pearl_core.composer.workload import Workload
    from pearl_core.runtime.config import RuntimePlan
    from pearl_core.runtime.preflight import Preflight

__all__ = ["fit_threads_here", "not_detected", "runnable_plan", "whatif_refusals"]


def runnable_plan(composer: Any, plan: "PlacementPlan", wl: "Workload", preflight: "Preflight",
                  choose: "Callable[[str, str], bool] | None", note: str
                  ) -> "tuple[PlacementPlan, RuntimePlan, list[str]]":
    """The best plan whose placements all pass ``preflight`` (each device probed once per primitive);
    ``composer`` is the :class:`~pearl_core.composer.api.Composer` composing."""
    from pearl_core.composer.plan import make_plan

    probe = plan.runtime_plan(**composer._actor_fields())  # the composer's own helper
    strings = {d.name: d.device_string for d in composer.spec.devices}
    whatif = {d.name for d in composer.spec.devices
              if d.name != composer.spec.host and not_detected(d, composer.registry) is not None}

    def ok(prim: str, dev: str) -> bool:
        if (choose is not None and not choose(prim, dev)) or dev in whatif:
            return False
        s, backends = strings[dev], plan.backends
        one = dataclasses.replace(probe, setting=Setting.THROUGH_HOST, backends=backends, device_config={}, **{
            "rm": {"rm_device": s, "rm_backend": backends.get(s.split(":")[0], s.split(":")[0])},
            "learner": {"learner_device": s}, "storage": {"storage_device": s}}[prim])
        if preflight.present(s, backends):
            return False
        check = {"rm": preflight.replay_manager, "learner": preflight.learner, "storage": preflight.storage}[prim]
        return check(one) is None

    why = "placements that can run here" + (f" and {note}" if note else "")
    best = make_plan(composer.spec, wl, composer.metric, registry=composer.registry, matrix=plan.matrix, choose=ok,
                     constraint=why)
    runtime_plan = best.runtime_plan(**composer._actor_fields())
    return best, runtime_plan, preflight.problems(runtime_plan)


def whatif_refusals(composer: Any, plan: "PlacementPlan") -> list[str]:
    """One line per device of ``plan`` (the host aside) that detection does not match here
    (:func:`not_detected`): a what-if device, even where a device of its string is present."""
    out = []
    for name in dict.fromkeys((plan.rm_device, plan.learner_device, plan.ds_device)):
        why = None if name == composer.spec.host else not_detected(composer.spec.device(name), composer.registry)
        if why is not None:
            out.append(f"{name}: {why}")
    return out


def not_detected(device: Any, registry: Any = None) -> str | None:
    """Why the spec's ``device`` is not the device here that its device string names, or ``None`` when it is.

    Its identity comes from detection (its name, or ``options.detected_as``, is the name of a device an
    available backend of its kind detects: :func:`~pearl_core.composer.profiling.present_device`), never
    from its place in the spec: its index must be that device's position among its backend's devices.
    """
    from pearl_core.composer.profiling import present_device

    found = present_device(device, registry)
    if found is None:
        return (f"device {device.name!r} ({device.kind}) is described by the spec but detected by no backend here: "
                "a what-if device. Fix: name the detected device it is with options.detected_as "
                "(`pearl devices` lists them), or compose a what-if plan without --runnable")
    bname, backend, info = found
    if device.kind == "cpu":
        return None  # torch has one CPU device: its index names nothing
    try:
        position = [i.name for i in backend.devices()].index(info.name)
    except Exception:  # noqa: BLE001 - a backend that cannot list its devices again has none
        return f"backend {bname!r} could not list its devices again to place {device.name!r}"
    if device.index != position:
        return (f"device {device.name!r} is detected as {info.name!r} (device {position} of backend {bname!r}), "
                f"but the spec gives it index {device.index}. Fix: remove its index (or set {position})")
    return None


def fit_threads_here(spec: Any, runtime_plan: "RuntimePlan", *, registry: Any = None,
                     cores: int | None = None) -> "tuple[RuntimePlan, str | None]":
    """``(runtime plan, notice)``: the plan's CPU threads sized to this machine's cores when the spec's host
    is not this machine and asks for more than the rule above allows; ``notice`` is ``None`` when nothing
    changed (a host detected here was profiled with its own cores; a plan that fits is kept).

    ``cores`` defaults to the cores this process may use (:func:`pearl_core.validation.cpu_count`).
    """
    from pearl_core.composer.profiling import present_device
    from pearl_core.validation import cpu_count

    host = next(d for d in spec.devices if d.name == spec.host)
    if host.kind != "cpu" or present_device(host, registry) is not None:
        return runtime_plan, None
    here = int(cores or cpu_count() or 1)
    rp = runtime_plan
    learner_on_cpu = rp.learner_device == "cpu"
    learner = min(rp.learner_threads, max(1, here - rp.n_actors)) if learner_on_cpu else rp.learner_threads
    if rp.setting == Setting.COLOCATED and learner_on_cpu:
        rm = min(rp.rm_threads, learner)
    else:
        rm = min(rp.rm_threads, max(1, here - rp.n_actors - (learner if learner_on_cpu else 0)))
    if (learner, rm) == (rp.learner_threads, rp.rm_threads):
        return rp, None
    described = host.threads or host.cores
    notice = (f"the hardware spec's host {host.name!r} ({described} hardware threads) is not this machine, which "
              f"has {here} core(s): the plan's {rp.learner_threads} learner and {rp.rm_threads} replay-manager "
              f"thread(s) would oversubscribe it, so the program uses {learner} learner and {rm} replay-manager "
              f"thread(s) here ({rp.n_actors} actor(s) keep their cores). The placement plan stays the one "
              "composed for the spec. Fix: compose without -H (or with a spec of this machine) to plan for it.")
    return dataclasses.replace(rp, learner_threads=learner, rm_threads=rm), notice
