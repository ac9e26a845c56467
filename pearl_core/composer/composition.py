"""What :meth:`Composer.run() <pearl_core.composer.api.Composer.run>` returns: a frozen :class:`Composition`.

A composition is everything a generated training program is made of, as values:

* ``plan`` — the :class:`~pearl_core.composer.plan.PlacementPlan` (Algorithm 1's
  choice, the matrix and every candidate behind it);
* ``config`` — the :class:`~pearl_core.runtime.config.RunConfig` (what to train);
* ``runtime_plan`` — the :class:`~pearl_core.runtime.config.RuntimePlan` the
  runtime executes (the placement plan's, with the composer's overrides);
* ``user_script`` — the path of the script that defines the trainer class, when
  that class lives in the script itself.

:func:`~pearl_core.composer.api.RuntimeGen` writes a composition as a program and
needs nothing else: no process state, no registry. Two compositions of the same
placement plan (say, with other stop criteria) are two independent values.

In the paper's listing the composition is what users call "plan"::

    plan = composer.run()
    plan.rm_device, plan.learner_device, plan.ds_device, plan.setting, plan.predicted_iteration_s
    RuntimeGen(plan, "runtime.py")

A placement plan made without a :class:`~pearl_core.composer.api.Composer`
(e.g. by :func:`~pearl_core.composer.plan.make_plan`) becomes one with the run
config it is for: ``Composition(plan, run_config)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pearl_core.composer.plan import PlacementPlan, forwarded, setting_label
from pearl_core.errors import ComposerError
from pearl_core.runtime.config import RunConfig, RuntimePlan

__all__ = ["USER_SCRIPT_MODULE", "Composition"]

#: Module name under which a generated program loads the user's script (trainer defined in ``__main__``).
USER_SCRIPT_MODULE = "pearl_user_script"


@dataclass(frozen=True, repr=False)
class Composition:
    """A placement plan with the run it was composed for; validated on construction.

    Attributes:
        plan: where each primitive runs, and why.
        config: what to train; its workload (environment, batch size, replay)
            must be the one the plan was made for.
        runtime_plan: what the runtime executes; default ``plan.runtime_plan()``.
        user_script: absolute path of the composing script that the generated
            program loads: it defines the trainer (``config.trainer`` names
            :data:`USER_SCRIPT_MODULE`) or registers the environment at import
            (:func:`~pearl_core.composer.runtimegen.env_script`); else ``None``.
        refusals: why the plan cannot run here, one line per problem (primitive,
            device, why, fix); empty when it runs as composed. A plan with
            refusals is a what-if plan: :func:`~pearl_core.composer.api.RuntimeGen`
            refuses it.
        emulated: emulated devices count as present (``Composer(emulated=True)``).
        checked: ``refusals`` were computed (by :meth:`Composer.run`); a
            composition built by hand is checked by ``RuntimeGen``.
        notices: what :meth:`Composer.run` changed for this machine and the user should
            know, printed with the plan (e.g. thread counts of a spec of another machine
            sized to the cores here, :func:`~pearl_core.composer.here.fit_threads_here`).

    Raises:
        ComposerError: a part has the wrong type, the parts describe different
            workloads, or the trainer cannot be imported by the generated program.
    """

    plan: PlacementPlan
    config: RunConfig
    runtime_plan: RuntimePlan = None  # type: ignore[assignment] # filled in from the plan
    user_script: str | None = None
    refusals: tuple[str, ...] = ()
    emulated: bool = False
    checked: bool = False
    notices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "refusals", tuple(str(r) for r in self.refusals))
        object.__setattr__(self, "notices", tuple(str(n) for n in self.notices))
        if isinstance(self.plan, PlacementPlan) and self.runtime_plan is None:
            object.__setattr__(self, "runtime_plan", self.plan.runtime_plan())
        for name, cls in (("plan", PlacementPlan), ("config", RunConfig), ("runtime_plan", RuntimePlan)):
            value = getattr(self, name)
            if not isinstance(value, cls):
                raise ComposerError(f"Composition: {name} = {value!r:.80} is a {type(value).__name__}; expected a "
                                    f"{cls.__name__}. Fix: compose with plan = composer.run(), or build "
                                    "Composition(placement_plan, run_config).")
        _check_same_workload(self.plan, self.config, self.runtime_plan)
        _check_trainer_source(self.config.trainer, self.user_script)

    # -- the choice, as users read it off "the plan" (the placement plan's) -----------
    rm_device = forwarded("plan", "rm_device", "Name of the device the replay manager runs on.")
    learner_device = forwarded("plan", "learner_device", "Name of the device the learner runs on.")
    ds_device = forwarded("plan", "ds_device", "Name of the device that holds the Data Storage.")
    setting = forwarded("runtime_plan", "setting", "The protocol :class:`~pearl_core.runtime.config.Setting` "
                        "the program runs (the runtime plan's).")
    predicted_iteration_s = forwarded("plan", "predicted_iteration_s", "Predicted seconds per learner iteration.")
    chosen = forwarded("plan", "chosen", "The chosen (RM, learner) candidate with its Eq. 7 terms.")
    metric = forwarded("plan", "metric", "The metric the plan was scored by.")

    @property
    def runnable(self) -> bool:
        """Whether the plan runs here as composed (checked, and no refusals)."""
        return self.checked and not self.refusals

    def content_hash(self) -> str:
        """The placement plan's hash (``PLAN_HASH`` in the generated program)."""
        return self.plan.content_hash()

    def __repr__(self) -> str:  # the fields in full are a screenful: print_plan shows them
        return (f"Composition(plan {self.content_hash()[:12]}: RM on {self.rm_device!r}, learner on "
                f"{self.learner_device!r}, Data Storage on {self.ds_device!r}, {setting_label(self.setting)}, "
                f"{'what-if plan (cannot run here), ' if self.refusals else ''}"
                f"predicted {self.predicted_iteration_s * 1e6:,.1f} us per iteration; env "
                f"{self.config.env_id!r}, trainer {self.config.trainer!r})")


def _check_same_workload(plan: PlacementPlan, config: RunConfig, runtime_plan: RuntimePlan) -> None:
    wl = plan.workload
    pairs = [("environment id", wl.get("env_id"), config.env_id), ("batch size", wl.get("batch_size"),
             config.batch_size), ("replay kind", wl.get("replay"), config.replay.kind),
             ("replay capacity", wl.get("capacity"), config.replay.capacity),
             ("sum-tree fanout", wl.get("fanout"), config.replay.fanout),
             ("actors", wl.get("n_actors"), runtime_plan.n_actors)]
    for what, planned, given in pairs:
        if planned != given:
            raise ComposerError(f"Composition: the plan was composed for {what} {planned!r} but the run config "
                                f"says {given!r}. Fix: run the composer again with these settings (or pass the "
                                "config the plan was made for).")


def _check_trainer_source(trainer: str, user_script: str | None) -> None:
    module = trainer.partition(":")[0]
    if module == "__main__":
        raise ComposerError(f"Composition: the run config names trainer {trainer!r}, a class in '__main__', which "
                            "a generated program cannot import. Fix: pass the class to a Composer (it records the "
                            "script that defines it), or move the trainer into a module.")
    if module == USER_SCRIPT_MODULE and not user_script:
        raise ComposerError(f"Composition: trainer {trainer!r} lives in the user's script but no script path was "
                            "given. Fix: pass user_script=<path of the script>.")
