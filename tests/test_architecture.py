"""The package's shape: no import circle inside pearl_core, no oversized module.

Every import statement counts, wherever it stands (module level, inside a
function, under ``TYPE_CHECKING``): a type-only or lazy import upward is still
an arrow. ``from pkg import name`` is an arrow to ``pkg.name`` when that is a
module, else to ``pkg`` itself; importing ``a.b.c`` is an arrow to ``a.b.c``
only (the implicit import of the parent packages is not counted, since every
module has it).

Run it by hand to see the graph's strongly connected groups::

    python tests/test_architecture.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pearl_core"
MAX_LINES = 600


def module_files(root: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (every import statement)."""
    mods = module_files(root)
    top = root.name
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                graph[mod].update(a.name for a in node.names if a.name in mods)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    name = ".".join(base + ([node.module] if node.module else []))
                else:
                    name = node.module or ""
                if name.split(".")[0] != top:
                    continue
                for alias in node.names:
                    sub = f"{name}.{alias.name}"
                    graph[mod].add(sub if sub in mods else name)
        graph[mod].discard(mod)
        graph[mod] &= set(mods)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def test_the_cycle_finder_finds_a_planted_circle(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from pkg import c\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import X\n")
    (pkg / "d.py").write_text("from . import a\n")
    graph = import_graph(pkg)
    assert graph["pkg.d"] == {"pkg.a"}
    assert import_cycles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]


def test_no_import_circle_in_pearl_core():
    cycles = import_cycles(import_graph())
    assert cycles == [], "import circles (every import statement counts): " + "; ".join(
        " <-> ".join(group) for group in cycles)


def test_no_module_over_the_size_limit():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in module_files().values()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines: {long}"


if __name__ == "__main__":
    graph = import_graph()
    cycles = import_cycles(graph)
    print(f"{len(graph)} modules, {sum(map(len, graph.values()))} import arrows, {len(cycles)} circles")
    for group in cycles:
        print(f"  {len(group)}: {', '.join(group)}")
    sys.exit(1 if cycles else 0)
