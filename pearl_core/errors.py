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


class DataError(PearlError, ValueError):
    """Non-finite data (NaN or inf) reached a run where it must not.

    Raised for an observation, reward or action of a training environment
    (``RunConfig.on_nonfinite == "stop"``, the default; the message names the
    environment, the actor, the environment index and the env step) and, inside
    the learner, for weights or trainer state that an update made non-finite (the
    message names the update; the run then ends with :class:`LearnerError`).
    Nothing of the bad step is stored; the run writes a final checkpoint of what
    is sound before the error reaches the caller.

    Attributes:
        component: where it was found (``"actor 0"``, ``"the serial runtime"``, ``"learner"``).
        env_id: the environment, if it came from one.
        env_step: the run's env-step count at the bad transition, if known.
        update: the learner update that produced it, if it came from the learner.
    """

    def __init__(self, message: str, *, component: str = "", env_id: str | None = None,
                 env_step: int | None = None, update: int | None = None):
        super().__init__(message)
        self.component = component
        self.env_id = env_id
        self.env_step = env_step
        self.update = update


class HostError(WorkerError):
    """A part of a run that runs in the calling process failed: the parallel runtime's
    host loop, or the serial runtime's own loop.

    Attributes:
        component: what failed (``"host"``, ``"evaluation"``, ...).
        traceback_text: the formatted traceback of the original exception (also its ``__cause__``).
    """

    def __init__(self, message: str, traceback_text: str = "", exitcode: int | None = None, *,
                 component: str = "host"):
        super().__init__(message, traceback_text, exitcode)
        self.component = component


class EvaluationError(HostError):
    """A greedy evaluation failed: its environment or ``get_action`` raised, or it stopped making progress."""

    def __init__(self, message: str, traceback_text: str = "", exitcode: int | None = None):
        super().__init__(message, traceback_text, exitcode, component="evaluation")


class StallError(WorkerError):
    """A worker of a parallel run made no progress for ``stall_timeout_s`` seconds, or did not
    answer the host in time (e.g. after Ctrl-C); the run ended after a checkpoint of what is sound.

    Attributes:
        role: ``"actor i"`` or ``"learner"``.
        pid: the stalled process's id.
        doing: what it was last doing, as far as it told the host (``"in env.step of environment 0"``).
        stalled_s: seconds without progress when the host gave up.
    """

    def __init__(self, message: str, *, role: str = "", pid: int | None = None, doing: str = "",
                 stalled_s: float | None = None):
        super().__init__(message)
        self.role = role
        self.pid = pid
        self.doing = doing
        self.stalled_s = stalled_s


class TransportError(WorkerError):
    """A queue transport between the processes of a run lost, duplicated or reordered a message: the
    sequence number or the count the core stamps on what it sends did not match on receipt.

    Attributes:
        transport: the transport's class (``module.Class``) and the plugin that gave it.
        queue: the queue (``"LAQ"``, ``"LDQ"``).
        expected, found: the sequence number expected and the one received (``found`` is ``None`` when
            messages sent never arrived).
    """

    def __init__(self, message: str, traceback_text: str = "", exitcode: int | None = None, *,
                 transport: str = "", queue: str = "", expected: int | None = None, found: int | None = None):
        super().__init__(message, traceback_text, exitcode)
        self.transport = transport
        self.queue = queue
        self.expected = expected
        self.found = found


class CheckpointNotFoundError(PearlError, FileNotFoundError):
    """:func:`pearl_core.load_policy` was given a path that does not exist, or a run directory that holds
    no checkpoint (yet). Also a :class:`FileNotFoundError`."""


class NotACheckpointError(SpecError):
    """A file given as a checkpoint is not a readable PEARL checkpoint (another file, a damaged or cut-short
    one, one of another format version), or its trainer state does not fit the trainer it names."""


class TrainerImportError(SpecError, ImportError):
    """The trainer class a checkpoint names (``RunConfig.trainer``, ``"package.module:ClassName"``) cannot be
    imported here. Also an :class:`ImportError`."""


class ExportError(PearlError):
    """A policy cannot be exported: no network that computes its greedy action was found (a user trainer can
    provide one with ``export_module()``), the format's package is missing, or the exported module's
    actions differ from :meth:`pearl_core.policy.Policy.predict`."""


class CallbackError(PearlError):
    """A user's callback (:mod:`pearl_core.callbacks`) raised; the message names it and the method."""


class PluginContractError(PearlError):
    """A plugin broke the plugin contract: its declared contract version is incompatible, two plugins claim one
    backend name, or a backend's object (a sum tree, a hook) returned or raised what the contract does not allow.
    The message names the plugin (its distribution), the contract point and the fix."""


class PluginTimeoutError(PluginContractError, TimeoutError):
    """A plugin's hook (a cost model) did not return within its deadline; the message names the plugin and hook."""
