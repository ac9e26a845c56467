"""pearl_core.plugins at load: the plugin contract version each plugin declares, and backend names two plugins claim."""

from __future__ import annotations

import logging
import types

import pytest
from typer.testing import CliRunner

from pearl_core.backend import Availability, Backend
from pearl_core.errors import BackendUnavailableError, InvalidOptionError, PluginContractError
from pearl_core.hookspecs import PLUGIN_API_ATTR, PLUGIN_API_VERSION, hookimpl
from pearl_core.placement import make_tree
from pearl_core.plugins import PluginRegistry
from pearl_core.testing import ReferenceSumTree


class LastWeeksBackend(Backend):
    """Written against contract 1.0: make_sum_tree knows threads= only and refuses any other option."""

    name = "oldie"
    device_kind = "cpu"

    def availability(self):
        return Availability.yes()

    def devices(self):
        return []

    def make_sum_tree(self, capacity, fanout=16, **options):
        if set(options) - {"threads"}:
            raise InvalidOptionError(f"unknown sum-tree options {sorted(set(options) - {'threads'})}")
        return ReferenceSumTree(capacity, fanout)


def plugin(*classes, api=None):
    @hookimpl
    def pearl_register_backends(register):
        for cls in classes:
            register(cls)

    ns = types.SimpleNamespace(pearl_register_backends=pearl_register_backends)
    if api is not None:
        setattr(ns, PLUGIN_API_ATTR, api)
    return ns


def named(cls, name):
    return type(f"{cls.__name__}_{name}", (cls,), {"name": name})


def test_current_version_is_the_one_documented():
    assert PLUGIN_API_VERSION == (1, 1)


@pytest.mark.parametrize("api", [None, "1.0"])
def test_a_plugin_of_an_older_contract_gets_no_device_option_and_runs(api, caplog):
    reg = PluginRegistry(autoload=False)
    with caplog.at_level(logging.WARNING, logger="pearl_core.plugins"):
        rec = reg.register_plugin(plugin(LastWeeksBackend, api=api), name="oldie", distribution="oldie-dist",
                                  version="0.3")
    assert rec.loaded and rec.api == api
    if api is None:  # no declaration: a warning with the fix, served as 1.0
        (text,) = rec.warnings
        assert "plugin 'oldie' (oldie-dist 0.3) declares no plugin contract version" in text
        assert f'{PLUGIN_API_ATTR} = "1.1"' in text and text in caplog.text
    else:
        assert rec.warnings == ()
    # the runtime's call (pearl_core.placement.make_tree passes threads= and device=) reaches it without device=
    tree = make_tree("oldie", "cpu", 8, 4, threads=2, registry=reg)
    tree.update([1], [2.0])
    assert tree.total() == 2.0


def test_a_plugin_of_the_current_contract_gets_the_device_option():
    seen = {}

    class Current(LastWeeksBackend):
        name = "current"

        def make_sum_tree(self, capacity, fanout=16, **options):
            seen.update(options)
            return ReferenceSumTree(capacity, fanout)

    reg = PluginRegistry(autoload=False)
    rec = reg.register_plugin(plugin(Current, api="1.1"), name="current")
    assert rec.loaded and rec.warnings == () and rec.api == "1.1"
    make_tree("current", "cpu", 8, 4, threads=2, registry=reg)
    assert seen == {"threads": 2, "device": "cpu"}


def test_another_major_is_refused_naming_plugin_versions_and_fix():
    reg = PluginRegistry(autoload=False)
    rec = reg.register_plugin(plugin(LastWeeksBackend, api="2.0"), name="future", distribution="future-dist",
                              version="9.0")
    assert not rec.loaded and isinstance(rec.error, PluginContractError)
    text = str(rec.error)
    assert "plugin 'future' (future-dist 9.0)" in text and "contract 2.0" in text and "implements 1.1" in text
    assert "Fix:" in text
    with pytest.raises(BackendUnavailableError, match="failed to load"):
        reg.get_backend("oldie")


def test_a_newer_minor_loads_with_a_warning():
    reg = PluginRegistry(autoload=False)
    rec = reg.register_plugin(plugin(named(LastWeeksBackend, "newer"), api="1.7"), name="newer")
    assert rec.loaded and rec.api == "1.7"
    (text,) = rec.warnings
    assert "contract 1.7, newer than this pearl-core's 1.1" in text and "upgrade pearl-core" in text
    assert reg.get_backend("newer").name == "newer"


@pytest.mark.parametrize("api", ["one", "1", "1.1.0", (1,), "-1.0", 1.1])
def test_a_malformed_declaration_is_refused(api):
    rec = PluginRegistry(autoload=False).register_plugin(plugin(LastWeeksBackend, api=api), name="odd")
    assert isinstance(rec.error, PluginContractError)
    assert "plugin 'odd'" in str(rec.error) and PLUGIN_API_ATTR in str(rec.error) and "Fix:" in str(rec.error)


def test_shipped_plugins_declare_the_current_contract():
    import pearl_cpu.plugin
    import pearl_fpga.plugin

    for module in (pearl_cpu.plugin, pearl_fpga.plugin):
        assert getattr(module, PLUGIN_API_ATTR) == "1.1"


# --------------------------------------------------------------------------- backend names


def _claimed_twice() -> PluginRegistry:
    """An entry point sorting before 'cpu' ('aaa') registers backend 'cpu' first, then pearl-cpu does."""
    reg = PluginRegistry(autoload=False)
    reg.register_plugin(plugin(named(LastWeeksBackend, "cpu"), api="1.1"), name="aaa", distribution="sneaky-dist",
                        version="0.1")
    reg.register_plugin(plugin(named(LastWeeksBackend, "cpu"), named(LastWeeksBackend, "extra"), api="1.1"),
                        name="cpu", distribution="pearl-cpu", version="0.1.0")
    return reg


def test_a_backend_name_two_plugins_claim_goes_to_neither_naming_both():
    reg = _claimed_twice()
    with pytest.raises(BackendUnavailableError) as info:
        reg.get_backend("cpu")
    text = str(info.value)
    assert "plugin 'aaa' (sneaky-dist 0.1)" in text and "plugin 'cpu' (pearl-cpu 0.1.0)" in text and "Fix:" in text
    assert "cpu" not in reg.backend_names() and reg.get_backend("extra").name == "extra"  # its other backend works
    assert all(r.loaded for r in reg.plugins())  # neither is blamed as broken
    for rec in reg.plugins():
        assert any("claimed by plugin 'aaa'" in w for w in rec.warnings), rec
    (row,) = [s for s in reg.status() if s.name == "cpu"]
    assert not row.available and "sneaky-dist" in row.reason and "pearl-cpu" in row.reason


def test_pearl_plugins_names_both_claimants(monkeypatch):
    import pearl_core.cli as cli

    monkeypatch.setattr(cli, "default_registry", _claimed_twice)
    out = CliRunner().invoke(cli.app, ["plugins"], env={"COLUMNS": "400"})
    assert out.exit_code == 0, out.output
    rows = [ln for ln in out.output.splitlines() if "claimed by" in ln]
    assert len(rows) == 2 and all("sneaky-dist" in ln and "pearl-cpu" in ln for ln in rows), out.output
    assert "failed to load" not in out.output
