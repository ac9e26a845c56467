"""The update schedule and the one learner step every runtime runs.

* :class:`UpdateSchedule` — how many learner updates a run owes after a number
  of env steps (the replay ratio, SB3-style bursts or continuous).
* :class:`LearnerStep` — the critical path of one update: **sample** a batch
  from the replay manager, **train** the trainer on it, **apply** the
  per-sample TD errors as priorities. The serial runtime and the setting-2
  worker call all three in one process (``step()``); in setting 1 the host
  samples into the learner's batch slot and applies the priorities, and the
  learner process trains: the same three methods, split across the LAQ/LDQ.
  TD errors are validated once, in :meth:`LearnerStep.train`; the update
  counter is :attr:`LearnerStep.updates`; :meth:`LearnerStep.checked_weights`
  is the weights as they may be published (finite, or a
  :class:`~pearl_core.errors.DataError` naming the update).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from typing import Any, Mapping

import numpy as np

from pearl_core.errors import InvalidValueError, SpecError
from pearl_core.replay.base import ReplayManager, SampledBatch, check_td_errors
from pearl_core.runtime.config import RunConfig
from pearl_core.runtime.sanity import check_weights
from pearl_core.trainer import Trainer, UpdateResult, is_device_batch, is_tensor

__all__ = ["LearnerStep", "UpdateSchedule", "learner_updates_due"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class UpdateSchedule:
    """How many learner updates a run owes after a number of env steps.

    Burst mode (serial runtime, SB3's ``train_freq``/``gradient_steps``): at every
    multiple ``b`` of ``train_every`` with ``b > learning_starts`` a burst is due;
    the total after ``T`` env steps is ``floor(K * train_every * ratio) -
    floor(K0 * train_every * ratio)`` with ``K = T // train_every`` and ``K0 =
    learning_starts // train_every`` (so fractional burst sizes add up exactly).

    Continuous mode (parallel runtime): ``floor((T - learning_starts) * ratio)``
    once ``T > learning_starts``.

    ``base_updates``/``base_env_steps`` shift both (a resume whose replay was not
    saved restarts ``learning_starts`` from ``base_env_steps``).
    """

    replay_ratio: float
    train_every: int = 1
    learning_starts: int = 0
    continuous: bool = False
    base_env_steps: int = 0
    base_updates: int = 0

    @classmethod
    def from_config(cls, config: RunConfig, *, continuous: bool = False, base_env_steps: int = 0,
                    base_updates: int = 0) -> "UpdateSchedule":
        return cls(config.replay_ratio, config.train_every, config.learning_starts, continuous,
                   base_env_steps, base_updates)

    def target(self, env_steps: int) -> int:
        """Total learner updates due once ``env_steps`` env steps have been taken."""
        t = int(env_steps) - self.base_env_steps
        start = self.learning_starts
        if t <= start:
            return self.base_updates
        if self.continuous:
            return self.base_updates + math.floor((t - start) * self.replay_ratio + 1e-9)
        k, k0 = t // self.train_every, start // self.train_every
        if k <= k0:
            return self.base_updates
        per = self.train_every * self.replay_ratio
        return self.base_updates + math.floor(k * per + 1e-9) - math.floor(k0 * per + 1e-9)

    def due(self, env_steps: int, updates_done: int) -> int:
        """Updates to run now: ``max(0, target(env_steps) - updates_done)``."""
        return max(0, self.target(env_steps) - int(updates_done))


def learner_updates_due(env_steps: int, updates_done: int, config: RunConfig, *, continuous: bool = False) -> int:
    """Learner updates owed after ``env_steps`` steps with ``updates_done`` done (see :class:`UpdateSchedule`)."""
    return UpdateSchedule.from_config(config, continuous=continuous).due(env_steps, updates_done)


class LearnerStep:
    """One learner update, sample -> train -> priorities, over a trainer and a replay manager.

    Either side may be absent where the step is split across processes (setting
    1): the host holds the replay side (``trainer=None``), the learner process the
    training side (``replay=None``).

    Args:
        trainer: the learner's trainer (``update_policy``), or ``None``.
        replay: the replay manager, or ``None``.
        batch_size: rows per sampled batch.
        updates: updates already done (a resumed run continues the count).

    **The device path.** Where the trainer declares :attr:`~pearl_core.trainer.Trainer.device_batches`
    and the replay offers its device face on the trainer's torch device
    (:attr:`~pearl_core.replay.ReplayManager.device`), the whole update runs there: ``sample_device``,
    ``update_policy`` on the tensors, ``update_priorities_device`` with the trainer's TD error tensor;
    nothing is read back per update. What the host path checks each update is checked every
    ``check_every`` updates and at every :meth:`checked_weights` (one read of the replay's flags:
    :meth:`~pearl_core.replay.ReplayManager.check_device_errors`), and the metrics are read when asked
    (:meth:`metrics`). :attr:`on_device` says which path runs.

    A trainer may define ``device_batch_slot(storage, batch_size)`` returning
    destination buffers on its device (a mapping of the transition fields and a
    host ``"weights"`` array) that the replay's storage gathers into, or ``None``;
    where the trainer and the replay share this process the step samples into
    it, so the experiences stay on the device (the FPGA plugin's ``FpgaDQN``
    with an FPGA-resident Data Storage does).

    Attributes:
        updates: completed updates on this side: counted by :meth:`apply` where the
            replay side is here, else by :meth:`train` (setting 1's learner process,
            whose count sets the weight-publication cadence).
        learner_s: seconds spent in ``update_policy`` (counted by :meth:`train`).
        sample_s, apply_s: seconds spent in :meth:`sample` and :meth:`apply`.
        last: the latest :class:`~pearl_core.trainer.UpdateResult`, if any.
    """

    def __init__(self, trainer: Trainer | None, replay: ReplayManager | None, batch_size: int, *,
                 updates: int = 0, check_every: int = 100):
        self.trainer = trainer
        self.replay = replay
        self.batch_size = int(batch_size)
        self.updates = int(updates)
        self.check_every = max(1, int(check_every))
        self.learner_s = self.sample_s = self.apply_s = 0.0
        self.last: UpdateResult | None = None
        self._keeps = replay is not None and replay.keeps_priorities
        self.on_device = _device_path(trainer, replay)
        self._checked_at = self.updates
        # Trainer and replay in one process (serial, setting 2): a device trainer may give destination
        # buffers on its device that the storage gathers into, so that the batch never crosses the host.
        make_slot = getattr(trainer, "device_batch_slot", None) if replay is not None and not self.on_device else None
        self.device_slot = make_slot(replay.storage, self.batch_size) if callable(make_slot) else None
        self.graph: Any = None  # a GraphedIteration once use_graph() captured one
        self.graph_note = "eager"
        self._graph_request: tuple[int, Any] | None = None  # (per_launch, capture) until warm
        self._eager = 0  # eager updates run here (a capture waits for a few: lazy initialisation)
        self._warmup = 0

    def sample(self, out: Mapping[str, np.ndarray] | None = None) -> SampledBatch:
        """Draw the next batch (into ``out``, e.g. the learner's batch slot, if given; else into the
        trainer's device slot, when it has one)."""
        t = time.perf_counter()
        if self.on_device and out is None:
            sampled = self.replay.sample_device(self.batch_size)
        else:
            sampled = self.replay.sample(self.batch_size, out if out is not None else self.device_slot)
        self.sample_s += time.perf_counter() - t
        return sampled

    def train(self, batch, weights: np.ndarray) -> np.ndarray:
        """``update_policy(batch, weights)``; returns its TD errors, validated (the only check).

        Raises:
            InvalidValueError: the TD errors are not one finite value per row.
        """
        t = time.perf_counter()
        result = self.trainer.update_policy(batch, weights)
        self.learner_s += time.perf_counter() - t
        self.last = result
        if self.on_device and is_device_batch(batch):
            # the shape here; the values' finiteness on the device, read back at the next check
            return check_device_td(result.td_errors, self.batch_size, batch.reward.device,
                                   f"Trainer.update_policy (update {self.updates + 1})")
        td = result.td_errors
        if is_tensor(td):  # a device trainer's TD errors on the host path (a device slot): read them here
            td = td.detach().cpu().numpy()
        td = check_td_errors(td, self.batch_size, f"Trainer.update_policy (update {self.updates + 1})")
        if self.replay is None:  # the training half alone: its update is done here
            self.updates += 1
        return td

    def apply(self, indices: np.ndarray, td: np.ndarray) -> None:
        """Turn the validated TD errors of the sampled ``indices`` into priorities; one update done."""
        if self.on_device and is_tensor(indices):
            t = time.perf_counter()
            self.replay.update_priorities_device(indices, td)
            self.apply_s += time.perf_counter() - t
            self.updates += 1
            if self.updates - self._checked_at >= self.check_every:
                self.check_device()
            return
        if self._keeps:  # uniform replay keeps no priorities: nothing to store
            t = time.perf_counter()
            self.replay.update_priorities(indices, td, checked=True)
            self.apply_s += time.perf_counter() - t
        self.updates += 1

    def checked_weights(self) -> Mapping[str, np.ndarray]:
        """``trainer.get_weights()`` if every value is finite: what may be published or kept as good.

        Raises:
            DataError: a NaN/inf (names the weight and :attr:`updates`); nothing should be published.
        """
        if self.on_device:
            self.check_device()
        return check_weights(self.trainer.get_weights(), update=self.updates)

    def check_device(self) -> None:
        """Read back what the device path flagged since the last check (one read; nothing on the host path).

        Raises:
            InvalidValueError: a TD error in updates ``(last check, now]`` was NaN/inf (that batch changed no
                priority); the message names the updates.
        """
        if not self.on_device:
            return
        first, self._checked_at = self._checked_at + 1, self.updates
        try:
            self.replay.check_device_errors()
        except InvalidValueError as exc:
            raise InvalidValueError(f"Trainer.update_policy (updates {first}-{self.updates}): {exc}") from exc

    def metrics(self) -> dict[str, float]:
        """The latest update's metrics as floats (a device update's are tensors: this reads them back)."""
        if self.last is None:
            return {}
        return {name: float(value) for name, value in self.last.metrics.items()}

    def step(self) -> UpdateResult:
        """The whole update in this process: sample, train, apply (a graph launch where one is captured
        with one update per launch)."""
        self.run(1)
        return self.last

    def step_eager(self) -> UpdateResult:
        """One update, sample -> train -> apply, launched op by op."""
        sampled = self.sample()
        self.apply(sampled.indices, self.train(sampled.batch, sampled.weights))
        return self.last

    @property
    def per_launch(self) -> int:
        """Updates per launch: ``K`` of the captured graph, else 1."""
        return self.graph.per_launch if self.graph is not None else 1

    def run(self, n: int) -> int:
        """Exactly ``n`` updates: graph launches of ``K`` where one is captured and the count is a multiple of
        ``K``, eager updates for the rest (and until :data:`~pearl_core.runtime.graphstep.WARMUP` eager
        device updates have warmed a requested capture up); returns ``n``."""
        left = int(n)
        while left > 0:
            if self._graph_request is not None and self._eager >= self._warmup:
                self._capture(*self._graph_request)
            graph = self.graph
            if graph is not None and left >= graph.per_launch and graph.aligned(self.updates):
                t = time.perf_counter()
                self.last = graph.launch()
                self.learner_s += time.perf_counter() - t
                self.updates += graph.per_launch
                left -= graph.per_launch
                if self.updates - self._checked_at >= self.check_every:
                    self.check_device()
            else:
                self.step_eager()
                self._eager += 1
                left -= 1
        return int(n)

    def use_graph(self, mode: str = "auto", per_launch: int = 1, capture: Any = None) -> str:
        """Run the iteration as a CUDA graph where it can be (:mod:`pearl_core.runtime.graphstep`): captured
        in :meth:`run` once :data:`~pearl_core.runtime.graphstep.WARMUP` eager updates have run here (lazy
        initialisation outside the graph; they are the run's own updates). Where it cannot be, or the capture
        fails, the run goes on eagerly with the reason logged. ``mode``: ``"auto"`` or ``"off"``;
        ``capture``: ``capture(fn, device, generators) -> replay`` (default ``cuda_capture``, CUDA only).
        Returns :attr:`graph_note`: ``"CUDA graph, K update(s) per launch"``, ``"eager: <why>"``, or
        ``"CUDA graph after N more eager update(s)"``.

        Raises:
            SpecError: ``mode`` is neither, or ``per_launch < 1``.
        """
        from pearl_core.runtime.graphstep import WARMUP, graph_unsafe

        if mode not in ("auto", "off") or isinstance(per_launch, bool) or not isinstance(per_launch, int) \
                or per_launch < 1:
            raise SpecError(f"LearnerStep.use_graph: mode = {mode!r}, per_launch = {per_launch!r}; expected mode "
                            "'auto' or 'off' and per_launch an integer >= 1. Fix: e.g. cuda_graph='auto', "
                            "graph_per_launch=1 in the learner device's config.")
        self.graph, self._graph_request, self._warmup = None, None, WARMUP
        reason = ("CUDA graphs are off (cuda_graph='off')" if mode == "off" else
                  graph_unsafe(self, cuda_only=capture is None))
        if reason is not None:
            return self._eager_because(reason, mode)
        self._graph_request = (per_launch, capture)
        if self._eager >= self._warmup:
            self._capture(per_launch, capture)
        else:
            self.graph_note = f"CUDA graph after {self._warmup - self._eager} more eager update(s)"
        return self.graph_note

    def _capture(self, per_launch: int, capture: Any) -> None:
        from pearl_core.runtime.graphstep import GraphedIteration, cuda_capture

        self._graph_request = None
        graph = GraphedIteration(self, self.trainer.graph_hooks(), per_launch=per_launch,
                                 capture=capture or cuda_capture)
        try:
            graph.capture()
        except Exception as exc:  # noqa: BLE001 - any capture failure: the run goes on eagerly
            self._eager_because(f"the CUDA graph capture failed ({type(exc).__name__}: {str(exc)[:300]})", "auto")
            return
        self.graph = graph
        self.graph_note = f"CUDA graph, {graph.per_launch} update(s) per launch"
        log.info("learner iteration: %s", self.graph_note)

    def _eager_because(self, reason: str, mode: str) -> str:
        self.graph_note = "eager: " + reason
        on_gpu = self.on_device and getattr(self.replay.device, "type", None) == "cuda"
        (log.warning if mode == "auto" and on_gpu else log.info)("learner iteration: %s", self.graph_note)
        return self.graph_note


def _device_path(trainer: Trainer | None, replay: ReplayManager | None) -> bool:
    """Whether :class:`LearnerStep` runs the device path: the trainer declares device batches and the replay
    offers its device face on the trainer's torch device."""
    if trainer is None or replay is None or not getattr(type(trainer), "device_batches", False):
        return False
    where = replay.device
    if where is None:
        return False
    import torch

    mine = getattr(trainer, "device", None)
    return mine is not None and torch.device(mine) == where


def check_device_td(td, n: int, device, owner: str):
    """A device update's TD errors: a real ``(n,)`` tensor on ``device`` (checked from its metadata alone; the
    values' finiteness is checked on the device, by the replay's flags).

    Raises:
        InvalidValueError: not a tensor there, or not one TD error per row.
    """
    import torch

    if not isinstance(td, torch.Tensor) or td.device != torch.device(device):
        where = f"a tensor on {td.device}" if isinstance(td, torch.Tensor) else type(td).__name__
        raise InvalidValueError(
            f"{owner}: a device batch gave td_errors as {where}; expected a tensor on {device} (the trainer "
            "declares device_batches = True). Fix: return the TD errors where the batch is, without .cpu().")
    if td.ndim != 1 or td.shape[0] != n or td.dtype.is_complex or td.dtype == torch.bool:
        raise InvalidValueError(
            f"{owner}: td_errors has shape {tuple(td.shape)} and dtype {td.dtype}; expected ({n},) real numbers, "
            "one per sampled row. Fix: return the per-sample TD errors (td.reshape(-1)).")
    return td.detach()
