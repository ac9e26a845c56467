"""The docs a new user reads stay true: the README's Install section (its example trains, its extras table
matches pyproject.toml, every distribution ships its LICENSE) and docs/user-guide.md (every block runs)."""

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cpu_backend import needs_cpu_backend

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
GUIDE = (ROOT / "docs" / "user-guide.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_the_quickstart_is_two_commands():
    assert blocks(section("Quickstart"), "bash") == ["make demo\nmake test\n"]


@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
@needs_cpu_backend
def test_the_install_example_composes_and_trains(tmp_path):
    (code,) = blocks(section("Install"), "python")
    assert "Composer(" in code and "composer.run()" in code and "ParallelRuntime(" in code
    assert len(code.strip().splitlines()) <= 14
    tiny = code.replace("max_env_steps=100_000", "max_env_steps=1_500").replace("composer.run()",
                                                                                "composer.run(profile=False)")
    assert tiny.count("1_500") == 1 and "profile=False" in tiny
    (tmp_path / "quickstart.py").write_text(tiny)
    out = subprocess.run([sys.executable, "quickstart.py"], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env={**os.environ, "PEARL_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "stopped by max_env_steps" in out.stdout
    run = tmp_path / "runs" / "quickstart"
    assert (run / "checkpoint.pt").is_file() and (run / "episodes.csv").is_file()


def test_the_install_commands_name_what_is_here():
    (commands,) = blocks(section("Install"), "bash")
    assert "pip install torch" in commands.splitlines()[0]  # torch first
    assert "pip install '.[rl]' ./plugins/pearl_cpu" in commands
    text = section("Install")
    for plugin in re.findall(r"\./plugins/(\w+)", text):
        assert (ROOT / "plugins" / plugin / "pyproject.toml").is_file(), plugin


def test_the_extras_table_lists_every_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", section("Install"), flags=re.M))
    assert set(rows) == set(extras)
    for name, deps in extras.items():
        for dep in deps:
            package = re.split(r"[\[<>=;]", dep)[0]
            assert package in rows[name], (name, package)


def test_every_distribution_ships_the_license():
    for root in [ROOT, *sorted((ROOT / "plugins").iterdir())]:
        if not (root / "pyproject.toml").is_file():
            continue
        project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
        assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"], root
        assert "Copyright (c) 2026 PEARL developers" in (root / "LICENSE").read_text(), root


def test_the_readme_links_the_user_guide():
    assert "(docs/user-guide.md)" in README


@pytest.mark.slow  # ~60 s on 2 cores: four short runs, a plan, a compose, a resume
@needs_cpu_backend
def test_every_block_of_the_user_guide_runs_in_order(tmp_path):
    """The Python blocks as scripts, then the shell session, in one empty directory (tiny budgets as written)."""
    env = {**os.environ, "PEARL_CACHE_DIR": str(tmp_path / "cache"),
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    python_blocks = blocks(GUIDE, "python")
    assert len(python_blocks) >= 4
    for i, code in enumerate(python_blocks):
        (tmp_path / f"block{i}.py").write_text(code)
        out = subprocess.run([sys.executable, f"block{i}.py"], capture_output=True, text=True, timeout=600,
                             cwd=tmp_path, env=env)
        assert out.returncode == 0, f"block {i}:\n{code}\n" + out.stdout[-3000:] + out.stderr[-3000:]
    assert (tmp_path / "policy.pt").is_file()
    (session,) = blocks(GUIDE, "bash")
    for line in session.strip().splitlines():
        assert line.startswith(("pearl ", "python ")), line
        cmd = line.split()
        if cmd[0] == "python":
            cmd[0] = sys.executable
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
        assert out.returncode == 0, line + "\n" + out.stdout[-3000:] + out.stderr[-3000:]
    assert json.loads((tmp_path / "runs" / "cli" / "result.json").read_text())["env_steps"] >= 2500
