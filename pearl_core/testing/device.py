"""The kit's checks of the device face (:mod:`pearl_core.replay.device`), shared by the sum-tree and the
storage conformance suites. Each runs only where the implementation under test offers the face, and is
skipped, with the reason, where it does not or where torch cannot reach that device here."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

from pearl_core.replay.storage import TRANSITION_FIELDS, Batch

__all__ = ["check_storage_device_face", "check_tree_device_face", "usable_device"]


def usable_device(obj: Any) -> Any:
    """``obj.torch_device`` as a ``torch.device``, or a skip when torch cannot allocate there."""
    import torch

    dev = torch.device(obj.torch_device)
    try:
        torch.empty(1, device=dev)
    except (RuntimeError, AssertionError) as exc:  # e.g. a GPU's face where torch has no CUDA
        pytest.skip(f"{type(obj).__name__}'s device face is on {dev}, which torch cannot use here ({exc})")
    return dev


def check_tree_device_face(tree: Any, ref: Any, assert_same_state: Callable[[Any, Any], None]) -> None:
    """:meth:`~pearl_core.testing.SumTreeConformance.test_device_face_matches_the_reference` on a new ``tree``
    of capacity 1000 and its ``ref``: five rounds of 300 updates with repeats, then priorities, the total and
    200 samples, each against the reference."""
    import torch

    from pearl_core.replay.device import DeviceSumTree

    if not isinstance(tree, DeviceSumTree):
        pytest.skip(f"{type(tree).__name__} offers no device face (host face only)")
    dev = usable_device(tree)
    rng = np.random.default_rng(11)
    for _ in range(5):
        idx = rng.integers(0, 1000, 300)
        prio = rng.integers(0, 9, 300).astype(np.float64)
        tree.update_device(torch.from_numpy(idx).to(dev), torch.from_numpy(prio).to(dev))
        ref.update(idx, prio)
        assert_same_state(tree, ref)
        got = tree.get_device(torch.from_numpy(idx).to(dev))
        assert got.dtype == torch.float64 and got.device == dev, f"get_device gave {got.dtype} on {got.device}"
        np.testing.assert_array_equal(got.cpu().numpy(), ref.get(idx))
        total = tree.total_device()
        assert float(total.reshape(-1)[0]) == ref.total(), "total_device() differs from the reference total"
        masses = rng.integers(0, int(ref.total()), 200).astype(np.float64) + rng.choice([0.0, 0.5], 200)
        got = tree.sample_device(torch.from_numpy(masses).to(dev))
        assert got.dtype == torch.int64 and got.device == dev, f"sample_device gave {got.dtype} on {got.device}"
        np.testing.assert_array_equal(got.cpu().numpy(), ref.sample(masses), err_msg=f"masses={masses!r}")


def check_storage_device_face(storage: Any, host: Any, add: Callable[[tuple, str], None],
                              rows: Callable[[np.random.Generator, int], tuple],
                              assert_same_batch: Callable[[Any, Any, str], None], seed: int) -> None:
    """:meth:`~pearl_core.testing.StorageConformance.test_device_face_gathers_like_the_host` on a new
    ``storage`` and its ``host`` twin (``add(rows, what)`` adds to both, ``rows(rng, n)`` makes them): three
    rounds of adds, then 17 rows gathered through the device face (into new tensors and into ``out``)
    against the host storage's gather."""
    import torch

    from pearl_core.replay.device import DeviceStorage, torch_dtype

    spec = host.spec
    if not isinstance(storage, DeviceStorage):
        pytest.skip(f"{type(storage).__name__} offers no device face (host face only)")
    dev = usable_device(storage)
    rng = np.random.default_rng(seed)
    for step, n in enumerate((5, 13, 20)):
        add(rows(rng, n), f"round {step}")
        idx = rng.integers(0, host.size, 17)
        want = host.gather(idx)
        outs = {name: torch.empty((17, *shape), dtype=torch_dtype(dtype), device=dev)
                for name, (shape, dtype) in spec.fields().items()}
        for out in (None, outs):
            what = f"round {step}, gather_device({'out' if out else ''})"
            got = storage.gather_device(torch.from_numpy(idx).to(dev), out)
            for name in TRANSITION_FIELDS:
                t = getattr(got, name)
                assert isinstance(t, torch.Tensor) and t.device == dev, f"{what}: {name} is not a tensor on {dev}"
                assert t.dtype == torch_dtype(spec.fields()[name][1]), f"{what}: {name} has dtype {t.dtype}"
                if out is not None:
                    assert t.data_ptr() == out[name].data_ptr(), f"{what}: {name} was not gathered into out"
            assert_same_batch(Batch(*(getattr(got, f).cpu().numpy() for f in TRANSITION_FIELDS)), want, what)
