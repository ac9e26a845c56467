"""Callbacks: your code at a run's steps, evaluations and checkpoints; any of them may stop the run.

::

    from pearl_core.callbacks import BestModelSaver, Callback

    class StopWhenFlat(Callback):
        def __init__(self, patience=5):
            self.patience, self.best, self.flat = patience, float("-inf"), 0

        def on_evaluation(self, run, result):
            self.flat = 0 if result.mean_return > self.best else self.flat + 1
            self.best = max(self.best, result.mean_return)
            if self.flat >= self.patience:
                return run.stop(f"no better evaluation in {self.patience} tries")

    runtime = ParallelRuntime(config, plan, callbacks=[BestModelSaver(), StopWhenFlat()])

A callback subclasses :class:`Callback` (or is any object with some of its
methods) and overrides what it needs; every method gets a :class:`RunView` of
the run (counters, metrics, evaluations, ``log_dir``) and may call
:meth:`RunView.stop` to end the run once the current step is done (the run ends
as usual: final checkpoint, logs, ``result.json``; ``RunResult.stop_reason``
is ``"callback"``). Callbacks run in the run's host process, on its thread:

* :meth:`Callback.on_start` — once the run holds its ``log_dir`` (resumed runs too);
* :meth:`Callback.on_step` — at every logged metrics row (``metrics_every`` env steps) with the
  learner's latest metrics in ``run.metrics``;
* :meth:`Callback.on_evaluation` — after each greedy evaluation (:class:`EvalEvent`: its env
  steps, mean, std, returns, and :meth:`EvalEvent.save_policy` to keep the policy evaluated);
* :meth:`Callback.on_checkpoint` — after each checkpoint is written (the final one too);
* :meth:`Callback.on_end` — with the :class:`~pearl_core.runtime.control.RunResult`.

A callback that raises stops the run with a :class:`~pearl_core.errors.CallbackError`
naming the callback and the method, after a checkpoint of what is sound.

In a generated program or ``pearl train``: ``--callback pkg.module:Name`` (a class
or factory called with no arguments; repeatable) and ``--save-best``.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from pathlib import Path
from typing import Any, Callable, Sequence

from pearl_core.errors import CallbackError, SpecError

__all__ = ["HOOKS", "BestModelSaver", "Callback", "EvalEvent", "RunView", "load_callbacks"]

#: The methods a callback may have.
HOOKS = ("on_start", "on_step", "on_evaluation", "on_checkpoint", "on_end")


class Callback:
    """Base class of a callback: every method does nothing; override those you need (see the module docstring)."""

    def on_start(self, run: "RunView") -> None:
        """The run has started (or resumed): ``run.env_steps`` says where."""

    def on_step(self, run: "RunView") -> None:
        """A metrics row was logged (every ``metrics_every`` env steps)."""

    def on_evaluation(self, run: "RunView", result: "EvalEvent") -> None:
        """A greedy evaluation finished."""

    def on_checkpoint(self, run: "RunView", path: Path) -> None:
        """A checkpoint was written at ``path``."""

    def on_end(self, run: "RunView", result: Any) -> None:
        """The run ended with this :class:`~pearl_core.runtime.control.RunResult`."""


@dataclasses.dataclass(frozen=True)
class EvalEvent:
    """One finished greedy evaluation.

    Attributes:
        env_steps: the env steps of the policy evaluated.
        mean_return, std_return: over its episodes.
        returns: each episode's undiscounted return.
        save_policy: ``save_policy(path) -> Path`` writes a checkpoint of the policy evaluated
            (loadable with :func:`pearl_core.load_policy`); ``None`` when the runtime cannot.
    """

    env_steps: int
    mean_return: float
    std_return: float
    returns: tuple[float, ...]
    save_policy: Callable[[str | Path], Path] | None = None


class RunView:
    """What a callback sees of a run (read only), and :meth:`stop`."""

    def __init__(self, session: Any):
        """``session``: the run's :class:`~pearl_core.runtime.session.RunSession` (not imported here: it imports us)."""
        self._s = session

    @property
    def config(self):
        """The run's :class:`~pearl_core.runtime.config.RunConfig`."""
        return self._s.config

    @property
    def log_dir(self) -> Path:
        return self._s.log_dir

    @property
    def env_steps(self) -> int:
        return self._s.state.env_steps

    @property
    def updates(self) -> int:
        return self._s.state.updates

    @property
    def episodes(self) -> int:
        return self._s.state.episodes

    @property
    def wall_s(self) -> float:
        """Seconds of run time, resumed segments included."""
        return self._s.wall()

    @property
    def metrics(self) -> dict[str, float]:
        """The learner's latest metrics (e.g. ``loss``), as logged."""
        return dict(self._s.state.last_metrics or {})

    @property
    def mean_return(self) -> float | None:
        """Mean return of the recent training episodes (the stop monitor's window)."""
        return self._s.monitor.recent_mean()

    @property
    def eval_history(self) -> list[tuple[int, float, float]]:
        """``(env_steps, mean_return, wall_s)`` of every evaluation so far (resumed runs: theirs too)."""
        return list(self._s.state.eval_history)

    def stop(self, reason: str = "a callback asked to stop") -> bool:
        """End the run once the current step is done (``RunResult.stop_reason == "callback"``); returns ``False``."""
        self._s.request_stop(str(reason))
        return False


class BestModelSaver(Callback):
    """Keep the best policy evaluated so far as a checkpoint, ``log_dir/best_model.pt`` by default.

    Needs evaluations: give the run ``eval_every`` (or ``eval_return``). A resumed run starts from
    the best mean in its evaluation history, so it only replaces the file with a better policy.
    """

    def __init__(self, path: str | Path = "best_model.pt"):
        self.path = Path(path)
        self.best = -math.inf
        self.saved: Path | None = None

    def check(self, config: Any) -> None:
        """Refuse, before the run starts, a run without evaluations."""
        if not config.stop.evaluates:
            raise SpecError("BestModelSaver needs evaluations, and this run has none. Fix: set StopCriteria("
                            "eval_every=...) (pearl train --eval-every N).")

    def on_start(self, run: RunView) -> None:
        self.best = max((mean for _, mean, _ in run.eval_history), default=-math.inf)

    def on_evaluation(self, run: RunView, result: EvalEvent) -> None:
        if result.mean_return > self.best and result.save_policy is not None:
            self.best = result.mean_return
            path = self.path if self.path.is_absolute() else run.log_dir / self.path
            self.saved = result.save_policy(path)


def load_callbacks(specs: Sequence[Any], config: Any = None) -> list[Any]:
    """Callbacks from objects or ``"pkg.module:Name"`` strings (a class or factory, called with no arguments).

    A callback with a ``check(config)`` method is asked whether it can serve the run ``config`` describes.

    Raises:
        SpecError: a string that does not import, a factory that fails, or an object with none of :data:`HOOKS`.
    """
    out = []
    for spec in specs:
        obj = spec
        if isinstance(spec, str):
            module, sep, name = spec.partition(":")
            if not sep or not module or not name:
                raise SpecError(f"callback {spec!r}: expected 'package.module:Name' (a Callback subclass or a factory "
                                "called with no arguments). Fix: e.g. --callback my_callbacks:LogToMlflow.")
            try:
                target: Any = importlib.import_module(module)
                for part in name.split("."):
                    target = getattr(target, part)
                obj = target()
            except Exception as exc:  # a user's module raises any type
                raise SpecError(f"callback {spec!r} cannot be made ({type(exc).__name__}: {exc}). Fix: make "
                                f"{module!r} importable (run from its directory) and {name!r} callable with no "
                                "arguments.") from exc
        if not any(callable(getattr(obj, hook, None)) for hook in HOOKS):
            raise SpecError(f"callback {obj!r:.80} has none of the methods {list(HOOKS)}. Fix: subclass "
                            "pearl_core.callbacks.Callback and override what you need.")
        if config is not None and callable(getattr(obj, "check", None)):
            obj.check(config)
        out.append(obj)
    return out


def call(callbacks: Sequence[Any], hook: str, *args: Any) -> None:
    """Call ``hook`` on each callback that has it; a raise becomes a :class:`CallbackError` naming it."""
    for cb in callbacks:
        method = getattr(cb, hook, None)
        if method is None:
            continue
        try:
            method(*args)
        except Exception as exc:  # user code raises anything
            name = type(cb).__name__
            raise CallbackError(f"callback {name}.{hook} raised {type(exc).__name__}: {exc}. The run was stopped "
                                f"after a checkpoint of what is sound. Fix: fix {name}.{hook}, then resume the run "
                                "from its checkpoint.") from exc
