"""The learner iteration as one CUDA graph: sample -> gather -> update -> priorities, captured once, replayed.

On a GPU a small RL update is a few hundred tiny kernels; launching them one by one from python costs
more than running them (an eager DQN 256-256 update on an H200: 2-2.7 ms, the same work as a graph:
0.2-0.3 ms, ``benchmarks/results/cuda_gpu_check.md``). Where the replay's device face and the trainer's
update can both be captured, :class:`GraphedIteration` records one iteration (or ``K``) into a
``torch.cuda.CUDAGraph`` once and replays it::

    replay.graph_sync()               # slot and sample counts into device scalars (two fills)
    trainer's hooks.before()          # eager work due now (DQN's target copy at its update)
    graph.replay()                    # K x (graph_sample -> hooks.update -> graph_write_back)
    hooks.advance(K); replay.graph_advance(K)

What it needs (:func:`graph_unsafe` says which is missing, and the run goes on eagerly with that reason
logged): a CUDA device; a replay whose storage and tree declare ``graph_safe``
(:meth:`~pearl_core.replay.ReplayManager.graph_unsafe`); a trainer whose
:meth:`~pearl_core.trainer.Trainer.graph_hooks` gives the update's parts
(:class:`~pearl_core.trainer.GraphHooks`; the built-in DQN and SAC do); torch able to register the
trainer's and the replay's generators with a graph. A capture that fails for any other reason falls
back the same way: the run never stops for want of a graph.

The same iteration runs eagerly on any device (:meth:`GraphedIteration.iteration`), which is how it
is tested without a GPU (``tests/runtime/test_graphstep.py``): it equals the eager device path update
for update, changes no python state while it runs (a capture would freeze it), and makes no host
synchronisation (:func:`host_syncs`).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

from pearl_core.replay.base import SampledBatch
from pearl_core.trainer import GraphHooks, UpdateResult

__all__ = ["GraphedIteration", "cuda_capture", "graph_settings", "graph_unsafe", "host_syncs"]

log = logging.getLogger(__name__)

#: Eager iterations run (and counted as updates) before a capture: lazy initialisation (cuBLAS handles,
#: optimiser state, cached tables) happens outside the graph.
WARMUP = 3

#: The aten operators after which a host waits for a GPU: a tensor read as a python number, or an output
#: whose size depends on the values (the host must read them to allocate it).
SYNC_OPS = ("_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique", "_unique2", "unique_dim",
            "unique_consecutive", "repeat_interleave", "_assert_async", "item")


def graph_settings(plan: Any) -> tuple[str, int]:
    """``(mode, per_launch)`` from the learner device's config in a runtime plan: ``cuda_graph`` (``"auto"``,
    the default, or ``"off"``) and ``graph_per_launch`` (updates per launch, default 1).

    Raises:
        SpecError: a value of another kind (named, with the fix).
    """
    from pearl_core.errors import SpecError

    cfg = dict(getattr(plan, "device_config", {}) or {}).get("learner", {})
    mode, k = cfg.get("cuda_graph", "auto"), cfg.get("graph_per_launch", 1)
    if mode not in ("auto", "off") or isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise SpecError(f"RuntimePlan.device_config['learner']: cuda_graph = {mode!r}, graph_per_launch = {k!r}; "
                        "expected cuda_graph 'auto' or 'off' and graph_per_launch an integer >= 1. Fix: e.g. "
                        "{'cuda_graph': 'auto', 'graph_per_launch': 4}.")
    return mode, k


def graph_unsafe(step: Any, *, cuda_only: bool = True) -> str | None:
    """Why ``step``'s iteration cannot be a CUDA graph, or ``None`` (``cuda_only=False``: any device, for a
    caller with its own ``capture``)."""
    if not step.on_device:
        return "the update does not run on the device path (host batches)"
    replay = step.replay
    if replay is None or step.trainer is None:
        return "the replay and the learner are not in one process (setting 1)"
    dev = replay.device
    if dev is None or (cuda_only and dev.type != "cuda"):
        return f"the replay's device is {dev} (CUDA graphs need a CUDA device)"
    reason = replay.graph_unsafe()
    if reason is not None:
        return reason
    if step.trainer.graph_hooks() is None:
        return f"{type(step.trainer).__name__}.graph_hooks() gave None (its update cannot be captured as configured)"
    return None


def cuda_capture(fn: Callable[[], None], device: Any, generators: Sequence[Any] = ()) -> Callable[[], None]:
    """Capture ``fn`` as a ``torch.cuda.CUDAGraph`` on ``device``; return its ``replay``.

    Raises:
        RuntimeError: torch cannot register a non-default generator with a graph (``fn`` draws from one),
            or the capture failed (the message is torch's).
    """
    import torch

    graph = torch.cuda.CUDAGraph()
    for gen in generators:
        register = getattr(graph, "register_generator_state", None)
        if register is None:
            raise RuntimeError(f"torch {torch.__version__} cannot register a generator with a CUDA graph "
                               "(CUDAGraph.register_generator_state); the update draws from one")
        register(gen)
    torch.cuda.synchronize(device)
    with torch.cuda.device(device), torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize(device)
    return graph.replay


def make_capturable(optimizers: Sequence[Any], device: Any) -> None:
    """Let each optimizer step inside a graph: ``capturable=True`` with its step counts on ``device``."""
    import torch

    for opt in optimizers:
        for group in opt.param_groups:
            group["capturable"] = True
        for state in opt.state.values():
            step = state.get("step")
            if isinstance(step, torch.Tensor) and step.device != torch.device(device):
                state["step"] = step.to(device=device, dtype=torch.float32)


class GraphedIteration:
    """``K`` learner iterations of ``step`` as one captured launch (see the module docstring).

    Args:
        step: the :class:`~pearl_core.runtime.step.LearnerStep` whose replay and trainer it runs (its device
            path: :attr:`~pearl_core.runtime.step.LearnerStep.on_device`).
        hooks: the trainer's :class:`~pearl_core.trainer.GraphHooks`.
        per_launch: ``K``, iterations per launch; lowered to the largest divisor of ``hooks.period`` (when it
            has one) that is at most it.
        capture: ``capture(fn, device, generators) -> replay`` (default :func:`cuda_capture`).

    Attributes:
        per_launch: ``K`` as used.
        result: the last launch's :class:`~pearl_core.trainer.UpdateResult` (tensors the replays overwrite).
        launches: launches replayed so far.
    """

    def __init__(self, step: Any, hooks: GraphHooks, *, per_launch: int = 1,
                 capture: Callable[..., Callable[[], None]] = cuda_capture):
        self.step, self.hooks, self._capture = step, hooks, capture
        k = max(1, int(per_launch))
        if hooks.period is not None:
            period = max(1, int(hooks.period))
            k = min(k, period)
            while period % k:
                k -= 1
        self.per_launch = k
        if step.replay is None:
            raise ValueError("GraphedIteration needs the step's replay (setting 2 or the serial runtime)")
        self.replay: Any = step.replay  # a ReplayManager with its device face (graph_unsafe said so)
        self.batch_size = step.batch_size
        self.result: UpdateResult | None = None
        self.launches = 0
        self._launch: Callable[[], None] | None = None
        self._out: dict[str, Any] | None = None

    # -- the captured work ------------------------------------------------------------------------
    def iteration(self) -> UpdateResult:
        """One iteration in device operations only: the draw into the static batch, the update, the
        write-back. Reads and changes no python state that varies between launches."""
        sampled: SampledBatch = self.replay.graph_sample(self.batch_size, self._out)
        result = self.hooks.update(sampled.batch, sampled.weights)
        self.replay.graph_write_back(sampled.indices, result.td_errors)
        self.result = result
        return result

    def _iterations(self) -> None:
        for _ in range(self.per_launch):
            self.iteration()

    def capture(self) -> None:
        """Capture the launch (:meth:`LearnerStep.run` does it after :data:`WARMUP` eager updates).

        Raises:
            Exception: whatever the capture raised; the caller runs eagerly (:meth:`LearnerStep.use_graph`).
        """
        device = self.replay.device
        make_capturable(self.hooks.optimizers, device)
        self._out = self._static_batch()
        self.replay.graph_sync()
        generators = (*self.hooks.generators, self.replay._device_state().gen)
        self._launch = self._capture(self._iterations, device, generators)

    def _static_batch(self) -> dict[str, Any]:
        """Destination tensors the draw gathers into (one per field and the weights): the graph's input
        buffers, the same on every replay (shaped by a gather of slot 0; no draw is spent on them)."""
        import torch

        from pearl_core.replay.storage import TRANSITION_FIELDS

        device = self.replay.device
        rows = self.replay.storage.gather_device(torch.zeros(self.batch_size, dtype=torch.int64, device=device))
        out = {name: getattr(rows, name).clone() for name in TRANSITION_FIELDS}
        out["weights"] = torch.ones(self.batch_size, dtype=torch.float32, device=device)
        return out

    # -- running ----------------------------------------------------------------------------------
    def aligned(self, updates: int) -> bool:
        """Whether a launch may start after ``updates`` updates (a multiple of ``K``)."""
        return updates % self.per_launch == 0

    def launch(self) -> UpdateResult:
        """``K`` updates: the counts into the device, the trainer's eager work due, one replay, the counters."""
        assert self._launch is not None, "GraphedIteration.launch before capture"
        self.replay.graph_sync()
        self.hooks.before()
        self._launch()
        self.hooks.advance(self.per_launch)
        self.replay.graph_advance(self.per_launch)
        self.launches += 1
        assert self.result is not None
        return self.result


def host_syncs(fn: Callable[[], Any]) -> list[str]:
    """The operators in ``fn()`` after which the host would wait for a GPU (:data:`SYNC_OPS`), in order.

    It runs ``fn`` under a torch dispatch mode that records every aten operator, so it works on CPU
    tensors too: what makes a GPU run wait (``.item()``, ``float(t)``, ``bool(t)``, ``if t:``, ``nonzero``,
    boolean-mask indexing, ...) dispatches the same operators on the CPU. Copies to the host (``.cpu()``
    of a CPU tensor is no operator at all) are what it cannot see on the CPU; torch's CUDA sync debug mode
    sees those on a GPU (``plugins/pearl_cuda/scripts/iteration_bench.py``).
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class _Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name in SYNC_OPS:
                seen.append(name)
            elif name in ("index", "index_put", "index_put_") and any(
                    getattr(i, "dtype", None) == torch.bool for i in (args[1] if len(args) > 1 else ()) or ()):
                seen.append(f"{name} (a boolean mask)")  # its size depends on the values: nonzero on a GPU
            return func(*args, **(kwargs or {}))

    with _Record():
        fn()
    return seen
