"""Can this plan run here? Every placement checked before a program is written or a run starts.

:class:`Preflight` asks, for a :class:`~pearl_core.runtime.config.RuntimePlan`
and the run it is for, what the runtime itself will ask
(:mod:`pearl_core.placement`), and builds each piece once, small:

* each device is present (:func:`~pearl_core.placement.device_present`; an
  emulator counts only with ``emulated=True``);
* the replay manager's backend makes a sum tree of the plan's fanout on its device;
* the learner is built on its device as the runtime would build it (the
  backend's device trainer, torch on the backend's device, or the trainer
  with the backend's kernel) from the run's trainer and keyword arguments;
* the Data Storage is made on its device (host memory on a CPU);
* setting 2 has the replay manager and the learner on one device.

Each problem is one line: the primitive, the device, why, and the fix. The
composer reports them (a plan with problems is a *what-if* plan), and
:func:`~pearl_core.composer.api.RuntimeGen` refuses to write such a plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from pearl_core.envs import env_spaces
from pearl_core.placement import device_present, make_storage, make_tree
from pearl_core.replay.storage import StorageSpec
from pearl_core.runtime.config import RunConfig, RuntimePlan
from pearl_core.runtime.wiring import build_trainer

if TYPE_CHECKING:
    from pearl_core.plugins import PluginRegistry

__all__ = ["Preflight"]


def _line(primitive: str, device: str, exc: BaseException) -> str:
    text = str(exc)
    return text if text.startswith(primitive) else f"{primitive} on {device!r}: {type(exc).__name__}: {text}"


class Preflight:
    """Check plans for one run (results are cached per primitive and device).

    Args:
        config: the run the plans are for (trainer, its keyword arguments, replay).
        registry: the plugin registry the runtime will use (default: the installed one).
        emulated: count emulated devices (the FPGA Emulation Device) as present.
        trainer_cls: the trainer class, when the caller holds it (a class defined in the
            user's script is not importable by ``config.trainer``'s path in this process).
        remember: ``remember(plan, build)`` runs the learner's build ``build()`` (its refusal or
            ``None``) or answers from what it remembers of an earlier one (the composer's
            :func:`~pearl_core.composer.checkcache.learner_preflight`); default: always build.
        spaces: the environment's ``(observation_space, action_space)`` when the caller has them
            (default: built from ``config``'s environment when first needed).
    """

    def __init__(self, config: RunConfig, *, registry: "PluginRegistry | None" = None, emulated: bool = False,
                 trainer_cls: type | None = None,
                 remember: "Callable[[RuntimePlan, Callable[[], str | None]], str | None] | None" = None,
                 spaces: tuple[Any, Any] | None = None):
        self.config, self.registry, self.emulated = config, registry, bool(emulated)
        self.trainer_cls = trainer_cls
        self.remember = remember
        self._spaces: tuple[Any, Any] | None = spaces
        self._cache: dict[tuple, str | None] = {}

    def _spaces_of_env(self) -> tuple[Any, Any]:
        if self._spaces is None:
            self._spaces = env_spaces(self.config.env_id, **self.config.env_options)
        return self._spaces

    def _cached(self, key: tuple, check) -> str | None:
        if key not in self._cache:
            self._cache[key] = check()
        return self._cache[key]

    # -- one primitive --------------------------------------------------------------------
    def present(self, device: str, backends: Mapping[str, str]) -> str | None:
        def check() -> str | None:
            why = device_present(device, registry=self.registry, backends=backends, emulated=self.emulated)
            return None if why is None else f"device {device!r} is not here: {why}"

        return self._cached(("present", device, tuple(sorted(backends.items()))), check)

    def replay_manager(self, plan: RuntimePlan) -> str | None:
        rc = self.config.replay
        if rc.kind != "prioritized":
            return None

        def check() -> str | None:
            try:
                make_tree(plan.rm_backend, plan.rm_device, min(rc.capacity, 4 * rc.fanout), rc.fanout,
                          threads=plan.rm_threads, registry=self.registry)
            except Exception as exc:  # noqa: BLE001 - every failure is a refusal with its reason
                return _line("replay manager", plan.rm_device, exc)
            return None

        return self._cached(("rm", plan.rm_backend, plan.rm_device, plan.rm_threads), check)

    def learner(self, plan: RuntimePlan) -> str | None:
        def check() -> str | None:
            try:
                build_trainer(self.config, *self._spaces_of_env(), check=False, plan=plan,
                              trainer_cls=self.trainer_cls)
            except Exception as exc:  # noqa: BLE001 - every failure is a refusal with its reason
                return _line("learner", plan.learner_device, exc)
            return None

        key = ("learner", plan.learner_device, repr(sorted(plan.learner_config().items())),
               tuple(sorted(plan.backends.items())))
        remember = self.remember
        return self._cached(key, check if remember is None else (lambda: remember(plan, check)))

    def storage(self, plan: RuntimePlan) -> str | None:
        def check() -> str | None:
            try:
                make_storage(StorageSpec.from_spaces(*self._spaces_of_env()), 1, plan.storage_device,
                             registry=self.registry, backends=plan.backends)
            except Exception as exc:  # noqa: BLE001 - every failure is a refusal with its reason
                return _line("Data Storage", plan.storage_device, exc)
            return None

        return self._cached(("storage", plan.storage_device, tuple(sorted(plan.backends.items()))), check)

    # -- a whole plan ---------------------------------------------------------------------
    def problems(self, plan: RuntimePlan) -> list[str]:
        """Every reason ``plan`` cannot run here (empty: it runs as composed)."""
        devices = [d for d, used in ((plan.rm_device, self.config.replay.kind == "prioritized"),
                                     (plan.learner_device, True), (plan.storage_device, True)) if used]
        absent = [p for p in dict.fromkeys(self.present(d, plan.backends) for d in devices) if p]
        if absent:
            return absent
        found = [self.replay_manager(plan), self.learner(plan), self.storage(plan)]
        return [p for p in found if p]
