"""The learner on a GPU: the paper's stream search and optional CUDA graphs.

The runtime's trainers (e.g. :class:`pearl_core.algorithms.DQN`) already run on
a GPU when built with ``device="cuda:0"``; :func:`trainer_kwargs_for` says so.
What this module adds is the *tuning* the paper does for a GPU learner, measured
on a synthetic learner that has the workload's layers:

* **Stream search** (paper §"Primitive Setup"): split the batch of ``BS`` into
  ``S`` chunks, run forward + backward of each chunk on its own CUDA stream
  (``torch.autograd.grad``, so no shared ``.grad`` is written concurrently),
  sum the gradients, one optimizer step. ``S`` is searched over
  :func:`stream_candidates` (a subset of ``[1, BS]``) and the fastest is kept.
* **CUDA graphs**: the ``S = 1`` step captured once and replayed
  (``torch.cuda.CUDAGraph``; Adam with ``capturable=True``), which removes the
  per-kernel launch cost that dominates small RL models.

Host logic (:func:`stream_candidates`, :func:`split_sizes`, :func:`mlp_dims`)
is plain Python and tested without a GPU.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from pearl_core.errors import InvalidValueError

__all__ = ["LearnerTiming", "SyntheticLearner", "mlp_dims", "search_streams", "split_sizes", "stream_candidates",
           "trainer_kwargs_for"]

#: Largest stream count tried; more streams than this only add launch overhead for RL-sized models.
MAX_STREAMS = 16


def stream_candidates(batch_size: int, max_streams: int = MAX_STREAMS) -> tuple[int, ...]:
    """Powers of two in ``[1, min(BS, max_streams)]``, each leaving chunks of >= 8 rows (1 always)."""
    if batch_size < 1:
        raise InvalidValueError(f"stream_candidates: batch_size = {batch_size}; expected an integer >= 1.")
    out, s = [1], 2
    while s <= min(batch_size, max_streams) and batch_size // s >= 8:
        out.append(s)
        s *= 2
    return tuple(out)


def split_sizes(batch_size: int, streams: int) -> tuple[int, ...]:
    """Chunk sizes of a batch over ``streams`` streams: as equal as possible, larger first, all >= 1."""
    if not 1 <= streams <= batch_size:
        raise InvalidValueError(f"split_sizes: streams = {streams}; "
                                f"expected an integer in [1, batch_size={batch_size}].")
    q, r = divmod(batch_size, streams)
    return tuple(q + 1 if i < r else q for i in range(streams))


def mlp_dims(layers: Sequence[Any]) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """``(trained network dims, target network dims or None)`` from a workload's learner layers.

    The first group with trainable layers is the trained network; a group of
    frozen layers (a target network) is evaluated forward-only. Without layers,
    the issue's benchmark MLP (4 -> 256 -> 256 -> 2) is used.
    """
    groups: dict[str, list[Any]] = {}
    for ly in layers:
        if getattr(ly, "kind", "linear") != "linear":
            continue
        groups.setdefault(getattr(ly, "group", ""), []).append(ly)

    def dims(ls: list[Any]) -> tuple[int, ...]:
        return tuple([ls[0].in_features] + [ly.out_features for ly in ls])

    trained = next((g for g in groups.values() if any(ly.trainable for ly in g)), None)
    frozen = next((g for g in groups.values() if not any(ly.trainable for ly in g)), None)
    if trained is None:
        return (4, 256, 256, 2), None
    return dims(trained), (dims(frozen) if frozen else None)


def trainer_kwargs_for(learner_device: str) -> dict[str, str]:
    """Keyword arguments that put the built-in trainers' networks on ``learner_device``."""
    return {"device": learner_device}


@dataclass(frozen=True)
class LearnerTiming:
    """Median seconds of one learner step per configuration tried, and the winner."""

    batch_size: int
    per_streams: dict[int, float]
    graph_s: float | None
    best_streams: int
    best_s: float
    use_graph: bool
    notes: tuple[str, ...] = field(default_factory=tuple)


class SyntheticLearner:
    """An MLP learner step with the workload's shape, for profiling (needs torch with CUDA).

    Args:
        dims: trained network ``(in, h1, ..., out)``.
        target_dims: a frozen network evaluated forward-only on the batch (or ``None``).
        batch_size: ``BS``.
        device: torch device string.
    """

    def __init__(self, dims: Sequence[int], target_dims: Sequence[int] | None, batch_size: int,
                 device: str = "cuda:0", seed: int = 0):
        import torch
        from torch import nn

        torch.manual_seed(seed)
        self.torch = torch
        self.device = torch.device(device)
        self.batch_size = batch_size

        def mlp(d: Sequence[int]) -> nn.Module:
            mods: list[nn.Module] = []
            for a, b in zip(d[:-1], d[1:]):
                mods += [nn.Linear(a, b), nn.ReLU()]
            return nn.Sequential(*mods[:-1]).to(self.device)

        self.net = mlp(dims)
        self.target = mlp(target_dims).requires_grad_(False) if target_dims else None
        self.params = list(self.net.parameters())
        self.opt = torch.optim.Adam(self.params, lr=1e-3)
        self.x = torch.randn(batch_size, dims[0], device=self.device)
        self.x_next = torch.randn(batch_size, target_dims[0], device=self.device) if target_dims else None
        self.y = torch.randn(batch_size, dims[-1], device=self.device)
        self._streams: list[Any] = []

    def _loss(self, x, y, x_next=None):
        torch = self.torch
        out = self.net(x)
        if self.target is not None and x_next is not None:
            with torch.no_grad():
                y = y + 0.99 * self.target(x_next).max(dim=1, keepdim=True).values.expand_as(y)
        return torch.nn.functional.smooth_l1_loss(out, y)

    def step(self, streams: int = 1) -> None:
        """One SGD step with the batch split over ``streams`` CUDA streams (asynchronous)."""
        torch = self.torch
        if streams == 1:
            self.opt.zero_grad(set_to_none=True)
            self._loss(self.x, self.y, self.x_next).backward()
            self.opt.step()
            return
        while len(self._streams) < streams:
            self._streams.append(torch.cuda.Stream(device=self.device))
        main = torch.cuda.current_stream(self.device)
        sizes = split_sizes(self.batch_size, streams)
        grads, start = [], 0
        for s, n in zip(self._streams, sizes):
            s.wait_stream(main)
            with torch.cuda.stream(s):
                sl = slice(start, start + n)
                xn = self.x_next[sl] if self.x_next is not None else None
                loss = self._loss(self.x[sl], self.y[sl], xn) * (n / self.batch_size)
                grads.append(torch.autograd.grad(loss, self.params))
            start += n
        for s in self._streams[:streams]:
            main.wait_stream(s)
        for p, *gs in zip(self.params, *grads):
            p.grad = torch.stack(gs).sum(0) if len(gs) > 1 else gs[0]
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def capture_graph(self):
        """Capture the one-stream step as a CUDA graph; returns a callable that replays it."""
        torch = self.torch
        self.opt = torch.optim.Adam(self.params, lr=1e-3, capturable=True)
        side = torch.cuda.Stream(device=self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(3):  # warm up (allocations, Adam state) outside the graph
                self.opt.zero_grad(set_to_none=False)
                self._loss(self.x, self.y, self.x_next).backward()
                self.opt.step()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # None, so backward() inside the capture allocates .grad from the graph's pool and each replay
        # overwrites it (with zeroed-but-present grads every replay would accumulate into them).
        self.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            self._loss(self.x, self.y, self.x_next).backward()
            self.opt.step()
        return graph.replay

    def time(self, fn, iterations: int, warmup: int) -> float:
        """Median seconds of ``fn()`` (each call synchronised) after ``warmup`` calls."""
        torch = self.torch
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize(self.device)
        samples = []
        for _ in range(iterations):
            t = time.perf_counter()
            fn()
            torch.cuda.synchronize(self.device)
            samples.append(time.perf_counter() - t)
        return statistics.median(samples)


def search_streams(learner: SyntheticLearner, *, iterations: int = 200, warmup: int = 20,
                   try_graph: bool = True) -> LearnerTiming:
    """Time every stream count of :func:`stream_candidates` (and a CUDA graph); keep the fastest."""
    per: dict[int, float] = {}
    notes: list[str] = []
    for s in stream_candidates(learner.batch_size):
        per[s] = learner.time(lambda s=s: learner.step(s), iterations, warmup)
    best_s_count = min(per, key=per.get)
    graph_s = None
    if try_graph:
        try:
            replay = learner.capture_graph()
            graph_s = learner.time(replay, iterations, warmup)
        except Exception as exc:  # noqa: BLE001 - graphs are optional
            notes.append(f"CUDA graph capture failed ({type(exc).__name__}: {exc}); streams only")
    use_graph = graph_s is not None and graph_s < per[best_s_count]
    best = graph_s if use_graph else per[best_s_count]
    return LearnerTiming(learner.batch_size, per, graph_s, 1 if use_graph else best_s_count, best, use_graph,
                         tuple(notes))
