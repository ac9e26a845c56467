"""One error hierarchy for PEARL.

Every error PEARL raises derives from :class:`PearlError`. Errors caused by bad
input also derive from the matching builtin (``ValueError``, ``IndexError``,
``TypeError``) so that code written against plain numpy habits still catches
them. Messages say what failed, on which object, expected vs found, and the fix.
"""

from __future__ import annotations


class PearlError(Exception):
    """Base class of every error raised by PEARL."""


class InvalidValueError(PearlError, ValueError):
    """An argument has the right type but a value outside its contract."""


class InvalidIndexError(PearlError, IndexError):
    """An index is outside ``[0, capacity)``."""


class InvalidDTypeError(PearlError, TypeError):
    """An array cannot be converted safely to the dtype an operation needs."""


class EmptyTreeError(PearlError, ValueError):
    """Sampling was asked of a sum tree whose priorities are all zero."""


class BackendUnavailableError(PearlError):
    """A backend was asked for but cannot be used.

    Attributes:
        backend: the backend name that was asked for.
        cause: the original exception (import error, missing device, ...), if any.
    """

    def __init__(self, message: str, *, backend: str | None = None, cause: BaseException | None = None):
        super().__init__(message)
        self.backend = backend
        self.cause = cause


class PluginLoadError(PearlError):
    """A plugin's entry point failed to import or to register."""


class SpecError(PearlError, ValueError):
    """A configuration or hardware specification is malformed."""


class TrainerError(PearlError):
    """A trainer class does not meet the trainer contract (:mod:`pearl_core.trainer`).

    Raised by :func:`pearl_core.trainer_check.check_trainer` before a run starts:
    missing methods, a constructor that fails, an input shape or action kind that
    does not match the environment, no ``nn.Linear``/``nn.Conv2d`` layers, or a
    smoke call of ``get_action``/``update_policy`` that returns the wrong thing.
    """


class ComposerError(PearlError, ValueError):
    """A Composer method was called out of order, without a required setting, or with a bad value."""


class WorkerError(PearlError):
    """A worker process of a parallel run failed.

    Attributes:
        traceback_text: the worker's formatted traceback (``""`` when it died
            without one, e.g. killed by a signal).
        exitcode: the process's exit code (negative: killed by that signal), if known.
    """

    def __init__(self, message: str, traceback_text: str = "", exitcode: int | None = None):
        super().__init__(message)
        self.traceback_text = traceback_text
        self.exitcode = exitcode


class ActorError(WorkerError):
    """An actor kept failing after its restarts were used up."""


class LearnerError(WorkerError):
    """The learner (setting 1) or the replay + learner worker (setting 2) failed."""


class InvalidOptionError(PearlError, TypeError):
    """A backend or kernel was given a keyword option it does not know."""


class NothingToReadError(PearlError, LookupError):
    """A read found nothing to return: an empty replay, or a transport nothing was sent through."""


class DeviceRuntimeError(PearlError, RuntimeError):
    """A device library or a native kernel failed while it ran (no usable device, a missing symbol)."""


class KernelUnavailableError(SpecError):
    """A trainer was told to use a native learner kernel that no installed backend provides."""


class PlacementError(SpecError):
    """A placement cannot be executed here: no installed backend runs that primitive on that device.

    Raised before anything is written (by the composer, by :func:`~pearl_core.composer.api.RuntimeGen`
    and by the runtime's constructors); the message names the primitive, the device, why, and the fix.
    """
