"""The CUDA skeleton registers through its entry point and says why it is unavailable."""

import pytest

import pearl_core
from pearl_core.plugins import PluginRegistry


def test_registers_and_reports_unavailable_with_reason():
    reg = PluginRegistry()
    (rec,) = [p for p in reg.plugins() if p.name == "cuda"]
    assert rec.loaded and rec.distribution == "pearl-cuda" and rec.backends == ("cuda",)
    (row,) = [s for s in reg.status() if s.name == "cuda"]
    assert not row.available
    assert row.reason and len(row.reason) > 20  # a real sentence, not an empty flag


def test_asking_for_it_raises_with_the_reason():
    reg = PluginRegistry()
    (row,) = [s for s in reg.status() if s.name == "cuda"]
    with pytest.raises(pearl_core.BackendUnavailableError) as info:
        reg.get_backend("cuda")
    assert row.reason in str(info.value)
