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

from pearl_core.errors import PearlError, SpecError
from pearl_core.fileio import atomic_write
from pearl_core.runtime.config import RunConfig, RuntimePlan
from pearl_core.runtime.control import RunState, StopMonitor

__all__ = ["CHECKPOINT_NAME", "Checkpoint", "CheckpointWriteError", "check_network_shapes", "check_resumable",
           "dump_blob", "load_blob", "load_checkpoint", "load_trainer_state", "save_checkpoint"]

#: File name of the latest checkpoint inside ``config.log_dir``.
CHECKPOINT_NAME = "checkpoint.pt"
_CHECKPOINT_FORMAT = "pearl-checkpoint"
_CHECKPOINT_VERSION = 1


class CheckpointWriteError(PearlError, OSError):
    """A checkpoint could not be written (disk full, permissions); the previous checkpoint is intact.

    Also an :class:`OSError`, so code that catches write errors still does.
    """


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
    code = getattr(exc, "errno", None)
    why = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
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
    """Read a checkpoint written by :func:`save_checkpoint`.

    Args:
        path: the checkpoint file.
        weights_only: load with torch's restricted unpickler (safe for files
            you did not write). Set ``False`` only for trusted files whose
            trainer state holds arbitrary Python objects.

    Raises:
        SpecError: the file is missing, unreadable, or not a PEARL checkpoint.
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise SpecError(f"checkpoint {str(path)!r} does not exist. Fix: pass the path of a checkpoint.pt file.")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=weights_only)
    except Exception as exc:  # noqa: BLE001 - any read error becomes a clear message
        detail, objects = _read_failure(exc)
        what = ("it holds Python objects that are not plain tensors, numbers, strings, lists or dicts (a trainer's "
                "state_dict() must return only those)" if objects else
                "the file is damaged (cut short by a crash or a full disk?) or is not a PEARL checkpoint")
        fix = ("make the trainer's state_dict() return tensors and plain values only (checkpoints are read with "
               "torch's safe loader), or resume from an earlier checkpoint" if objects else
               "resume from an earlier checkpoint (or start a new run in another log_dir)")
        raise SpecError(f"checkpoint {str(path)!r} could not be read ({detail}): {what}. Fix: {fix}.") from exc
    if not isinstance(payload, Mapping) or payload.get("format") != _CHECKPOINT_FORMAT:
        raise SpecError(f"{str(path)!r} is not a PEARL checkpoint; expected one written by save_checkpoint(). "
                        "Fix: pass the checkpoint.pt of a PEARL run's log_dir.")
    if payload.get("version") != _CHECKPOINT_VERSION:
        raise SpecError(
            f"checkpoint {str(path)!r} has format version {payload.get('version')}; this PEARL reads "
            f"version {_CHECKPOINT_VERSION}. Fix: resume it with the PEARL version that wrote it."
        )
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
        raise SpecError(f"checkpoint {str(path)!r} is damaged: its {type(exc).__name__} ({exc}) shows a missing or "
                        "malformed part. Fix: resume from an earlier checkpoint.") from exc


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
    """Raise unless ``ck`` can continue under ``config`` (same environment, trainer and replay capacity).

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


def _shapes(tree: Any, prefix: str = "") -> dict[str, tuple[int, ...]]:
    """``dotted.key -> shape`` of every tensor / array in a (nested) state dict."""
    out: dict[str, tuple[int, ...]] = {}
    if hasattr(tree, "shape") and hasattr(tree, "dtype"):
        out[prefix or "(root)"] = tuple(int(d) for d in tree.shape)
    elif isinstance(tree, Mapping):
        for k, v in tree.items():
            out.update(_shapes(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            out.update(_shapes(v, f"{prefix}.{i}" if prefix else str(i)))
    return out


def _shape_error(saved: Mapping[str, Any], current: Mapping[str, Any], detail: str = "") -> SpecError | None:
    a, b = _shapes(saved), _shapes(current)
    # Only tensors both hold: a fresh trainer's optimizer has no moments yet, and a network of
    # another depth or width differs in the shape of a tensor both hold.
    diff = [k for k in a if k in b and a[k] != b[k]]
    if not diff:
        return None
    parts = [f"{k}: {a[k]} in the checkpoint, {b[k]} under the config" for k in diff[:4]]
    return SpecError(
        f"cannot resume: the checkpoint's networks do not have the shapes this config builds "
        f"({len(diff)} of {len(b)} tensors differ: " + "; ".join(parts) + f").{detail} "
        "Fix: resume with the checkpoint's trainer_kwargs (e.g. SerialRuntime.from_checkpoint(path) uses the "
        "checkpoint's config), or start a new run in another log_dir.")


def check_network_shapes(config: RunConfig, ck: Checkpoint) -> None:
    """Raise unless ``config`` builds a trainer whose state has the checkpoint's tensor shapes.

    Builds a CPU copy of the trainer only when ``config.trainer_kwargs`` differ
    from the checkpoint's (the same kwargs build the same shapes).

    Raises:
        SpecError: the differing tensors with both shapes, both kwargs, and the fix.
    """
    if dict(config.trainer_kwargs) == dict(ck.config.trainer_kwargs):
        return
    from pearl_core.envs import env_spaces
    from pearl_core.runtime.wiring import build_trainer

    trainer = build_trainer(config, *env_spaces(config.env_id, **config.env_options), check=False)
    current = trainer.state_dict() if hasattr(trainer, "state_dict") else {"weights": trainer.get_weights()}
    err = _shape_error(ck.trainer_state, current, f" The checkpoint was written with trainer_kwargs "
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
