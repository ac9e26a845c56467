"""Checkpoints: a run's trainer state, counters, stop-monitor state, config and plan,
optionally its replay contents; and the byte blobs states cross processes in.

* :func:`save_checkpoint` / :func:`load_checkpoint` — one file, written atomically
  (never a half-written file), read with torch's restricted unpickler.
* :func:`check_resumable` — whether a checkpoint can continue under a config.
* :func:`dump_blob` / :func:`load_blob` — a state dict as bytes, so that torch
  never moves tensors through its own shared-memory files between processes.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from pearl_core.errors import SpecError
from pearl_core.fileio import atomic_write
from pearl_core.runtime.config import RunConfig, RuntimePlan
from pearl_core.runtime.control import RunState, StopMonitor

__all__ = ["CHECKPOINT_NAME", "Checkpoint", "check_resumable", "dump_blob", "load_blob", "load_checkpoint",
           "save_checkpoint"]

#: File name of the latest checkpoint inside ``config.log_dir``.
CHECKPOINT_NAME = "checkpoint.pt"
_CHECKPOINT_FORMAT = "pearl-checkpoint"
_CHECKPOINT_VERSION = 1


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
    return atomic_write(path, lambda fh: torch.save(payload, fh), make_parents=True)


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
        hint = (" If you trust the file and its trainer state holds custom Python objects, "
                "pass weights_only=False.") if weights_only else ""
        raise SpecError(f"checkpoint {str(path)!r} could not be read ({type(exc).__name__}: {exc}).{hint}") from exc
    if not isinstance(payload, Mapping) or payload.get("format") != _CHECKPOINT_FORMAT:
        raise SpecError(f"{str(path)!r} is not a PEARL checkpoint; expected one written by save_checkpoint().")
    if payload.get("version") != _CHECKPOINT_VERSION:
        raise SpecError(
            f"checkpoint {str(path)!r} has format version {payload.get('version')}; this PEARL reads "
            f"version {_CHECKPOINT_VERSION}."
        )
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
