"""docs/hardware-spec.md stays runnable: its TOML example loads and its Python snippets run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pearl_core.composer import HardwareSpec

DOC = Path(__file__).resolve().parents[2] / "docs" / "hardware-spec.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_documented_spec_loads_and_plans(tmp_path, monkeypatch, capsys):
    (toml,) = blocks("toml")
    (tmp_path / "workstation.toml").write_text(toml)
    spec = HardwareSpec.load(tmp_path / "workstation.toml")
    assert [d.name for d in spec.devices] == ["cpu0", "gpu0", "fpga0"]
    assert spec.device("fpga0").options["initiation_interval"] == 2
    monkeypatch.chdir(tmp_path)
    load_and_plan, in_python = blocks("python")
    exec(compile(load_and_plan, "hardware-spec.md", "exec"), {})
    out = capsys.readouterr().out
    assert "via=('cpu0',)" in out and "workstation (host cpu0" in out
    namespace: dict = {}
    exec(compile(in_python, "hardware-spec.md", "exec"), namespace)
    assert HardwareSpec.from_dict(namespace["spec"].to_dict(), kinds=("cpu",)) == namespace["spec"]


def test_every_device_key_is_documented():
    from pearl_core.composer import spec as spec_module

    text = DOC.read_text(encoding="utf-8")
    for key in spec_module._DEVICE_PLAIN + spec_module._LINK_PLAIN:
        assert f"`{key}`" in text or f"`[device.{key}]`" in text, key
    for prefix, _ in list(spec_module._DEVICE_QUANTITIES.values()) + list(spec_module._LINK_QUANTITIES.values()):
        assert f"`{prefix}_<" in text, prefix
    for units in spec_module.UNITS.values():
        for unit in units:
            assert f"`{unit}`" in text, unit


@pytest.mark.parametrize("name", ["this-machine.toml", "cpu-gpu-fpga.toml"])
def test_example_specs_use_only_documented_keys(name):
    HardwareSpec.load(DOC.parents[1] / "examples" / "hardware" / name)
