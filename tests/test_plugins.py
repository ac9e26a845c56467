"""Plugin discovery: registration, broken plugins recorded not fatal, autoload switch."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import types

import pytest

from pearl_core import Availability, Backend, BackendUnavailableError, PluginRegistry
from pearl_core.errors import InvalidValueError
from pearl_core.hookspecs import hookimpl
from pearl_core.plugins import kernel_lookup
from pearl_core.testing import ReferenceSumTree


def make_backend(name: str, available: bool = True, reason: str | None = None, raises: Exception | None = None):
    class _B(Backend):
        device_kind = "test"

        def availability(self):
            if raises is not None:
                raise raises
            return Availability(available, reason)

        def devices(self):
            return []

        def make_sum_tree(self, capacity, fanout=16, **options):
            return ReferenceSumTree(capacity, fanout)

    _B.name = name
    return _B


def plugin_registering(*classes):
    @hookimpl
    def pearl_register_backends(register):
        for cls in classes:
            register(cls)

    return types.SimpleNamespace(pearl_register_backends=pearl_register_backends)


def test_register_and_get():
    reg = PluginRegistry(autoload=False)
    reg.register_plugin(plugin_registering(make_backend("alpha")), name="alpha", distribution="alpha-dist")
    backend = reg.get_backend("alpha")
    assert backend.name == "alpha"
    assert backend.make_sum_tree(8, 2).capacity == 8
    (row,) = reg.status()
    assert (row.name, row.available, row.distribution) == ("alpha", True, "alpha-dist")


def test_plugin_whose_registration_raises_is_recorded_and_others_work():
    @hookimpl
    def pearl_register_backends(register):
        raise OSError("libOpenCL.so.1 not found")

    reg = PluginRegistry(autoload=False)
    broken = reg.register_plugin(types.SimpleNamespace(pearl_register_backends=pearl_register_backends), name="fpga")
    reg.register_plugin(plugin_registering(make_backend("cpu")), name="cpu")
    assert not broken.loaded and "libOpenCL" in str(broken.error)
    assert reg.get_backend("cpu").name == "cpu"
    with pytest.raises(BackendUnavailableError) as info:
        reg.get_backend("fpga")
    assert isinstance(info.value.cause, OSError)
    assert "libOpenCL.so.1 not found" in str(info.value) and "['cpu']" in str(info.value)
    assert {(s.name, s.available) for s in reg.status()} == {("cpu", True), ("fpga", False)}


def test_unavailable_backend_says_why():
    reg = PluginRegistry(autoload=False)
    reg.register_plugin(plugin_registering(make_backend("gpu", False, "no device")), name="gpu")
    reg.register_plugin(plugin_registering(make_backend("boom", raises=RuntimeError("driver crashed"))), name="boom")
    with pytest.raises(BackendUnavailableError, match="no device"):
        reg.get_backend("gpu")
    with pytest.raises(BackendUnavailableError, match="driver crashed") as info:
        reg.get_backend("boom")
    assert isinstance(info.value.cause, RuntimeError)


def test_unknown_backend_lists_available():
    reg = PluginRegistry(autoload=False)
    reg.register_plugin(plugin_registering(make_backend("cpu")), name="cpu")
    with pytest.raises(BackendUnavailableError, match=r"no backend named 'tpu'.*\['cpu'\]"):
        reg.get_backend("tpu")


def test_duplicate_backend_name_is_refused_for_both():
    reg = PluginRegistry(autoload=False)
    reg.register_plugin(plugin_registering(make_backend("cpu")), name="first")
    rec = reg.register_plugin(plugin_registering(make_backend("cpu")), name="second")
    assert any("claimed by plugin 'first'" in w and "plugin 'second'" in w for w in rec.warnings)
    with pytest.raises(BackendUnavailableError, match="claimed by plugin 'first'.*and plugin 'second'"):
        reg.get_backend("cpu")


def test_registering_a_non_backend_is_a_recorded_failure():
    reg = PluginRegistry(autoload=False)
    rec = reg.register_plugin(plugin_registering(object), name="bad")
    assert not rec.loaded and "subclass of pearl_core.backend.Backend" in str(rec.error)


def test_autoload_switch(monkeypatch):
    monkeypatch.setenv("PEARL_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert PluginRegistry().plugins() == []
    monkeypatch.delenv("PEARL_DISABLE_PLUGIN_AUTOLOAD")
    names = {p.name for p in PluginRegistry().plugins()}
    assert {"cpu", "cuda", "fpga"} <= names


def _broken_distribution(tmp_path):
    """A real installed-looking distribution whose entry point raises on import."""
    dist = tmp_path / "pearl_broken-0.0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pearl-broken\nVersion: 0.0.1\n")
    (dist / "entry_points.txt").write_text("[pearl]\nbroken = pearl_broken_plugin\n")
    (tmp_path / "pearl_broken_plugin.py").write_text("raise ImportError('pearl_broken needs libmissing.so')\n")
    return tmp_path


def test_broken_entry_point_does_not_stop_cli_or_cpu(tmp_path):
    path = _broken_distribution(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(path), COLUMNS="250")
    env.pop("PEARL_DISABLE_PLUGIN_AUTOLOAD", None)
    out = subprocess.run([sys.executable, "-m", "pearl_core.cli", "plugins"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "broken" in out.stdout and "failed to load" in out.stdout and "libmissing.so" in out.stdout
    assert "available" in out.stdout
    code = textwrap.dedent(
        """
        import pearl_core
        tree = pearl_core.get_backend('cpu').make_sum_tree(16, 4)
        tree.update([3], [2.0])
        print('cpu ok', tree.sample([1.0])[0])
        try:
            pearl_core.get_backend('broken')
        except pearl_core.BackendUnavailableError as exc:
            print('broken:', type(exc.cause).__name__)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "cpu ok 3" in out.stdout and "broken: ImportError" in out.stdout


def _kernel_backend(name: str, kind: str, *, available: bool = True, kernel=None, raises: Exception | None = None):
    cls = make_backend(name, available, None if available else "no device")
    cls.device_kind = kind

    def learner_kernel(self, kname):
        if raises is not None:
            raise raises
        return kernel if kname == "dqn_mlp" else None

    cls.learner_kernel = learner_kernel
    return cls


def test_kernel_lookup_asks_the_backends_of_the_device_kind(caplog):
    def factory(*args):
        return args

    reg = PluginRegistry(autoload=False)
    reg.register_plugin(plugin_registering(
        _kernel_backend("a-broken", "npu", raises=RuntimeError("driver crashed")),
        _kernel_backend("b-absent", "npu", available=False, kernel=lambda *a: None),
        _kernel_backend("c-npu", "npu", kernel=factory),
        _kernel_backend("other", "dsp", kernel=lambda *a: None)), name="npus")
    lookup = kernel_lookup("npu:1", reg)
    # the broken backend is logged and skipped, the unavailable one is skipped, the first offer wins
    assert lookup("dqn_mlp") is factory
    assert "driver crashed" in caplog.text and "a-broken" in caplog.text
    assert lookup("no-such-step") is None
    assert kernel_lookup("tpu", reg)("dqn_mlp") is None  # no backend of that kind: None, never an error
    assert reg.device_kinds() == ("dsp", "npu")
    with pytest.raises(InvalidValueError, match="device = '' is invalid"):
        kernel_lookup("")


def test_kernel_lookup_on_the_default_registry_pickles_as_its_device():
    lookup = kernel_lookup("cpu")
    again = pickle.loads(pickle.dumps(lookup))
    assert again == lookup and again.device == "cpu" and callable(again)
