"""The kernels under oclgrind (invalid accesses, data races), via scripts/oclgrind_check.sh.

The only FPGA test allowed to skip: it needs oclgrind and a Python with pyopencl, which
CI does not install. Point PEARL_CL_CHECK_PYTHON at such an interpreter to run it; the
recorded run is in RESULTS.md.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "oclgrind_check.sh"


def test_kernels_run_clean_under_oclgrind():
    if shutil.which("oclgrind") is None:
        pytest.skip("oclgrind is not installed (apt-get install -y oclgrind); see plugins/pearl_fpga/RESULTS.md")
    env = {k: v for k, v in os.environ.items() if k != "OCL_ICD_FILENAMES"}
    env["PYTHON"] = os.environ.get("PEARL_CL_CHECK_PYTHON", sys.executable)
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode == 77:
        pytest.skip(proc.stdout.strip() + " (set PEARL_CL_CHECK_PYTHON to a Python with pyopencl)")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "control: oclgrind reported the planted" in proc.stdout
    assert "kernel error lines reported by oclgrind: 0" in proc.stdout
    assert "PASS" in proc.stdout
