"""The layout rules of cmixlib (CONTRIBUTING.md), checked from the source alone.

::

    python tools/check_layout.py          # prints every breach; exit status 1 if any

- no import cycle between cmixlib's modules (an import of a sub-package counts as an import of
  its ``__init__``; ``if TYPE_CHECKING:`` imports count too: they are read by tools and readers);
- at most 8 plain modules at cmixlib's top level (the rest lives in sub-packages by concern);
- no module imports another module's private name (``from cmixlib.x import _y`` or ``x._y``);
- no module over 400 lines.
"""
from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cmixlib"
MAX_LINES = 400
MAX_TOP_LEVEL = 8


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = [package.name, *path.relative_to(package).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def scan(package: Path = PACKAGE):
    """``(edges, private, lines)``: the import graph, the private imports ``(module, from, name)``
    and each module's line count."""
    mods = modules(package)
    edges: dict[str, set[str]] = defaultdict(set)
    private: list[tuple[str, str, str]] = []
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(mod, is_package, node)
                if base.split(".")[0] != package.name:
                    continue
                for a in node.names:
                    full = f"{base}.{a.name}"
                    if full in mods:
                        edges[mod].add(full)
                        aliases[a.asname or a.name] = full
                    elif base in mods:
                        edges[mod].add(base)
                        if a.name.startswith("_") and not a.name.startswith("__") and base != mod:
                            private.append((mod, base, a.name))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods:
                        edges[mod].add(a.name)
                        if a.asname:
                            aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and node.attr.startswith("_")
                    and not node.attr.startswith("__") and aliases[node.value.id] != mod):
                private.append((mod, aliases[node.value.id], node.attr))
        edges[mod].discard(mod)
    lines = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in mods.items()}
    return edges, private, lines


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return found


def breaches(package: Path = PACKAGE) -> list[str]:
    edges, private, lines = scan(package)
    mods = modules(package)
    out = [f"import cycle: {' <-> '.join(c)}" for c in cycles(edges)]
    top = sorted(m for m, p in mods.items() if m.count(".") == 1 and p.name != "__init__.py")
    if len(top) > MAX_TOP_LEVEL:
        out.append(f"{len(top)} plain modules at the top level (at most {MAX_TOP_LEVEL}): {top}")
    out += [f"private import: {m} uses {src}.{name}" for m, src, name in sorted(set(private))]
    out += [f"too long: {m} has {n} lines (at most {MAX_LINES})"
            for m, n in sorted(lines.items()) if n > MAX_LINES]
    return out


if __name__ == "__main__":
    found = breaches()
    print("\n".join(found) if found else "cmixlib's layout keeps every rule")
    sys.exit(1 if found else 0)
