"""A script read from stdin has no file for the workers to import (:mod:`pearl_core.runtime.procs`): refused
before any worker starts.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from conftest import HELPERS

pytestmark = pytest.mark.usefixtures("no_leaks")


# --------------------------------------------------------------------------- a script from stdin


STDIN_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {here!r})
    from pearl_core.runtime.config import RunConfig, RuntimePlan, StopCriteria
    from pearl_core.runtime.parallel import ParallelRuntime

    cfg = RunConfig(env_id="CartPole-v1", trainer="faulty_envs:LinearQ", stop=StopCriteria(max_env_steps=200),
                    log_dir={log_dir!r})
    ParallelRuntime(cfg, RuntimePlan(setting=2), progress=False, plot=False, tensorboard=False).run()
    """
)


def test_a_script_from_stdin_is_refused_before_any_worker_starts(tmp_path):
    log_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-"], input=STDIN_SCRIPT.format(here=HELPERS, log_dir=str(log_dir)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "SpecError: the parallel runtime cannot start its workers: the main module's file is '<stdin>'" \
        in proc.stderr, proc.stderr[-2000:]
    assert "Fix: save the script to a file and run `python script.py`" in proc.stderr
    assert "killed by a signal" not in proc.stderr
    assert not log_dir.exists()  # refused before anything was written
