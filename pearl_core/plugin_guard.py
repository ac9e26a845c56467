"""What stands between the core and a plugin's code: contract versions, older hooks, deadlines, checked trees.

:mod:`pearl_core.plugins` applies it to every backend object it creates (:func:`adapt_backend`):

* **Contract version** (:func:`declared_api`): the version a plugin module declares in
  ``PEARL_PLUGIN_API`` (:mod:`pearl_core.hookspecs`), checked against
  :data:`~pearl_core.hookspecs.PLUGIN_API_VERSION` when the plugin is registered.
* **Older hooks**: a backend whose plugin declares an older minor is called without the
  keyword options later minors added (:data:`~pearl_core.hookspecs.OPTIONS_SINCE`).
* **Deadlines**: the cost models ``analytic_cells``, ``measure_primitive`` and ``profile_cells`` run in a
  thread under a deadline (:data:`HOOK_DEADLINES_S`, or ``PEARL_PLUGIN_DEADLINE_S``); one that does not return
  raises :class:`~pearl_core.errors.PluginTimeoutError` naming the plugin and hook, and is not
  called again (the composer then plans without that row, saying why). Within a :func:`call_deadline`
  block a call's deadline is the shorter of the hook's and the block's (the profiling budget's share of a probe).
* **Checked trees**: ``make_sum_tree`` returns a :class:`GuardedSumTree`, which checks what the
  plugin's tree returns (types, shapes, ranges, finite values, no zero-priority sample) and turns
  any exception the contract does not allow into a :class:`~pearl_core.errors.PluginContractError`
  that names the plugin and the contract point. Errors the contract allows (bad input:
  ``InvalidValueError``, ``InvalidIndexError``, ``InvalidDTypeError``, ``EmptyTreeError``) pass
  unchanged. The device face (``update_device``, ...) is forwarded unchecked (a check would read the device).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import threading
from typing import Any, Callable, Iterator

import numpy as np

from pearl_core.errors import PearlError, PluginContractError, PluginTimeoutError
from pearl_core.hookspecs import OPTIONS_SINCE, PLUGIN_API_ATTR, PLUGIN_API_VERSION
from pearl_core.sumtree import SumTree, check_masses

__all__ = ["DEADLINE_ENV", "GuardedSumTree", "HOOK_DEADLINES_S", "adapt_backend", "call_deadline", "declared_api",
           "format_api", "with_deadline"]

#: Seconds a backend's cost-model hook may take before the composer gives up on it.
HOOK_DEADLINES_S = {"analytic_cells": 60.0, "measure_primitive": 600.0, "profile_cells": 1800.0}
#: A guarded tree audits its first :data:`AUDIT_FIRST` samples and one in :data:`AUDIT_EVERY` after: ``total()``
#: against the sum of its leaves, and the priorities of the leaves sampled (none zero). Every sample is checked
#: for its type, shape and index range; the audits read every leaf, so they are spaced to cost the hot path
#: about a microsecond per sample at 2^20 leaves (every sample audited would cost ~35 us there).
AUDIT_FIRST = 16
AUDIT_EVERY = 4096
#: The relative difference between ``total()`` and the leaves' sum that the audit tolerates (float drift).
TOTAL_AUDIT_RTOL = 1e-6
#: Environment variable that overrides every deadline of :data:`HOOK_DEADLINES_S` (seconds, > 0).
DEADLINE_ENV = "PEARL_PLUGIN_DEADLINE_S"


def format_api(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def declared_api(plugin: Any) -> tuple[int, int] | None:
    """The contract version ``plugin`` declares in ``PEARL_PLUGIN_API``, or ``None`` when it declares none.

    Raises:
        PluginContractError: the declaration is not ``"<major>.<minor>"`` (or a pair of ints).
    """
    raw = getattr(plugin, PLUGIN_API_ATTR, None)
    if raw is None:
        return None
    parts: Any = raw.split(".") if isinstance(raw, str) else raw
    try:
        if len(parts) == 2 and all(not isinstance(p, bool) and int(p) >= 0 and str(int(p)) == str(p).strip()
                                   for p in parts):
            return int(parts[0]), int(parts[1])
    except (TypeError, ValueError):
        pass
    raise PluginContractError(
        f"{PLUGIN_API_ATTR} = {raw!r} is invalid; expected a string '<major>.<minor>' such as "
        f"{format_api(PLUGIN_API_VERSION)!r}, the plugin contract version the plugin was written against. "
        f"Fix: write {PLUGIN_API_ATTR} = \"{format_api(PLUGIN_API_VERSION)}\" in the plugin module (a literal).")


_LOCAL = threading.local()


@contextlib.contextmanager
def call_deadline(seconds: float | None) -> Iterator[None]:
    """Guarded hooks called in this thread within the block get at most ``seconds`` (``None``: no change); the
    hook's own deadline (or ``$PEARL_PLUGIN_DEADLINE_S``) still applies when it is shorter."""
    outer = getattr(_LOCAL, "deadline", None)
    _LOCAL.deadline = seconds if outer is None or seconds is None else min(outer, seconds)
    if seconds is None:
        _LOCAL.deadline = outer
    try:
        yield
    finally:
        _LOCAL.deadline = outer


def _deadline_s(hook: str) -> float:
    own = _hook_deadline_s(hook)
    local = getattr(_LOCAL, "deadline", None)
    return own if local is None else min(own, max(float(local), 1e-3))


def _hook_deadline_s(hook: str) -> float:
    raw = os.environ.get(DEADLINE_ENV, "").strip()
    if raw:
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise PluginContractError(f"{DEADLINE_ENV} = {raw!r} is invalid; expected a number of seconds > 0. "
                                      f"Fix: set it to e.g. 120, or unset it (defaults: {HOOK_DEADLINES_S}).")
        return value
    return HOOK_DEADLINES_S[hook]


def with_deadline(fn: Callable[..., Any], hook: str, owner: str) -> Callable[..., Any]:
    """``fn`` run in a daemon thread under the deadline of ``hook``: a call that does not return in time raises
    :class:`PluginTimeoutError`; later calls then raise at once (the first is still running)."""
    hung: list[float] = []

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if hung:
            raise PluginTimeoutError(
                f"{owner}: {hook} did not return within {hung[0]:g} s at an earlier call (it is still running), so "
                f"it is not called again. Fix: repair the plugin's {hook}, or uninstall the plugin.")
        seconds = _deadline_s(hook)
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                box["error"] = exc

        worker = threading.Thread(target=run, name=f"pearl-{hook}", daemon=True)
        worker.start()
        worker.join(seconds)
        if worker.is_alive():
            hung.append(seconds)
            raise PluginTimeoutError(
                f"{owner}: {hook} did not return within its deadline of {seconds:g} s (a plugin cost model must "
                f"return a row or None). Fix: repair the plugin's {hook} (or uninstall the plugin); if the model is "
                f"only slow, raise the deadline with {DEADLINE_ENV}=<seconds>.")
        if "error" in box:
            raise box["error"]
        return box["value"]

    return call


def _late_bound(backend: Any, hook: str) -> Callable[..., Any]:
    """``backend``'s ``hook``, looked up on its class at each call (a method the class gets later, or a test's
    replacement, is the one called); an instance's own attribute as it is."""
    own = getattr(backend, "__dict__", {}).get(hook)
    if own is not None:
        return own  # an instance attribute the backend set itself
    cls = type(backend)

    @functools.wraps(getattr(cls, hook))
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(cls, hook).__get__(backend, cls)(*args, **kwargs)

    return call


def adapt_backend(backend: Any, owner: str, api: tuple[int, int]) -> Any:
    """Fit a new backend object to the core: options newer than ``api`` dropped, cost models under deadlines,
    sum trees checked. Sets instance attributes only (the class is untouched); returns ``backend``."""
    for hook in HOOK_DEADLINES_S:
        if callable(getattr(backend, hook, None)):
            setattr(backend, hook, with_deadline(_late_bound(backend, hook), hook, owner))
    newer = tuple(o for o, since in OPTIONS_SINCE["make_sum_tree"].items() if api < since)
    make = backend.make_sum_tree

    @functools.wraps(make)
    def make_sum_tree(capacity: Any, fanout: Any = 16, **options: Any) -> SumTree:
        for name in newer:  # the plugin was written before the core passed these
            options.pop(name, None)
        try:
            tree = make(capacity, fanout, **options)
        except PearlError:
            raise
        except Exception as exc:  # named as the plugin's fault
            raise _breach(owner, "make_sum_tree", f"raised {type(exc).__name__}: {exc}",
                          "bad arguments raise InvalidValueError (or InvalidOptionError), nothing else") from exc
        if not isinstance(tree, SumTree):
            raise _breach(owner, "make_sum_tree", f"returned {type(tree).__name__} {tree!r:.80}",
                          "an instance of pearl_core.sdk.SumTree")
        if (tree.capacity, tree.fanout) != (capacity, fanout):
            raise _breach(owner, "make_sum_tree", f"returned a tree of capacity {tree.capacity!r} and fanout "
                          f"{tree.fanout!r} for make_sum_tree({capacity!r}, {fanout!r})",
                          "the capacity and fanout asked for")
        return GuardedSumTree(tree, owner)

    backend.make_sum_tree = make_sum_tree
    return backend


def _breach(owner: str, method: str, found: str, expected: str) -> PluginContractError:
    return PluginContractError(
        f"{owner} broke the SumTree contract in {method}: it {found}; expected {expected} (pearl_core.sumtree). "
        "This is a bug in that plugin, not in your input. Fix: report it to the plugin's authors (the "
        "conformance kit, pearl_core.testing.SumTreeConformance, reproduces it), or place the replay manager on "
        "another backend.")


def _length(values: Any) -> int:
    """The length of a 1-D input (-1 for any other: a tree that accepted it broke the contract already)."""
    return int(np.shape(values)[0]) if np.ndim(values) == 1 else -1


#: The attributes a :class:`GuardedSumTree` keeps itself; any other is the plugin tree's (read and written there).
_GUARD_FIELDS = frozenset({"inner", "owner", "capacity", "fanout", "_samples"})


class GuardedSumTree(SumTree):
    """A plugin's tree, every result checked against the contract (see the module docstring).

    Attributes:
        inner: the plugin's tree.
        owner: who made it, for messages (``"backend 'cpu' (plugin 'cpu', pearl-cpu 0.1.0)"``).
    """

    def __init__(self, inner: SumTree, owner: str):
        self.inner = inner
        self.owner = owner
        self.capacity = inner.capacity
        self.fanout = inner.fanout
        self._samples = 0

    def _audit_total(self) -> None:
        """``total()`` against the sum of the leaves (one read of every leaf; see :data:`AUDIT_EVERY`)."""
        leaves = self.get(np.arange(self.capacity, dtype=np.int64))
        found, want = self.total(), float(np.sum(leaves))
        if not abs(found - want) <= TOTAL_AUDIT_RTOL * max(found, want):
            raise _breach(self.owner, "total", f"returned {found!r} while its leaves sum to {want!r}",
                          f"the sum of the leaves (within a relative {TOTAL_AUDIT_RTOL:g})")

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self.inner, method)(*args)
        except PearlError:
            raise
        except Exception as exc:  # named as the plugin's fault
            raise _breach(self.owner, method, f"raised {type(exc).__name__}: {exc}",
                          "bad input to raise InvalidValueError, InvalidIndexError, InvalidDTypeError or "
                          "EmptyTreeError, and valid input to raise nothing") from exc

    def _array(self, method: str, out: Any, dtype: type, n: int) -> np.ndarray:
        if not isinstance(out, np.ndarray) or out.dtype != dtype or out.shape != (n,):
            found = (f"returned {type(out).__name__} of dtype {getattr(out, 'dtype', None)} and shape "
                     f"{getattr(out, 'shape', None)}")
            raise _breach(self.owner, method, found, f"a {np.dtype(dtype).name} numpy array of shape ({n},)")
        return out

    def update(self, indices: Any, priorities: Any) -> None:
        try:
            out = self._call("update", indices, priorities)
        except PearlError:
            self.total()  # a refusal caused by a broken total (NaN) is the plugin's fault, named as such
            raise
        if out is not None:
            raise _breach(self.owner, "update", f"returned {out!r:.80}", "None")

    update._keeps_total_finite = True  # type: ignore[attr-defined] # the plugin's tree keeps its own total finite

    def get(self, indices: Any) -> np.ndarray:
        out = self._array("get", self._call("get", indices), np.float64, _length(indices))
        if not (out >= 0).all():  # NaN fails too
            bad = int(np.argmin(out >= 0))
            raise _breach(self.owner, "get", f"returned priority {float(out[bad])!r} at position [{bad}]",
                          "the stored priorities: finite and >= 0")
        return out

    def sample(self, masses: Any) -> np.ndarray:
        try:
            out = self._call("sample", masses)
        except PearlError as exc:
            if isinstance(exc, PluginContractError):
                raise
            total = self.inner.total()
            try:  # the contract refuses only masses outside [0, total * (1 + drift)], and an all-zero tree
                check_masses(masses, total)
            except PearlError:
                raise exc from None
            raise _breach(self.owner, "sample", f"raised {type(exc).__name__}: {exc} for masses the contract "
                          f"accepts (all in [0, total()] with total() = {total!r})", "leaf indices") from exc
        out = self._array("sample", out, np.int64, _length(masses))
        self._samples += 1
        audit = self._samples <= AUDIT_FIRST or self._samples % AUDIT_EVERY == 0
        if audit:
            self._audit_total()
        if out.size:
            if out.min() < 0 or out.max() >= self.capacity:
                bad = int(np.argmax((out < 0) | (out >= self.capacity)))
                raise _breach(self.owner, "sample", f"returned index {int(out[bad])} at position [{bad}]",
                              f"indices in [0, {self.capacity})")
            if not audit:
                return out
            prio = self._call("get", out)
            if not isinstance(prio, np.ndarray) or prio.shape != out.shape or not (prio > 0).all():
                bad = int(np.argmin(np.asarray(prio) > 0)) if np.shape(prio) == out.shape else 0
                raise _breach(self.owner, "sample", f"returned leaf {int(out[bad])} (position [{bad}]) whose "
                              f"priority is {float(np.asarray(prio).ravel()[bad]) if np.size(prio) else prio!r}",
                              "a leaf of positive priority for every mass (a zero-priority leaf is never sampled)")
        return out

    def total(self) -> float:
        out = self._call("total")
        ok = isinstance(out, (int, float, np.integer, np.floating)) and not isinstance(out, bool)
        if not ok or not (math.isfinite(out) and out >= 0):
            raise _breach(self.owner, "total", f"returned {out!r:.80}", "a finite float >= 0 (the sum of the leaves)")
        return float(out)

    def __reduce_ex__(self, protocol: Any) -> tuple:  # pickled as what it is (``__class__`` answers the plugin's)
        return GuardedSumTree, (self.inner, self.owner)

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance(tree, ThePluginsTree) holds, as for the plugin's own object
        return type(self.inner)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _GUARD_FIELDS:
            object.__setattr__(self, name, value)
        else:  # a plugin setting (e.g. the CPU tree's ``threads``) belongs to the plugin's tree
            setattr(self.inner, name, value)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "inner":  # pickling and half-built objects must not recurse
            raise AttributeError(name)
        return getattr(self.inner, name)  # the device face and any extra the plugin's tree offers

    def __repr__(self) -> str:
        return f"{self.inner!r} [{self.owner}]"

