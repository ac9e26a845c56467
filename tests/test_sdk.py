"""Plugins import one typed surface: ``pearl_core.sdk``, plus ``errors``, ``hookspecs`` and ``testing``.

Every import statement in a plugin package counts, wherever it stands (module
level, inside a function, under ``TYPE_CHECKING``). The plugins' own tests and
scripts are not checked: a test may import what it tests.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_PACKAGES = (
    ROOT / "plugins" / "pearl_cpu" / "pearl_cpu",
    ROOT / "plugins" / "pearl_cuda" / "pearl_cuda",
    ROOT / "plugins" / "pearl_fpga" / "pearl_fpga",
    ROOT / "examples" / "plugin_minimal" / "pearl_example_numpy",
)
ALLOWED = ("pearl_core.sdk", "pearl_core.errors", "pearl_core.hookspecs", "pearl_core.testing")


def allowed(module: str) -> bool:
    return any(module == ok or (ok == "pearl_core.testing" and module.startswith(ok + ".")) for ok in ALLOWED)


def core_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every ``pearl_core`` import in a file; ``from pearl_core import x`` counts as
    ``pearl_core.x`` (a submodule or a name of the package, neither of which is the SDK)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "pearl_core"]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module == "pearl_core":
                found += [(node.lineno, f"pearl_core.{a.name}") for a in node.names]
            elif node.module.split(".")[0] == "pearl_core":
                found.append((node.lineno, node.module))
    return found


def violations(roots) -> list[str]:
    """``file:line: module`` for every import of a core module a plugin may not import."""
    out = []
    for root in roots:
        for path in sorted(Path(root).rglob("*.py")):
            for line, module in core_imports(path):
                if not allowed(module):
                    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                    out.append(f"{where}:{line}: {module}")
    return out


def test_plugin_packages_import_only_the_sdk_errors_hookspecs_and_testing():
    for root in PLUGIN_PACKAGES:
        assert any(root.rglob("*.py")), f"{root} has no Python files (moved? update PLUGIN_PACKAGES)"
    bad = violations(PLUGIN_PACKAGES)
    assert bad == [], ("plugins may import only pearl_core.sdk, .errors, .hookspecs and .testing; "
                       "import these names from pearl_core.sdk (add them to it if missing):\n  " + "\n  ".join(bad))


def test_the_checker_catches_a_planted_violation(tmp_path):
    pkg = tmp_path / "pearl_planted"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pearl_core.sdk import Backend\nfrom pearl_core.errors import SpecError\n")
    (pkg / "costs.py").write_text("from pearl_core.composer.matrix import X\n")
    (pkg / "lazy.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pearl_core.replay.storage import DataStorage\n"
        "def f():\n    import pearl_core.runtime.queues\n    from pearl_core import placement\n"
        "    from pearl_core.testing.strategies import x\n")
    assert violations([pkg]) == [
        f"{pkg / 'costs.py'}:1: pearl_core.composer.matrix",
        f"{pkg / 'lazy.py'}:3: pearl_core.replay.storage",
        f"{pkg / 'lazy.py'}:5: pearl_core.runtime.queues",
        f"{pkg / 'lazy.py'}:6: pearl_core.placement",
    ]


def test_every_sdk_name_resolves_to_the_defining_modules_object():
    sdk = importlib.import_module("pearl_core.sdk")
    assert len(sdk.__all__) == len(set(sdk.__all__))
    for name in sdk.__all__:
        value = getattr(sdk, name)
        module = sdk._LAZY.get(name)
        if module is not None:  # a re-export, not a copy
            assert value is getattr(importlib.import_module(module), name), name
    assert set(sdk._LAZY) <= set(sdk.__all__)
    assert set(sdk.__all__) <= set(dir(sdk))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        sdk.Nope


def test_the_sdk_type_checking_block_names_the_lazy_names():
    """A type checker sees the lazy names through the ``TYPE_CHECKING`` imports: keep both in step."""
    sdk = importlib.import_module("pearl_core.sdk")
    tree = ast.parse(Path(sdk.__file__).read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    typed = {a.name: n.module for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert typed == sdk._LAZY


def test_importing_the_sdk_and_the_plugins_stays_light():
    """The SDK loads the composer, the runtime and torch only when a name of theirs is used."""
    code = ("import sys, pearl_core.sdk, pearl_cpu.backend, pearl_cuda.backend, pearl_fpga.backend; "
            "heavy = [m for m in ('torch', 'cupy', 'dpctl', 'pearl_core.composer', 'pearl_core.runtime', "
            "'pearl_core.algorithms') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
