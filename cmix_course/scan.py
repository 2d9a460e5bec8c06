"""What a submission's code does, read without running it (Python's ``ast``).

The grader runs the instructor's tests on the function a student wrote; these checks catch the
answers that pass those tests without being the student's work, and attempts to change the
grading itself:

* :func:`answer_uses` - the library or course functions an answer calls (or refers to): a
  ``reference_*`` function of :mod:`cmix_course`, or one of the exercise's ``forbidden``
  library functions (e.g. :func:`cmixlib.attention.rollout` for the rollout exercise), also
  through helper functions of the notebook that the answer calls, import aliases
  (``from cmixlib import rollout as r``) and module attributes (``cl.attention.rollout``);
* :func:`tampering` - code that reaches into the grader: assigning attributes of the
  ``cmix_course``/``cmixlib`` modules, ``sys.modules``, ``builtins``, signals, the kernel's
  namespace;
* :func:`forged_reports` - a checker's report written by hand (ignored: the grader reads no
  output of the notebook, it only lists them in the feedback).

IPython magics and shell lines (``%...``, ``!...``) are dropped before parsing; a cell that
still does not parse is reported by ``parse_cells`` and skipped.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

_MAGIC = re.compile(r"^\s*[%!]")
#: Top-level packages whose functions may compute an answer.
LIBRARIES = ("cmixlib", "cmix_course")
#: Texts of a checker's report: a notebook that writes them itself forges a report.
REPORT_TEXTS = ("all checks passed", "application/vnd.cmixlib.check+json")


@dataclass
class Code:
    """The parsed code cells of a notebook: ``trees`` (cell index, module), ``errors``
    (cell index, syntax error message), ``aliases`` (local name -> dotted path) and ``defs``
    (top-level name -> its last defining statement, in cell order)."""

    trees: list[tuple[int, ast.Module]] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    defs: dict[str, ast.AST] = field(default_factory=dict)
    star_imports: set[str] = field(default_factory=set)


def _source(cell) -> str:
    src = cell.get("source", "")
    src = src if isinstance(src, str) else "".join(src)
    return "\n".join("" if _MAGIC.match(line) else line for line in src.splitlines())


def _top_level(body: list[ast.stmt]):
    """Statements at module level, also inside if/try/with/for blocks (not inside functions)."""
    for node in body:
        yield node
        for attr in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, attr, None)
            if isinstance(inner, list) and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                    ast.ClassDef, ast.Lambda)):
                yield from _top_level([n for n in inner if isinstance(n, ast.AST)])


def parse_cells(nb) -> Code:
    """Parse every code cell of ``nb``; collect imports and top-level definitions."""
    code = Code()
    for k, cell in enumerate(nb.cells):
        if cell.get("cell_type") != "code":
            continue
        try:
            tree = ast.parse(_source(cell))
        except SyntaxError as exc:
            code.errors.append((k, f"{exc.msg} (line {exc.lineno})"))
            continue
        code.trees.append((k, tree))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        code.aliases[a.asname] = a.name
                    else:
                        code.aliases.setdefault(a.name.split(".")[0], a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name == "*":
                        code.star_imports.add(node.module)
                    else:
                        code.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        for node in _top_level(tree.body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                code.defs[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            code.defs[n.id] = node
    return code


def dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """``a.b.c`` of a Name/Attribute chain, its root replaced by what it was imported as."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(aliases.get(node.id, node.id))
    return ".".join(reversed(parts))


def _is_forbidden(path: str, forbidden: tuple[str, ...], star: set[str]) -> bool:
    parts = path.split(".")
    last = parts[-1]
    if last.startswith("reference_"):
        return True
    root = parts[0]
    names = {f.split(".")[-1] for f in forbidden}
    if last in names and (root in LIBRARIES or (len(parts) == 1 and any(s.split(".")[0] in LIBRARIES
                                                                         for s in star))):
        return True
    return "." in path and path in forbidden


def answer_uses(code: Code, name: str, forbidden: tuple[str, ...] = ()) -> list[str]:
    """The forbidden functions (dotted paths, sorted) that the answer ``name`` refers to,
    directly or through the notebook's own functions it calls. Empty when the answer is clean
    or not defined."""
    seen: set[str] = set()
    found: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen or current not in code.defs:
            continue
        seen.add(current)
        node = code.defs[current]
        for sub in ast.walk(node):
            if not (isinstance(sub, (ast.Name, ast.Attribute))
                    and isinstance(getattr(sub, "ctx", None), ast.Load)):
                continue
            if isinstance(sub, ast.Name) and sub.id in code.defs:
                if sub.id != current:            # the notebook's own function or variable
                    todo.append(sub.id)
                continue
            path = dotted(sub, code.aliases)
            if path is not None and _is_forbidden(path, forbidden, code.star_imports):
                found.add(path)
    return sorted(found)


def tampering(code: Code) -> list[str]:
    """Lines of code that reach into the grader (see the module docstring)."""
    found = []
    for k, tree in code.trees:
        for node in ast.walk(tree):
            what = None
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete))
                           else [node.target])
                for t in targets:
                    base = t.value if isinstance(t, (ast.Attribute, ast.Subscript)) else None
                    path = dotted(base, code.aliases) if base is not None else None
                    if path and (path.split(".")[0] in LIBRARIES or path.startswith(
                            ("sys.modules", "builtins", "__builtins__", "IPython"))):
                        full = dotted(t, code.aliases) if isinstance(t, ast.Attribute) else f"{path}[...]"
                        what = f"assigns to {full}"
            elif isinstance(node, ast.Call):
                path = dotted(node.func, code.aliases) or ""
                if path in ("setattr", "delattr") and node.args:
                    target = dotted(node.args[0], code.aliases) or ""
                    if target.split(".")[0] in LIBRARIES + ("sys", "builtins", "__builtins__"):
                        what = f"{path}({target}, ...)"
                elif path.startswith(("signal.", "importlib.reload", "sys.settrace", "sys.setprofile")):
                    what = f"calls {path}"
            elif isinstance(node, (ast.Name, ast.Attribute)):
                path = dotted(node, code.aliases) or ""
                if path.startswith(("sys.modules", "builtins.", "__builtins__")) or \
                        path.endswith((".CheckResult", ".user_ns")) or path in ("CheckResult",):
                    what = f"uses {path}"
            if what:
                line = getattr(node, "lineno", "?")
                item = f"cell {k}, line {line}: {what}"
                if item not in found:
                    found.append(item)
    return found


def forged_reports(code: Code) -> list[str]:
    """Cells that write a checker's report by hand (a string with its text): never counted,
    since the grader reads no output of the notebook; listed in the feedback."""
    found = []
    for k, tree in code.trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    any(t in node.value for t in REPORT_TEXTS):
                found.append(f"cell {k}, line {node.lineno}: {node.value.strip()[:60]!r}")
    return found


def student_id_from_cells(code: Code) -> str | None:
    """``STUDENT_ID = "..."`` (a non-empty string constant) in a code cell, the last one."""
    found = None
    for _, tree in code.trees:
        for node in _top_level(tree.body):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "STUDENT_ID"
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                    and node.value.value.strip()):
                found = node.value.value.strip()
    return found
