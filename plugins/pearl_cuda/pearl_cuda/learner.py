"""The learner on a GPU: the paper's stream search and optional CUDA graphs.

The runtime's trainers (e.g. :class:`pearl_core.algorithms.DQN`) already run on
a GPU when built with ``device="cuda:0"``; :func:`trainer_kwargs_for` says so.
What this module adds is the *tuning* the paper does for a GPU learner, measured
on a synthetic learner that has the workload's layers:

* **Stream search** (paper §"Primitive Setup"): split the batch of ``BS`` into
  ``S`` chunks, run forward + backward of each chunk on its own CUDA stream
  (``torch.autograd.grad``, so no shared ``.grad`` is written concurrently),
  sum the gradients, one optimizer step. ``S`` is searched over the most promising
  counts (:func:`promising_streams`: at most three of :func:`stream_candidates`;
  more streams only added launches on an H200, see benchmarks/results/cuda_gpu_check.md)
  and the fastest is kept. Each count is timed for its share of a time budget.
* **CUDA graphs**: the ``S = 1`` step captured once per learner (one batch size) and replayed
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

__all__ = ["LearnerTiming", "SyntheticLearner", "mlp_dims", "promising_streams", "search_streams", "split_sizes",
           "stream_candidates", "trainer_kwargs_for"]

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


#: Stream counts the search tries at most, and the fewest rows a chunk keeps beyond two streams.
MAX_TRIED_STREAMS = 3
MIN_CHUNK_ROWS = 64
#: Timed calls a time-bounded measurement makes at least (as the composer's ``MIN_TIMED``).
MIN_TIMED = 10


def promising_streams(batch_size: int) -> tuple[int, ...]:
    """The stream counts worth timing: 1 and 2 always (where the batch allows), more only while each stream keeps
    :data:`MIN_CHUNK_ROWS` rows, at most :data:`MAX_TRIED_STREAMS` of :func:`stream_candidates`. On an H200 every
    count above 1 was slower for RL-sized MLPs at batches 64-4096, each doubling by more."""
    out = [s for s in stream_candidates(batch_size) if s <= 2 or batch_size // s >= MIN_CHUNK_ROWS]
    return tuple(out[:MAX_TRIED_STREAMS])


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
    samples: int | None = None  # timed steps of the winner's median


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
        self._graph_replay: Any = None
        self.samples = 0  # timed calls of the last :meth:`time`

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
        """Capture the one-stream step as a CUDA graph (once per learner); returns a callable that replays it."""
        if self._graph_replay is not None:
            return self._graph_replay
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
        self._graph = graph  # kept alive: its replay is reused (the worker loop, later requests)
        self._graph_replay = graph.replay
        return graph.replay

    def time(self, fn, iterations: int, warmup: int, budget_s: float | None = None, clock=None) -> float:
        """Median seconds of ``fn()`` (each call synchronised) after ``warmup`` calls; with ``budget_s``, it stops
        once that long has passed and :data:`MIN_TIMED` calls were timed (the warm-up stops at a fifth of it).
        :attr:`samples` is then the calls timed."""
        torch = self.torch
        clock = clock or time.perf_counter
        start = clock()
        for _ in range(warmup):
            if budget_s is not None and clock() - start > budget_s / 5:
                break
            fn()
        torch.cuda.synchronize(self.device)
        samples = []
        for _ in range(iterations):
            if budget_s is not None and len(samples) >= MIN_TIMED and clock() - start > budget_s:
                break
            t = clock()
            fn()
            torch.cuda.synchronize(self.device)
            samples.append(clock() - t)
        self.samples = len(samples)
        return statistics.median(samples)


def search_streams(learner: SyntheticLearner, *, iterations: int = 200, warmup: int = 20,
                   try_graph: bool = True, budget_s: float | None = None,
                   candidates: Sequence[int] | None = None) -> LearnerTiming:
    """Time each stream count of ``candidates`` (default :func:`promising_streams`) and a CUDA graph; keep the
    fastest. ``budget_s``: the search's time budget, shared equally by the counts and the graph."""
    per: dict[int, float] = {}
    counts: dict[int | str, int] = {}
    notes: list[str] = []
    tried = tuple(candidates) if candidates is not None else promising_streams(learner.batch_size)
    each = None if budget_s is None else budget_s / (len(tried) + (1 if try_graph else 0))
    for s in tried:
        per[s] = learner.time(lambda s=s: learner.step(s), iterations, warmup, each)
        counts[s] = learner.samples
    best_s_count = min(per, key=per.get)
    graph_s = None
    if try_graph:
        try:
            replay = learner.capture_graph()
            graph_s = learner.time(replay, iterations, warmup, each)
            counts["graph"] = learner.samples
        except Exception as exc:  # noqa: BLE001 - graphs are optional
            notes.append(f"CUDA graph capture failed ({type(exc).__name__}: {exc}); streams only")
    use_graph = graph_s is not None and graph_s < per[best_s_count]
    best = graph_s if use_graph else per[best_s_count]
    return LearnerTiming(learner.batch_size, per, graph_s, 1 if use_graph else best_s_count, best, use_graph,
                         tuple(notes), counts["graph" if use_graph else best_s_count])
