"""A hardware-spec quantity valid as written but not once converted (memory_GiB = 1e29 is over the bound in
bytes; 1e300 was inf bytes) is refused under the key the file wrote, not the internal field."""

from __future__ import annotations

from pathlib import Path

import pytest

from pearl_core.composer.spec import load_spec
from pearl_core.errors import SpecError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hardware" / "this-machine.toml"


def test_memory_gib_that_overflows_is_named_as_written(tmp_path):
    text = EXAMPLE.read_text()
    assert "memory_bytes = 25276514304" in text
    spec = tmp_path / "huge.toml"
    spec.write_text(text.replace("memory_bytes = 25276514304", "memory_GiB = 1e29"))
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    msg = str(info.value)
    assert "device 'epyc': memory_GiB = 1e+29 is invalid" in msg and "memory_bytes (1.073741824e+38)" in msg, msg
    assert "memory_bytes = " not in msg
