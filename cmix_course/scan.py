"""What a submission's code does, read without running it (Python's ``ast``).

The verdicts come from the grader's own process (:mod:`.harness`), so nothing here decides a
grade by itself: these checks find answers that pass the tests without, perhaps, being the
student's work, which the grader then leaves to a human (pending, with the reason):

* :func:`answer_uses` - the library or course functions an answer refers to: a
  ``reference_*`` function of :mod:`cmix_course`, or one of the exercise's ``forbidden``
  library functions (e.g. :func:`cmixlib.methods.aggregation.rollout` for the rollout exercise), also
  through helper functions of the notebook that the answer calls, import aliases and module
  attributes; names are resolved with function scope (:func:`local_names`);
* :func:`suspicious` - lines of the student's own cells (the book's cells, recognised by
  :func:`book_cells`, are not read) that reach code or files by computed names, inspect or
  rewrite the running program, read files or patch a library;
* :func:`forged_reports` - a checker's report written by hand (ignored, listed);
* :func:`needed_code` - what quick grading runs (the setup cell, the student's cells and the
  book's statements they need).

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


def local_names(fn: ast.AST) -> set[str]:
    """The names a function binds itself (parameters, assignments, loop and comprehension
    variables, imports, nested definitions), less those it declares ``global``: inside the
    function these never mean the notebook's variables of the same name."""
    names: set[str] = set()
    declared_global: set[str] = set()
    args = getattr(fn, "args", None)
    if isinstance(args, ast.arguments):
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None:
                names.add(a.arg)
    for node in ast.walk(fn):
        if node is fn:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.Global):
            declared_global |= set(node.names)
    return names - declared_global


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _follows(node: ast.AST) -> bool:
    """Whether a notebook-level definition is code the answer may run: a function or class,
    or a name bound to another name, attribute or lambda (``r = cmixlib.rollout``); a value
    computed at notebook level (``maps = cmixlib.context_mixing(...)``) is data, not code."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return True
    value = getattr(node, "value", None)
    return isinstance(value, (ast.Name, ast.Attribute, ast.Lambda))


def answer_uses(code: Code, name: str, forbidden: tuple[str, ...] = ()) -> list[str]:
    """The forbidden functions (dotted paths, sorted) that the answer ``name`` refers to,
    directly or through the notebook's own functions it calls. Names are resolved with
    function scope: a parameter or local variable of the answer (``maps``, ``m``) is never
    the notebook's variable of that name. Empty when the answer is clean or not defined."""
    seen: set[str] = set()
    found: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen or current not in code.defs:
            continue
        seen.add(current)
        node = code.defs[current]
        local = local_names(node) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                       ast.Lambda)) else set()
        for sub in ast.walk(node):
            if not (isinstance(sub, (ast.Name, ast.Attribute))
                    and isinstance(getattr(sub, "ctx", None), ast.Load)):
                continue
            root = _root_name(sub)
            if root in local:
                continue
            if isinstance(sub, ast.Name) and sub.id in code.defs:
                if sub.id != current and _follows(code.defs[sub.id]):
                    todo.append(sub.id)          # the notebook's own function or alias
                continue
            path = dotted(sub, code.aliases)
            if path is not None and _is_forbidden(path, forbidden, code.star_imports):
                found.add(path)
    return sorted(found)


#: Modules whose use in a student's own cells is reported (grade by hand): they reach code or
#: files by computed names, inspect or rewrite the running program, or run other programs.
SUSPICIOUS_MODULES = ("importlib", "inspect", "ctypes", "gc", "atexit", "signal", "subprocess",
                      "builtins", "__builtins__", "marshal", "pickle", "runpy", "pkgutil",
                      "glob", "shutil", "pathlib", "socket", "urllib", "requests",
                      # other threads and processes run code a profile hook does not watch
                      "threading", "_thread", "concurrent", "multiprocessing", "asyncio",
                      "joblib")
#: Built-in functions reported in the same way.
SUSPICIOUS_CALLS = ("exec", "eval", "compile", "__import__", "open", "vars", "globals",
                    "locals", "setattr", "delattr", "breakpoint")
#: Dotted prefixes reported when used.
SUSPICIOUS_PATHS = ("sys.modules", "sys.setprofile", "sys.settrace", "sys._getframe",
                    "sys.meta_path", "sys.path_hooks", "os.system", "os.popen", "os.exec",
                    "os.spawn", "os.fork", "os.listdir", "os.scandir", "os.walk", "os.open",
                    "os.environ", "os.chdir", "io.open", "threading.settrace",
                    "torch.multiprocessing", "torch.utils.data.DataLoader",
                    "torch.utils.data.dataloader")
#: Attribute names reported wherever they appear (frames, code objects, file reading).
SUSPICIOUS_ATTRS = ("f_back", "f_globals", "f_locals", "__code__", "__globals__",
                    "__subclasses__", "read_text", "read_bytes", "__dict__")
LIB_ROOTS = LIBRARIES + ("numpy", "torch", "scipy", "json", "sys", "os")


def _suspicious_node(node: ast.AST, aliases: dict[str, str]) -> str | None:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        if isinstance(node, ast.ImportFrom):
            mods += [f"{node.module or ''}.{a.name}" for a in node.names]
        for m in mods:
            if m.split(".")[0] in SUSPICIOUS_MODULES or m.startswith(SUSPICIOUS_PATHS):
                return f"imports {m}"
        return None
    if isinstance(node, ast.Call):
        fn = node.func
        if isinstance(fn, ast.Name) and fn.id in SUSPICIOUS_CALLS and fn.id not in aliases:
            return f"calls {fn.id}()"
        if isinstance(fn, ast.Name) and fn.id == "getattr" and len(node.args) >= 2 and \
                not isinstance(node.args[1], ast.Constant):
            return "calls getattr() with a computed name"
        return None
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        for t in targets:
            base = t.value if isinstance(t, (ast.Attribute, ast.Subscript)) else None
            path = dotted(base, aliases) if base is not None else None
            if path and path.split(".")[0] in LIB_ROOTS:
                full = dotted(t, aliases) if isinstance(t, ast.Attribute) else f"{path}[...]"
                return f"assigns to {full}"
        return None
    if isinstance(node, ast.Attribute):
        if node.attr in SUSPICIOUS_ATTRS:
            return f"uses .{node.attr}"
        path = dotted(node, aliases) or ""
        if path.startswith(SUSPICIOUS_PATHS) or path.split(".")[0] in SUSPICIOUS_MODULES:
            return f"uses {path}"
    elif isinstance(node, ast.Name) and aliases.get(node.id, "").split(".")[0] in SUSPICIOUS_MODULES:
        return f"uses {aliases[node.id]}"
    return None


def suspicious(code: Code, skip: set[int] = frozenset()) -> list[str]:
    """``cell k, line l: what`` for each line of the student's own cells (all but ``skip``,
    the cells that are the book's own, unchanged) that reaches code or files by computed
    names, inspects or rewrites the running program, reads files or patches a library.

    None of these can change a verdict (the tests run in the grader's process); an answer
    that passes in such a notebook is left to be graded by hand, with these lines as the
    reason, since it might not compute the answer itself."""
    found: list[str] = []
    for k, tree in code.trees:
        if k in skip:
            continue
        for node in ast.walk(tree):
            what = _suspicious_node(node, code.aliases)
            if what:
                item = f"cell {k}, line {getattr(node, 'lineno', '?')}: {what}"
                if item not in found:
                    found.append(item)
    return found


def normalise(source: str) -> str:
    """A cell's code without trailing spaces or blank lines (to recognise the book's cells)."""
    return "\n".join(line.rstrip() for line in source.strip().splitlines() if line.strip())


def book_cells(nb, known: set[str]) -> set[int]:
    """Indices of the code cells of ``nb`` that are the book's own (their normalised code is
    in ``known``, the code cells of the instructor's copy and of the student edition)."""
    return {k for k, c in enumerate(nb.cells) if c.get("cell_type") == "code"
            and normalise(_source(c)) in known}


def _binds(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    return {t.id for t in ast.walk(node) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}


def needed_code(code: Code, nb, book: set[int]) -> dict[int, str | None]:
    """What to run for quick grading (``answers_only``): cell index -> the code to run
    (None: the whole cell). The first code cell (the setup), the exercises' starter cells
    (an unchanged starter still defines the answer: *not attempted*) and every cell of the
    student's own (not in ``book``) run whole; of the book's cells before them, only the top-level
    statements that bind a name those cells read (:func:`free_loads`), transitively, e.g.
    ``import numpy as np`` but not the chapter's experiments."""
    trees = dict(code.trees)
    code_cells = [k for k, c in enumerate(nb.cells) if c.get("cell_type") == "code"]
    plan: dict[int, str | None] = {}
    wanted: set[str] = set()
    for k in reversed(code_cells):
        tree = trees.get(k)
        starter = "exercise" in nb.cells[k].get("metadata", {}).get("tags", [])
        if k == code_cells[0] or k not in book or starter:
            plan[k] = None
            if tree is not None:
                wanted |= free_loads(tree)
            continue
        if tree is None:
            continue
        kept: list[ast.stmt] = []
        for node in reversed(tree.body):
            if _binds(node) & wanted:
                kept.append(node)
                wanted |= free_loads(ast.Module(body=[node], type_ignores=[]))
        if kept:
            plan[k] = "\n".join(ast.unparse(n) for n in reversed(kept))
    return dict(sorted(plan.items()))


def free_loads(tree: ast.AST) -> set[str]:
    """The names a cell reads from the notebook: at its top level, and inside its functions
    less each function's own names (:func:`local_names`)."""
    out: set[str] = set()

    def visit(node: ast.AST, local: set[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                for d in getattr(child, "decorator_list", []):
                    visit(d, local)
                visit(child, local | local_names(child))
            elif isinstance(child, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                targets = {n.id for g in child.generators for n in ast.walk(g.target)
                           if isinstance(n, ast.Name)}
                visit(child, local | targets)       # a comprehension's variables are its own
            elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
                if child.id not in local:
                    out.add(child.id)
            else:
                visit(child, local)

    visit(tree, set())
    return out


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
