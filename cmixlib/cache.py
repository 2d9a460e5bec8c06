"""The on-disk cache shared by data annotation, trained models and experiment results.

Everything cached is keyed by :func:`stable_hash` of what produced it (inputs, settings, code
version), so a stale entry is never reused: a changed input simply gets a new key.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

CACHE_ENV_VAR = "CMIX_CACHE"


def cache_root() -> Path:
    """Cache folder, created on demand: ``$CMIX_CACHE`` if set; else ``.cmix_cache/`` at the
    repository root when cmixlib runs from a writable clone (git-ignored); else ``~/.cache/cmixlib``."""
    env = os.environ.get(CACHE_ENV_VAR, "").strip()
    if env:
        path = Path(env).expanduser()
    else:
        root = Path(__file__).resolve().parents[1]
        if (root / "pyproject.toml").is_file() and os.access(root, os.W_OK):
            path = root / ".cmix_cache"
        else:
            path = Path.home() / ".cache" / "cmixlib"
    path.mkdir(parents=True, exist_ok=True)
    return path


def jsonable(obj: Any) -> Any:
    """A JSON-serialisable, canonical (key- and set-sorted) copy of ``obj``."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, (list, tuple, set)):
        return [jsonable(v) for v in (sorted(obj) if isinstance(obj, set) else obj)]
    if hasattr(obj, "detach") and hasattr(obj, "cpu"):  # torch tensor
        return obj.detach().cpu().tolist()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if isinstance(obj, Path):
        return str(obj)
    return repr(obj)


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file's bytes (committed weights' and datasets' checksums), read in blocks
    (model files of hundreds of megabytes never sit in memory whole)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def verify_files(folder: str | Path, expected: dict[str, str], error: type[Exception],
                 restore: str, rebuild: str) -> list[Path]:
    """The paths of ``folder / name`` for each ``name -> sha256`` of ``expected`` (a manifest's),
    after checking that each exists and has that checksum; otherwise ``error`` naming the file,
    how to ``restore`` it (a path for ``git checkout --``) and the ``rebuild`` command."""
    paths = []
    for name, want in expected.items():
        path = Path(folder) / name
        if not path.exists():
            raise error(f"{path} is missing (see `{rebuild}`).")
        got = file_sha256(path)
        if got != want:
            raise error(f"{path} has sha256 {got[:12]}..., its manifest says {want[:12]}...: the "
                        f"file was altered or is a Git LFS pointer. Restore it with `git checkout "
                        f"-- {restore}` or rebuild it with `{rebuild}`.")
        paths.append(path)
    return paths


def stable_hash(obj: Any, length: int = 16) -> str:
    """SHA-256 (hex, truncated) of a canonical JSON dump of ``obj``."""
    text = json.dumps(jsonable(obj), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:length]


PACKAGE_DIR = Path(__file__).resolve().parent


def source_files(*names: str, exclude: frozenset[str] = frozenset(),
                 missing_ok: bool = False) -> list[Path]:
    """The ``.py`` files of the named parts of cmixlib (a module, ``"arch"`` or ``"arch.py"``, or
    a sub-package such as ``"training"``; none named: the whole package), sorted, leaving out
    files whose path relative to the package is in ``exclude``. A name that is neither is an
    error, or skipped with ``missing_ok``."""
    roots = [] if names else [PACKAGE_DIR]
    for n in names:
        found = [p for p in (PACKAGE_DIR / n, PACKAGE_DIR / f"{n}.py") if p.exists()]
        if found:
            roots.append(found[0])
        elif not missing_ok:
            raise FileNotFoundError(f"cmixlib has no module or package {n!r}")
    files: set[Path] = set()
    for root in roots:
        if root.is_dir():
            files.update(root.rglob("*.py"))
        else:
            files.add(root)
    return sorted(f for f in files
                  if f.relative_to(PACKAGE_DIR).as_posix() not in exclude
                  and "__pycache__" not in f.parts)


def code_text(path: Path) -> str:
    """The code of one source file without what cannot change a result: its syntax tree (so no
    comments, blank lines or formatting) with every docstring removed. Editing documentation
    therefore leaves :func:`source_hash` unchanged; any change to the code changes it."""
    stat = path.stat()
    return _code_text(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=None)
def _code_text(path: Path, mtime_ns: int, size: int) -> str:
    """:func:`code_text` of one file, memoised per modification time and size."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def source_hash(*names: str, exclude: frozenset[str] = frozenset()) -> str:
    """Hash (12 hex) of the code (:func:`code_text`: docstrings and comments left out) and paths
    of :func:`source_files`: a cache version derived from the code a cached result depends on, so
    it never needs bumping by hand."""
    h = hashlib.sha256()
    for f in source_files(*names, exclude=exclude):
        h.update(f.relative_to(PACKAGE_DIR).as_posix().encode() + b"\0" + code_text(f).encode() + b"\0")
    return h.hexdigest()[:12]


def _module_file(dotted: str, package_dir: Path) -> Path | None:
    """The file of module ``dotted`` (``"<package>.a.b"``) inside ``package_dir``, or None."""
    parts = dotted.split(".")
    if parts[0] != package_dir.name:
        return None
    base = package_dir.joinpath(*parts[1:])
    for candidate in (base / "__init__.py", base.with_suffix(".py") if parts[1:] else None):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def _module_name(path: Path, package_dir: Path) -> str:
    rel = path.relative_to(package_dir).with_suffix("").parts
    rel = rel[:-1] if rel and rel[-1] == "__init__" else rel
    return ".".join((package_dir.name, *rel))


def imported_names(tree: ast.AST, module: str = "", is_package: bool = False) -> set[str]:
    """Absolute dotted names of every ``import`` / ``from ... import`` anywhere in ``tree``
    (function bodies included, so lazy imports count). For ``from m import a`` both ``m`` and
    ``m.a`` are returned (``a`` may be a submodule); relative imports are resolved against
    ``module`` (a package's own name when ``is_package``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names if a.name != "*")
    return names


def import_closure(roots: set[str] | list[str], package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """The source files of the package at ``package_dir`` that importing the modules ``roots``
    (dotted names; names outside the package are ignored) can execute: each named module, the
    ``__init__.py`` of every package above it, and, transitively, every module of the package
    that any of these files imports anywhere (:func:`imported_names`). Sorted paths.

    Used by the book build (``tools/cmix_nbdeps.py``) to re-execute exactly the chapters whose
    library code changed; the result cache versions on :func:`source_hash` the same way."""
    seen: set[Path] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for k in range(1, len(parts) + 1):          # importing a.b.c runs a, a.b and a.b.c
            path = _module_file(".".join(parts[:k]), package_dir)
            if path is None or path in seen:
                continue
            seen.add(path)
            todo.extend(_file_imports(path, _module_name(path, package_dir), path.stat().st_mtime_ns))
    return sorted(seen)


def result_closure(roots: set[str] | list[str], package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """The source files of the package at ``package_dir`` whose code the modules ``roots`` can
    run when they compute a result: as :func:`import_closure`, except that the ``__init__.py`` of
    the packages above an imported module are not included (they run, but a result does not use
    them unless it imports from them), and a package ``__init__.py`` made only of imports (a
    re-export file: imports, ``__all__``, ``__version__``, a docstring) counts only as far as it
    is used: ``from ..pkg import f`` leads to the module that defines ``f``; ``from .. import
    pkg`` (the package bound to a name, its attributes unknown) to everything it imports. So an
    experiment's cache version (:func:`cmixlib.experiments.result_cache.code_version`) covers the
    modules it imports, not everything a package re-exports. An ``__init__.py`` with code of its
    own counts as a module. Sorted paths."""
    seen: set[Path] = set()
    done: set[tuple[str, bool]] = set()
    todo = [(r, True) for r in roots]                 # (dotted name, bound to a name?)
    while todo:
        name, bound = todo.pop()
        if (name, bound) in done:
            continue
        done.add((name, bound))
        path = _module_file(name, package_dir)
        if path is None:                                  # pkg.f: f re-exported by pkg's __init__?
            head, _, attr = name.rpartition(".")
            parent = _module_file(head, package_dir) if head else None
            where = _reexports(parent, package_dir, parent.stat().st_mtime_ns) if parent else None
            if where is not None and attr in where:       # its module, or a module named attr
                todo += [(where[attr], False), (f"{where[attr]}.{attr}", True)]
            continue
        mtime = path.stat().st_mtime_ns
        if _reexports(path, package_dir, mtime) is not None:
            if bound:                                     # the whole package is in hand
                todo.extend((n, True) for n in _file_imports(path, _module_name(path, package_dir), mtime))
            continue
        if path not in seen:
            seen.add(path)
            names, bases = _file_bindings(path, _module_name(path, package_dir), mtime)
            todo.extend([(n, True) for n in names] + [(b, False) for b in bases])
    return sorted(seen)


@functools.lru_cache(maxsize=None)
def _file_bindings(path: Path, module: str, mtime_ns: int) -> tuple[frozenset[str], frozenset[str]]:
    """``(bound, bases)`` of one file's imports: the dotted names bound to a name (``import a.b``,
    ``from a import b`` -> ``a.b``) and the modules names are imported from (``a``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    bound, bases = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = imported_names(ast.Module(body=[node], type_ignores=[]), module,
                                   path.name == "__init__.py")
            if isinstance(node, ast.Import):
                bound |= names
            else:
                base = min(names, key=len)
                bases.add(base)
                bound |= names - {base}
    return frozenset(bound), frozenset(bases)


@functools.lru_cache(maxsize=None)
def _reexports(path: Path, package_dir: Path, mtime_ns: int) -> dict[str, str] | None:
    """``{name: module it comes from}`` of a re-export ``__init__.py`` (see :func:`result_closure`),
    or None if the file holds code of its own (or is not an ``__init__.py``)."""
    if path.name != "__init__.py":
        return None
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    module = _module_name(path, package_dir)
    where: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = imported_names(ast.Module(body=[node], type_ignores=[]), module, True)
            root = min(base, key=len)                        # the module imported from
            for a in node.names:
                where[a.asname or a.name] = root
        elif isinstance(node, ast.Import):
            for a in node.names:
                where[a.asname or a.name.split(".")[0]] = a.name.rsplit(".", 1)[0]
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)) and not (
                isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) and t.id.startswith("__")
                                                     for t in node.targets)):
            return None
    return where


@functools.lru_cache(maxsize=None)
def _file_imports(path: Path, module: str, mtime_ns: int) -> frozenset[str]:
    """:func:`imported_names` of one file, memoised per modification time."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return frozenset(imported_names(tree, module, path.name == "__init__.py"))
