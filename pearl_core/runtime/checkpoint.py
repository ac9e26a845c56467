"""Checkpoints: a run's trainer state, counters, stop-monitor state, config and plan,
optionally its replay contents; and the byte blobs states cross processes in.

* :func:`save_checkpoint` / :func:`load_checkpoint` — one file, written atomically
  (never a half-written file), read with torch's restricted unpickler.
* :func:`check_resumable` — whether a checkpoint can continue under a config;
  :func:`check_network_shapes` — whether the config builds networks of the
  checkpoint's shapes; :func:`load_trainer_state` — load a checkpoint's trainer
  state, a mismatch reported as :class:`~pearl_core.errors.SpecError`.
* :func:`dump_blob` / :func:`load_blob` — a state dict as bytes, so that torch
  never moves tensors through its own shared-memory files between processes.

A checkpoint file is untrusted input (it may come from another machine):
:func:`load_checkpoint` reads it with torch's restricted unpickler and names the
kind of damage (:class:`DamagedCheckpointError`: ``"unreadable"`` — cut short or
not a checkpoint; ``"format"`` — another format or version; ``"missing"`` — a part
absent; ``"shape"`` — tensors of other shapes or dtypes than the trainer built for
the run; ``"nonfinite"`` — NaN/inf weights); :func:`check_modules` refuses to
import the modules a checkpoint's config names (its trainer, an env's
``module:Id``, wrapper paths) unless they are PEARL's own or the caller trusts
them (``trust_modules=True``), since importing a module runs its code.
"""

from __future__ import annotations

import dataclasses
import errno
import io
import json
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from pearl_core.errors import NotACheckpointError, PearlError, SpecError
from pearl_core.fileio import atomic_write
from pearl_core.runtime.config import RunConfig, RuntimePlan
from pearl_core.runtime.control import RunState, StopMonitor

__all__ = ["CHECKPOINT_NAME", "Checkpoint", "CheckpointWriteError", "DamagedCheckpointError",
           "UntrustedCheckpointError", "check_modules", "check_network_shapes", "check_resumable", "checkpoint_modules",
           "dump_blob", "load_blob", "load_checkpoint", "load_trainer_state", "save_checkpoint"]

#: File name of the latest checkpoint inside ``config.log_dir``.
CHECKPOINT_NAME = "checkpoint.pt"
_CHECKPOINT_FORMAT = "pearl-checkpoint"
_CHECKPOINT_VERSION = 1


class CheckpointWriteError(PearlError, OSError):
    """A checkpoint could not be written (disk full, permissions); the previous checkpoint is intact.

    Also an :class:`OSError`, so code that catches write errors still does.
    """


class DamagedCheckpointError(NotACheckpointError):
    """A checkpoint file cannot be resumed as it is; :attr:`kind` says how it is damaged.

    Kinds: ``"unreadable"`` (cut short, empty, or not a checkpoint file), ``"format"``
    (another file format or format version), ``"missing"`` (a part of the checkpoint or a
    tensor of the trainer is absent), ``"shape"`` (tensors of other shapes or dtypes than
    the trainer built for the run), ``"nonfinite"`` (NaN/inf in the trainer state).
    """

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


class UntrustedCheckpointError(SpecError):
    """Resuming would import modules named by a checkpoint that are not PEARL's own, and they were not trusted."""


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """What :func:`load_checkpoint` returns.

    Attributes:
        trainer_state: the trainer's ``state_dict()``.
        state: the run counters.
        monitor: :meth:`StopMonitor.state_dict`.
        config, plan: the run's config and plan.
        replay: :func:`pearl_core.runtime.wiring.replay_state` (numpy arrays) or ``None``.
        extra: anything else the runtime stored.
    """

    trainer_state: dict[str, Any]
    state: RunState
    monitor: dict[str, Any]
    config: RunConfig
    plan: RuntimePlan
    replay: dict[str, Any] | None
    extra: dict[str, Any]


def _to_torch(tree: Any) -> Any:
    """numpy arrays -> torch tensors (loadable with ``weights_only=True``)."""
    import torch

    if isinstance(tree, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(tree))
    if isinstance(tree, Mapping):
        return {k: _to_torch(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_to_torch(v) for v in tree)
    if isinstance(tree, np.generic):
        return tree.item()
    return tree


def save_checkpoint(path: str | os.PathLike, *, trainer, state: RunState, monitor: StopMonitor | Mapping,
                    config: RunConfig, plan: RuntimePlan, replay: Mapping[str, Any] | None = None,
                    extra: Mapping[str, Any] | None = None) -> Path:
    """Write a checkpoint atomically (:func:`pearl_core.fileio.atomic_write`).

    A crash while writing leaves the previous checkpoint intact (never a
    half-written file under ``path``).

    Args:
        path: destination file.
        trainer: saved with ``trainer.state_dict()`` (``get_weights()`` for a
            duck-typed trainer without one).
        state: run counters.
        monitor: the stop monitor (or its ``state_dict()``).
        config, plan: stored as JSON.
        replay: :func:`pearl_core.runtime.wiring.replay_state` output, or ``None``.
        extra: JSON-like values to keep alongside.

    Returns:
        ``path`` as a :class:`Path`.

    Raises:
        CheckpointWriteError: the write failed (a full disk shows up as an
            ``OSError`` or as torch's ``RuntimeError`` "enforce fail at
            inline_container.cc"); the file at ``path`` is as it was.
    """
    import torch

    trainer_state = trainer.state_dict() if hasattr(trainer, "state_dict") else {"weights": trainer.get_weights()}
    payload = {
        "format": _CHECKPOINT_FORMAT,
        "version": _CHECKPOINT_VERSION,
        "trainer": _to_torch(trainer_state),
        "state": state.to_dict(),
        "monitor": monitor.state_dict() if isinstance(monitor, StopMonitor) else dict(monitor),
        "config": config.to_json(),
        "plan": plan.to_json(),
        "replay": _to_torch(dict(replay)) if replay is not None else None,
        "extra": json.dumps(dict(extra or {})),
    }
    try:
        return atomic_write(path, lambda fh: torch.save(payload, fh), make_parents=True)
    except (OSError, RuntimeError) as exc:
        raise _write_error(Path(path), exc) from exc


def _write_error(path: Path, exc: BaseException) -> CheckpointWriteError:
    code: int | None = getattr(exc, "errno", None)
    why = {None: "disk full?", errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
           errno.EACCES: "permission denied", errno.EROFS: "the file system is read-only"}.get(code, "disk full?")
    err = CheckpointWriteError(
        f"could not write checkpoint {str(path)!r}: {why} ({type(exc).__name__}: {exc}). The previous checkpoint "
        "there is intact (a new one replaces it only once it is complete). Fix: free space on (or write access "
        f"to) the disk holding {str(path.parent)!r}, or set another log_dir, then resume from the previous checkpoint.")
    err.errno = code
    return err


def _to_numpy(tree: Any) -> Any:
    import torch

    if isinstance(tree, torch.Tensor):
        return tree.numpy()
    if isinstance(tree, Mapping):
        return {k: _to_numpy(v) for k, v in tree.items()}
    return tree


def load_checkpoint(path: str | os.PathLike, *, weights_only: bool = True) -> Checkpoint:
    """Read and validate a checkpoint written by :func:`save_checkpoint` (an untrusted file: nothing of it runs).

    Args:
        path: the checkpoint file.
        weights_only: load with torch's restricted unpickler (safe for files
            you did not write). Set ``False`` only for trusted files whose
            trainer state holds arbitrary Python objects.

    Raises:
        SpecError: the path is missing or not a regular file (a directory, a FIFO, a device: said which).
        DamagedCheckpointError: the file is cut short or not a checkpoint (``kind="unreadable"``), of
            another format or version (``"format"``), lacks a part (``"missing"``), or its trainer
            state holds NaN/inf (``"nonfinite"``). Each message names the part, expected vs found, the fix.
    """
    import torch

    path = Path(path)
    _check_is_file(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=weights_only)
    except Exception as exc:  # any read error becomes a clear message
        detail, objects = _read_failure(exc)
        what = ("it holds Python objects that are not plain tensors, numbers, strings, lists or dicts (a trainer's "
                "state_dict() must return only those)" if objects else
                "the file is damaged (cut short by a crash or a full disk?) or is not a PEARL checkpoint")
        fix = ("make the trainer's state_dict() return tensors and plain values only (checkpoints are read with "
               "torch's safe loader), or resume from an earlier checkpoint" if objects else
               "resume from an earlier checkpoint (or start a new run in another log_dir)")
        raise DamagedCheckpointError(f"checkpoint {str(path)!r} could not be read ({detail}): {what}. Fix: {fix}.",
                                     "unreadable") from exc
    if not isinstance(payload, Mapping) or payload.get("format") != _CHECKPOINT_FORMAT:
        found = (f"a mapping with keys {sorted(map(str, payload))[:8]}" if isinstance(payload, Mapping) else
                 f"a {type(payload).__name__}")
        raise DamagedCheckpointError(
            f"{str(path)!r} is not a PEARL checkpoint; expected one written by save_checkpoint() (format "
            f"{_CHECKPOINT_FORMAT!r}), found {found}. Fix: pass the checkpoint.pt of a PEARL run's log_dir.", "format")
    if payload.get("version") != _CHECKPOINT_VERSION:
        raise DamagedCheckpointError(
            f"checkpoint {str(path)!r} has format version {payload.get('version')!r}; this PEARL reads "
            f"version {_CHECKPOINT_VERSION}. Fix: resume it with the PEARL version that wrote it.", "format")
    missing = [k for k in _PARTS if k not in payload]
    if missing:
        raise DamagedCheckpointError(
            f"checkpoint {str(path)!r} is damaged: it lacks {missing}; expected every part of {list(_PARTS)}. "
            "Fix: resume from an earlier checkpoint (or start a new run in another log_dir).", "missing")
    _check_finite(path, payload["trainer"])
    try:
        replay = payload.get("replay")
        return Checkpoint(
            trainer_state=dict(payload["trainer"]),
            state=RunState.from_dict(payload["state"]),
            monitor=dict(payload["monitor"]),
            config=RunConfig.from_json(payload["config"]),
            plan=RuntimePlan.from_json(payload["plan"]),
            replay=_to_numpy(replay) if replay is not None else None,
            extra=json.loads(payload.get("extra") or "{}"),
        )
    except PearlError as exc:  # e.g. a config field this PEARL does not know
        raise SpecError(f"checkpoint {str(path)!r} cannot be resumed here: {exc}") from exc
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DamagedCheckpointError(
            f"checkpoint {str(path)!r} is damaged: its {type(exc).__name__} ({exc}) shows a missing or malformed "
            "part. Fix: resume from an earlier checkpoint.", "missing") from exc


#: The parts every checkpoint holds (``replay`` and ``extra`` may be empty).
_PARTS = ("trainer", "state", "monitor", "config", "plan")


def _check_is_file(path: Path) -> None:
    """Raise unless ``path`` is a regular file (or a link to one), saying what it is instead."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        link = f" (a symbolic link to {os.readlink(path)!r}, which does not exist)" if path.is_symlink() else ""
        raise SpecError(f"checkpoint {str(path)!r} does not exist{link}. Fix: pass the path of a checkpoint.pt "
                        "file (or the run's log_dir).") from None
    except OSError as exc:
        raise SpecError(f"checkpoint {str(path)!r} cannot be examined ({type(exc).__name__}: {exc}). Fix: pass "
                        "the path of a readable checkpoint.pt file.") from exc
    if stat.S_ISREG(mode):
        return
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    what = next((name for test, name in kinds if test(mode)), "not a regular file")
    inside = path / CHECKPOINT_NAME
    fix = (f"pass {str(inside)!r}, the checkpoint file in it" if what == "a directory" and inside.is_file() else
           "pass the path of a checkpoint.pt file written by a PEARL run")
    raise SpecError(f"checkpoint {str(path)!r} is {what}, not a checkpoint file; expected a regular file written "
                    f"by a PEARL run. Nothing was read from it. Fix: {fix}.")


def _tensors(tree: Any, prefix: str = ""):
    """``(dotted.key, tensor)`` of every torch tensor in a (nested) state dict."""
    import torch

    if isinstance(tree, torch.Tensor):
        yield prefix or "(root)", tree
    elif isinstance(tree, Mapping):
        for k, v in tree.items():
            yield from _tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from _tensors(v, f"{prefix}.{i}" if prefix else str(i))


def _check_finite(path: Path, trainer_state: Any) -> None:
    """Raise :class:`DamagedCheckpointError` (``"nonfinite"``) if a float tensor of the trainer state holds NaN/inf."""
    import torch

    bad = []
    for key, t in _tensors(trainer_state):
        if (t.is_floating_point() or t.is_complex()) and t.numel():
            n = int((~torch.isfinite(t)).sum())
            if n:
                bad.append(f"{key} ({n} of {t.numel()} values)")
    if bad:
        raise DamagedCheckpointError(
            f"checkpoint {str(path)!r} holds NaN/inf in its trainer state: {'; '.join(bad[:4])}"
            f"{f' and {len(bad) - 4} more tensors' if len(bad) > 4 else ''}; expected finite weights (training "
            "from it would only spread them). Fix: resume from an earlier checkpoint (and look for what made the "
            "weights diverge: a learning rate too high, unscaled rewards).", "nonfinite")


def _read_failure(exc: BaseException) -> tuple[str, bool]:
    """A short reason for a failed ``torch.load`` (never torch's advice), and whether it is about Python objects."""
    text = str(exc)
    head, sep, tail = text.partition("WeightsUnpickler error:")
    if sep:
        detail = tail.strip().split("\n")[0].strip()
        objects = detail.startswith("Unsupported global")
        detail = detail.split(" was not an allowed global")[0]
    else:
        detail, objects = text.split(". ")[0].strip() or "the file ends early", False
    if "weights_only" in detail:
        detail = "not a readable checkpoint"
    return f"{type(exc).__name__}: {detail}", objects


def check_resumable(config: RunConfig, ck: Checkpoint) -> None:
    """Raise unless ``ck`` can continue under ``config``: the same environment, trainer and replay capacity,
    and environment options (``env_kwargs``, ``env_wrappers``) that give the checkpoint's spaces.

    Raises:
        SpecError: what differs, and the fix.
    """
    for name in ("env_id", "trainer"):
        if getattr(config, name) != getattr(ck.config, name):
            raise SpecError(
                f"cannot resume: the checkpoint's {name} is {getattr(ck.config, name)!r} but the config's is "
                f"{getattr(config, name)!r}. Fix: resume with the checkpoint's config "
                "(e.g. SerialRuntime.from_checkpoint(path)) or start a new run."
            )
    if ck.replay is not None and int(ck.replay["capacity"]) != config.replay.capacity:
        raise SpecError(
            f"cannot resume: the checkpoint's replay has capacity {ck.replay['capacity']} but the config asks for "
            f"{config.replay.capacity}. Fix: keep replay.capacity unchanged when resuming."
        )
    if config.env_options != ck.config.env_options:
        _check_same_spaces(config, ck)


def _layout(space: Any) -> str:
    """What of a space the networks and the replay depend on: its kind, shape, dtype and size."""
    n = getattr(space, "n", None)
    shape = getattr(space, "shape", None)
    dtype = getattr(space, "dtype", None)
    return (f"{type(space).__name__}(shape={tuple(shape) if shape is not None else None}, dtype={dtype}"
            + (f", n={int(n)})" if n is not None else ")"))


def _check_same_spaces(config: RunConfig, ck: Checkpoint) -> None:
    """Raise when ``config``'s environment options give other spaces (shapes, dtypes, sizes) than the checkpoint's."""
    from pearl_core.envs import env_spaces

    def spaces(cfg: RunConfig, whose: str) -> tuple[str, str]:
        try:
            return tuple(_layout(s) for s in env_spaces(cfg.env_id, **cfg.env_options))  # type: ignore[return-value]
        except PearlError as exc:
            raise SpecError(f"cannot resume: the environment {cfg.env_id!r} with the {whose} env_kwargs "
                            f"{dict(cfg.env_kwargs)} and env_wrappers {cfg.env_wrappers} cannot be built ({exc}). "
                            "Fix: resume with the checkpoint's env_kwargs and env_wrappers.") from exc

    new, old = spaces(config, "config's"), spaces(ck.config, "checkpoint's")
    diff = [f"{what}: {a} in the checkpoint, {b} under the config"
            for what, a, b in zip(("observation space", "action space"), old, new) if a != b]
    if diff:
        raise SpecError(
            f"cannot resume: the environment {config.env_id!r} has other spaces under the config's options than "
            f"under the checkpoint's ({'; '.join(diff)}); the checkpoint's networks and replay fit only the "
            f"checkpoint's. The checkpoint was written with env_kwargs {dict(ck.config.env_kwargs)} and "
            f"env_wrappers {ck.config.env_wrappers}; the config has env_kwargs {dict(config.env_kwargs)} and "
            f"env_wrappers {config.env_wrappers}. Fix: resume with the checkpoint's env_kwargs and env_wrappers "
            "(e.g. SerialRuntime.from_checkpoint(path)), or start a new run in another log_dir.")


def checkpoint_modules(config: RunConfig) -> list[str]:
    """The modules resuming under ``config`` imports by name: the trainer's, an env id's ``module:``, wrapper paths."""
    from pearl_core.envs import PRESETS, wrapper_parts
    from pearl_core.runtime.config import resolve_trainer_name

    names = [str(resolve_trainer_name(config.trainer)).partition(":")[0]]
    if ":" in config.env_id:
        names.append(config.env_id.partition(":")[0])
    for w in config.env_wrappers or ():
        path = wrapper_parts(w)[0]
        if path not in PRESETS:
            names.append(path.partition(":")[0])
    return list(dict.fromkeys(names))


def _pearls_own(module: str) -> bool:
    return module == "pearl_core" or module.startswith("pearl_core.")


def check_modules(ck: Checkpoint, *, trust_modules: bool = False, allowed: "tuple[str, ...] | list[str]" = (),
                  path: str | os.PathLike | None = None, fix: str | None = None) -> None:
    """Refuse to resume a checkpoint whose config names modules to import that are not trusted.

    Importing a module runs its code, so a checkpoint from elsewhere could run anything
    through the trainer path, a ``module:EnvId`` or a wrapper path it names. Allowed
    without asking: PEARL's own modules (``pearl_core.*``) and ``allowed`` (e.g. the modules
    of the config a program or the caller gives). Anything else needs ``trust_modules=True``.
    ``fix``: how the caller's user trusts them (default: resuming's ways).

    Raises:
        UntrustedCheckpointError: the modules, and the fix.
    """
    if trust_modules:
        return
    extra = set(allowed)
    strange = [m for m in checkpoint_modules(ck.config) if not _pearls_own(m) and m not in extra]
    if strange:
        where = f"checkpoint {str(path)!r}" if path is not None else "the checkpoint"
        raise UntrustedCheckpointError(
            f"{where} names modules to import that are not PEARL's own: {strange} (trainer {ck.config.trainer!r}, "
            f"env_id {ck.config.env_id!r}, env_wrappers {ck.config.env_wrappers}); importing a module runs its "
            "code, so a checkpoint from someone else could run anything. Nothing was imported. Fix: if you trust "
            "the checkpoint and those modules, " + (fix or "pass trust_modules=True (SerialRuntime.from_checkpoint("
            "path, trust_modules=True); `pearl train --resume RUN --trust-checkpoint`), or pass your own config "
            "(from_checkpoint(path, config=...)), whose modules are then the ones imported") + ".")


def _shapes(tree: Any, prefix: str = "") -> dict[str, tuple[tuple[int, ...], str]]:
    """``dotted.key -> (shape, dtype kind)`` of every tensor / array in a (nested) state dict."""
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    if hasattr(tree, "shape") and hasattr(tree, "dtype"):
        out[prefix or "(root)"] = (tuple(int(d) for d in tree.shape), _kind(tree.dtype))
    elif isinstance(tree, Mapping):
        for k, v in tree.items():
            out.update(_shapes(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            out.update(_shapes(v, f"{prefix}.{i}" if prefix else str(i)))
    return out


def _kind(dtype: Any) -> str:
    """``"float"``, ``"int"``, ``"bool"`` or ``"complex"`` of a numpy or torch dtype (a float32 state may load
    into a float64 trainer, never an int one)."""
    name = str(dtype).replace("torch.", "")
    for kind in ("bool", "complex", "float", "int"):
        if kind in name or (kind == "float" and name in ("half", "double", "bfloat16")):
            return kind
    return name


def _shape_error(saved: Mapping[str, Any], current: Mapping[str, Any], detail: str = "") -> SpecError | None:
    a, b = _shapes(saved), _shapes(current)
    # Tensors both hold must agree; tensors the fresh trainer has must be in the checkpoint. A fresh trainer's
    # optimizer has no moments yet, so the checkpoint may hold more.
    diff = [k for k in a if k in b and a[k] != b[k]]
    missing = [k for k in b if k not in a]
    if not diff and not missing:
        return None
    parts = [f"{k}: {_fmt(a[k])} in the checkpoint, {_fmt(b[k])} under the config" for k in diff[:4]]
    room = max(0, 4 - len(diff))
    parts += [f"{k}: missing from the checkpoint, {_fmt(b[k])} under the config" for k in missing[:room]]
    return DamagedCheckpointError(
        f"cannot resume: the checkpoint's networks do not have the shapes this config builds "
        f"({len(diff) + len(missing)} of {len(b)} tensors differ: " + "; ".join(parts) + f").{detail} "
        "Fix: resume with the checkpoint's trainer_kwargs (e.g. SerialRuntime.from_checkpoint(path) uses the "
        "checkpoint's config), or start a new run in another log_dir.", "missing" if not diff else "shape")


def _fmt(entry: tuple[tuple[int, ...], str]) -> str:
    shape, kind = entry
    return str(shape) if kind == "float" else f"{shape} {kind}"


def check_network_shapes(config: RunConfig, ck: Checkpoint) -> None:
    """Raise unless ``config`` builds a trainer whose state has the checkpoint's tensors, shapes and dtype kinds.

    Builds a CPU copy of the trainer (from ``config``'s trainer, kwargs and environment) and compares
    its state with the checkpoint's, so that a checkpoint that does not fit is refused before a run
    starts (never a raw torch error when the state is loaded).

    Raises:
        DamagedCheckpointError: tensors that differ or are missing, with both shapes, the kwargs, and the fix.
    """
    from pearl_core.envs import env_spaces
    from pearl_core.runtime.wiring import build_trainer

    same = dict(config.trainer_kwargs) == dict(ck.config.trainer_kwargs)
    try:
        trainer = build_trainer(config, *env_spaces(config.env_id, **config.env_options), check=False)
    except PearlError:
        if same:  # e.g. a trainer built only on its plan's device: the runtime builds it and says why
            return
        raise
    current = trainer.state_dict() if hasattr(trainer, "state_dict") else {"weights": trainer.get_weights()}
    err = _shape_error(ck.trainer_state, current, "" if same else f" The checkpoint was written with trainer_kwargs "
                       f"{dict(ck.config.trainer_kwargs)}; the config has {dict(config.trainer_kwargs)}.")
    if err is not None:
        raise err


def load_trainer_state(trainer, ck: Checkpoint) -> None:
    """``trainer.load_state_dict(ck.trainer_state)``, a shape or key mismatch raised as :class:`SpecError`."""
    current = trainer.state_dict() if hasattr(trainer, "state_dict") else None
    err = _shape_error(ck.trainer_state, current) if current is not None else None
    if err is not None:
        raise err
    try:
        trainer.load_state_dict(ck.trainer_state)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise SpecError(f"cannot resume: the checkpoint's trainer state does not load into "
                        f"{type(trainer).__name__} ({type(exc).__name__}: {exc}). Fix: resume with the checkpoint's "
                        "config, or start a new run in another log_dir.") from exc


def dump_blob(obj: Any) -> bytes:
    """Serialise a state dict (torch tensors, numpy arrays, plain values) to bytes."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def load_blob(blob: bytes) -> Any:
    """Inverse of :func:`dump_blob` (trusted data: produced by this run's own workers)."""
    import torch

    return torch.load(io.BytesIO(blob), weights_only=False)
