"""A GPU learner's traffic through the host without waiting for it: weights out, batches in.

* :class:`WeightCopier` — the acting network's weights for the actors, every ``weight_sync_every`` updates.
  On a GPU they are copied into pinned host memory with ``non_blocking=True`` on the learner's stream and
  an event recorded after the copy; the learner goes on launching updates, and the weights are published
  once the event says the copy is done (:meth:`WeightCopier.poll`, checked finite then, as before). The
  stream orders the copy after the update it follows and before the next one, so it is never torn. Where
  the trainer gives no weight tensors (:meth:`~pearl_core.trainer.Trainer.weight_tensors`) or the learner
  is not on a GPU: ``get_weights()`` at once, as before.
* :class:`BatchMover` — setting 1 with a GPU learner: the host samples each batch into a slot of a
  shared-memory ring; the learner registers the ring's memory with CUDA as pinned memory
  (``cudaHostRegister``), so a batch moves once, host to GPU, as asynchronous copies into per-slot device
  tensors the update then reads (a device batch, :attr:`~pearl_core.trainer.Trainer.device_batches`).
  Where the registration fails the copies still run, from pageable memory (the reason is logged).

Both take their CUDA parts as arguments (``pin``, ``event``), so the CPU tests run the same logic on CPU
tensors (``tests/runtime/test_devicemove.py``).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pearl_core.runtime.sanity import check_weights

__all__ = ["BatchMover", "WeightCopier", "cuda_host_register"]

log = logging.getLogger(__name__)


def _device_of(trainer: Any) -> Any:
    import torch

    dev = getattr(trainer, "device", None)
    return torch.device(dev) if dev is not None else None


class WeightCopier:
    """Weights of ``trainer`` to publish, copied to the host asynchronously on a GPU (see the module docstring).

    Args:
        trainer: the learner's trainer.
        asynchronous: copy without waiting (default: the trainer's device is a CUDA device and it gives
            :meth:`~pearl_core.trainer.Trainer.weight_tensors`).
        event: ``event() -> e`` with ``e.record()`` and ``e.query()`` (default ``torch.cuda.Event``).
        host_like: ``host_like(tensor) -> host tensor`` to copy into (default: pinned ``empty_like`` on the CPU).
    """

    def __init__(self, trainer: Any, *, asynchronous: bool | None = None, event: Callable[[], Any] | None = None,
                 host_like: Callable[[Any], Any] | None = None):
        self.trainer = trainer
        tensors = trainer.weight_tensors() if hasattr(trainer, "weight_tensors") else None
        dev = _device_of(trainer)
        if asynchronous is None:
            asynchronous = tensors is not None and dev is not None and dev.type == "cuda"
        self.asynchronous = bool(asynchronous and tensors is not None)
        self._pending: tuple[int, Any] | None = None
        self._ready: tuple[int, Mapping[str, np.ndarray]] | None = None
        if self.asynchronous:
            import torch

            self._event = event or (lambda: torch.cuda.Event())
            make = host_like or (lambda t: torch.empty_like(t, device="cpu").pin_memory())
            self._src: dict[str, Any] = dict(tensors or {})
            self._host = {name: make(t) for name, t in self._src.items()}

    @property
    def in_flight(self) -> bool:
        """Whether a copy was started and not yet published."""
        return self._pending is not None or self._ready is not None

    def start(self, update: int) -> None:
        """Take the weights as they are after ``update`` updates (on a GPU: enqueue the copy and return).
        A copy still in flight is superseded (the newer weights are the ones worth publishing)."""
        if not self.asynchronous:
            self._ready = (update, self.trainer.get_weights())
            return
        for name, src in self._src.items():
            self._host[name].copy_(src.detach(), non_blocking=True)
        ev = self._event()
        ev.record()
        self._pending = (update, ev)

    def poll(self) -> Mapping[str, np.ndarray] | None:
        """The weights of the latest :meth:`start` once they are on the host, checked finite; else ``None``.

        Raises:
            DataError: a NaN/inf in them (names the update); nothing should be published.
        """
        if self._pending is not None and self._pending[1].query():
            update = self._pending[0]
            self._pending = None
            self._ready = (update, {name: h.numpy() for name, h in self._host.items()})
        if self._ready is None:
            return None
        update, weights = self._ready
        self._ready = None
        return check_weights(weights, update=update)

    def wait(self) -> Mapping[str, np.ndarray] | None:
        """:meth:`poll` after the copy in flight (if any) is done: the run's last weights, at its end."""
        if self._pending is not None:
            self._pending[1].synchronize()
        return self.poll()


def cuda_host_register(ptr: int, nbytes: int) -> str | None:
    """Register ``nbytes`` of host memory at ``ptr`` with CUDA as pinned memory; ``None``, or why not."""
    try:
        import torch

        err = torch.cuda.cudart().cudaHostRegister(ptr, nbytes, 0)
    except Exception as exc:  # noqa: BLE001 - no CUDA runtime, an old torch: the copies run unpinned
        return f"{type(exc).__name__}: {exc}"
    code = getattr(err, "value", err)
    return None if code == 0 else f"cudaHostRegister returned {err}"


class BatchMover:
    """Setting 1: the batches of a shared ring's slots as device batches (see the module docstring).

    Args:
        slots: the ring's slots, ``{field: array}`` each (the transition fields, ``"weights"``, ``"td"``).
        device: the learner's torch device.
        memory: ``(pointer, bytes)`` of the ring's shared memory, to register as pinned (``None``: none).
        pin: ``pin(pointer, bytes) -> None | why not`` (default :func:`cuda_host_register`).

    Attributes:
        pinned: whether the ring's memory is registered (the copies are then truly asynchronous).
    """

    def __init__(self, slots: Sequence[Mapping[str, np.ndarray]], device: Any, *,
                 memory: tuple[int, int] | None = None, pin: Callable[[int, int], str | None] | None = None):
        import torch

        from pearl_core.replay.storage import Batch

        self.device = torch.device(device)
        self.pinned = False
        if memory is not None:
            why = (pin or cuda_host_register)(*memory)
            self.pinned = why is None
            if why is not None:
                log.info("setting-1 batches are copied from unpinned memory (%s)", why)
        fields = [f for f in slots[0] if f != "td"] if slots else []
        self._host = [{f: torch.from_numpy(s[f]) for f in fields} for s in slots]
        self._dev = [{f: torch.empty(t.shape, dtype=t.dtype, device=self.device) for f, t in h.items()}
                     for h in self._host]
        self._batches = [Batch.of(d) for d in self._dev]  # type: ignore[arg-type]  # tensors: a device batch

    def move(self, i: int) -> tuple[Any, Any]:
        """Slot ``i``'s batch and importance weights on the device (copies enqueued, not waited for)."""
        src, dst = self._host[i], self._dev[i]
        for name, t in src.items():
            dst[name].copy_(t, non_blocking=True)
        return self._batches[i], dst["weights"]
