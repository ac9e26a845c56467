"""pearl_core.composer.validate.check_options: `pearl validate` refuses bad option values by their flag, before
anything is planned or run (exit status 2)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pearl_core.cli import app


@pytest.mark.parametrize("args,text", [
    (["--window", "-1"], "--window -1.0 is invalid; expected seconds > 0"),
    (["--window", "nan"], "--window nan is invalid"),
    (["--max-error", "-0.5"], "--max-error -0.5 is invalid; expected a fraction >= 0"),
    (["--repeats", "0"], "--repeats 0 is invalid; expected an integer >= 1"),
    (["--top", "0"], "--top 0 is invalid"),
    (["--learning-starts", "-3"], "--learning-starts -3 is invalid"),
    (["--sweep", "quick", "--window", "0"], "--window 0.0 is invalid"),
])
def test_bad_validate_options_are_named_by_their_flag(args, text):
    out = CliRunner().invoke(app, ["validate", "--no-profile", *args], env={"COLUMNS": "300"})
    assert out.exit_code == 2, out.output
    assert text in out.output and "Fix:" in out.output
    assert "StopCriteria" not in out.output and "running" not in out.output  # nothing ran, no internal field named
