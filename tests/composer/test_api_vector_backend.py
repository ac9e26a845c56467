"""The composer's choice of the Collector's vector back end (:mod:`pearl_core.runtime.vector`): recorded in
the plan, forced by the user, written by ``pearl compose --vector-backend``."""

from __future__ import annotations

import pytest

from pearl_core.errors import ComposerError
from pearl_core.runtime.vector import choose_vector_backend


def test_the_composer_records_and_lets_the_user_force_it():
    from test_api import cartpole, composer

    c = cartpole()
    assert c.run(profile=False).runtime_plan.vector_backend == "loop"  # one env per actor
    c.set_actors("CartPole-v1", n_actors=1, envs_per_actor=8)
    assert c.run(profile=False).runtime_plan.vector_backend == choose_vector_backend("CartPole-v1", 8)[0]
    c.set_actors("CartPole-v1", n_actors=1, envs_per_actor=8, vector_backend="gym-sync")
    assert c.run(profile=False).runtime_plan.vector_backend == "gym-sync"
    with pytest.raises(ComposerError, match="vector_backend"):
        composer().set_actors("CartPole-v1", vector_backend="threads")


def test_pearl_compose_vector_backend_option(tmp_path):
    import ast

    from typer.testing import CliRunner

    from pearl_core.cli import app
    from test_api import THIS_MACHINE, assign

    def compose(*args):
        out = tmp_path / "runtime.py"
        res = CliRunner().invoke(app, ["compose", "-H", str(THIS_MACHINE), "--no-profile", "--hidden", "32,32",
                                       "-o", str(out), "--envs-per-actor", "4", *args])
        return res, out

    res, out = compose("--vector-backend", "gym-sync")
    assert res.exit_code == 0, res.output
    kw = {k.arg: k.value for k in assign(ast.parse(out.read_text(encoding="utf-8")), "RUNTIME_PLAN").keywords}
    assert ast.literal_eval(kw["vector_backend"]) == "gym-sync" and ast.literal_eval(kw["envs_per_actor"]) == 4
    assert "stepped by the 'gym-sync' vector back end" in out.read_text(encoding="utf-8")
    out.unlink()
    res, out = compose("--vector-backend", "threads")
    assert res.exit_code == 2 and "vector_backend" in res.output and not out.exists()
