"""The student's side of grading: a kernel in its own process, folder and environment.

A submission runs in a fresh ``python3`` kernel (its own process, started by
``jupyter_client`` through ``nbclient``) whose

* **folder** is a new temporary directory outside the repository (``cmix-sandbox-*`` under
  the system's temporary folder): ``work/`` (the kernel's working directory), ``home/`` (its
  ``HOME``, so no profile or startup file of the instructor's account runs), ``site/`` (fresh
  *copies* of the :mod:`cmixlib` and :mod:`cmix_course` packages and of the book's ``data/``
  folder, first on ``PYTHONPATH``, so that ``cmixlib.__file__`` names the copy, never the
  repository, and a student who writes into them changes nobody else's run) and ``io/`` (the
  inputs of each call, written by the grader);
* **environment** is built from nothing: ``PATH`` (the Python environment's ``bin`` and the
  system's), ``HOME``, ``TMPDIR``, ``PYTHONPATH`` (the copies only), ``HF_HUB_OFFLINE=1``,
  ``MPLBACKEND=Agg``, ``CMIX_QUICK`` in quick mode and the thread counts; nothing else of the
  grader's environment (no path of the repository, no ``CMIX_CACHE``: a shared cache could
  carry one student's objects into another's kernel).

The notebook is sent to the kernel cell by cell; no file of the grader (the instructor's copy,
the tests' seeds, this package's own files) is written into the folder. Afterwards
:meth:`Kernel.call` calls an answer function: the grader writes the arguments of that one
call into ``io/`` (its own objects: tensors, modules, arrays), a one-line cell asks the
kernel's driver (:data:`DRIVER`) to call the function, and the driver writes back **plain
data only** (JSON: a float array as shape and values, a dict of floats, ``None``, the name
and message of an exception, or the name of a type it could not convert). The grader never
unpickles anything the kernel wrote; what it reads is checked by :mod:`.harness` against its
own reference, in its own process.

Where Linux allows it (:func:`cmix_course.isolation.namespace_wrapper`), the kernel starts under ``unshare`` in its
own user, mount and PID namespaces: the repositories holding the grader's packages are hidden
(an empty read-only folder over each entry, the Python environment kept) and every process
the notebook starts dies with the kernel. Otherwise (*local mode*) nothing is hidden. In both,
the kernel runs as the grader's user: it can read the files that user can read outside the
hidden folders, use the network, and use the CPU and memory until the time limits stop it
(``book/instructors.md`` says what that means for a course).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .isolation import namespace_wrapper

#: The largest result file the grader reads back from a call (bytes).
MAX_RESULT_BYTES = 64 * 2 ** 20
#: Variables passed on to the kernel when the grader has them set.
PASS_ON = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CMIX_DEVICE",
           "CMIX_MODEL", "LANG", "LC_ALL")
HARNESS_TAG = "cmix-harness"
SKIP_TAG = "cmix-skip"

#: The driver, defined in the kernel after the notebook's cells; ``call`` writes plain data.
DRIVER = r'''
def _cmix_make_driver(io_dir, lib_dirs):
    import json, os, sys, threading
    import numpy as np
    import torch                  # loaded now, not in the first call's time limit

    ns = get_ipython().user_ns

    def plain(out):
        if out is None:
            return {"kind": "none"}
        if isinstance(out, dict):
            try:
                return {"kind": "mapping", "values": {str(k): float(v) for k, v in out.items()}}
            except Exception:
                return {"kind": "unconvertible", "type": type(out).__name__}
        try:
            if isinstance(out, torch.Tensor):
                out = out.detach().cpu().double().numpy()
            arr = np.asarray(out, dtype=float)
        except Exception:
            return {"kind": "unconvertible", "type": type(out).__name__}
        return {"kind": "array", "shape": list(arr.shape),
                "values": [float(x) for x in arr.ravel().tolist()]}

    def origin(fn):
        module = getattr(fn, "__module__", None)
        if module in (None, "__main__"):
            return None
        return f"{module}.{getattr(fn, '__qualname__', getattr(fn, '__name__', '?'))}"

    def call(name, k, forbidden):
        path = os.path.join(io_dir, f"out-{k}.json")
        rec = {"found": name in ns}
        fn = ns.get(name)
        if fn is None or not callable(fn):
            rec["callable"] = False
            rec["type"] = type(fn).__name__
        else:
            rec["callable"] = True
            rec["origin"] = origin(fn)
        if k >= 0 and rec.get("callable"):
            args = torch.load(os.path.join(io_dir, f"args-{k}.pt"), weights_only=False)
            seen = []

            def hook(frame, event, arg):
                if event == "call":
                    co = frame.f_code
                    if co.co_filename.startswith(lib_dirs) and (
                            co.co_name in forbidden or co.co_name.startswith("reference_")):
                        where = co.co_filename.split("site/", 1)[-1]
                        item = f"{where}:{co.co_name}"
                        if item not in seen:
                            seen.append(item)

            old = sys.getprofile()
            sys.setprofile(hook)
            threading.setprofile(hook)         # threads the answer starts are watched too
            try:
                out = fn(*args)
                sys.setprofile(old)
                rec["result"] = plain(out)
            except NotImplementedError as exc:
                sys.setprofile(old)
                rec["result"] = {"kind": "raised", "type": "NotImplementedError",
                                 "message": str(exc)[:500]}
            except Exception as exc:
                sys.setprofile(old)
                rec["result"] = {"kind": "raised", "type": type(exc).__name__,
                                 "message": str(exc)[:500]}
            threading.setprofile(None)
            rec["library_calls"] = seen
        with open(path + ".part", "w") as f:
            json.dump(rec, f)
        os.replace(path + ".part", path)

    return call
'''


@dataclass
class Sandbox:
    """The folders of one submission's kernel and its environment."""

    root: Path
    work: Path
    site: Path
    io: Path
    env: dict = field(default_factory=dict)

    @property
    def lib_dirs(self) -> tuple[str, ...]:
        """The folders of the packages' copies (where a library call is recognised)."""
        return (str(self.site / "cmixlib") + os.sep, str(self.site / "cmix_course") + os.sep)


def _copy_package(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def make_sandbox(root: str | Path, quick: bool = False, cache: str | None = None) -> Sandbox:
    """Fill the empty folder ``root`` (see the module docstring) and build the environment.
    ``cache``: a result cache folder to pass on as ``CMIX_CACHE`` (for trusted notebooks
    only, e.g. the book's own tests: a student's kernel could write into it)."""
    import cmixlib

    import cmix_course

    root = Path(root)
    box = Sandbox(root, root / "work", root / "site", root / "io")
    for p in (box.work, box.site, box.io, root / "home", root / "tmp"):
        p.mkdir(parents=True, exist_ok=True)
    lib = Path(cmixlib.__file__).resolve().parent
    _copy_package(lib, box.site / "cmixlib")
    _copy_package(Path(cmix_course.__file__).resolve().parent, box.site / "cmix_course")
    data = lib.parent / "data"                  # cmixlib.data.loaders reads <package>/../data
    if data.is_dir():
        _copy_package(data, box.site / "data")
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin",
                                    "/usr/bin", "/bin"]),
           "HOME": str(root / "home"), "TMPDIR": str(root / "tmp"),
           "IPYTHONDIR": str(root / "home" / ".ipython"),
           "MPLCONFIGDIR": str(root / "home" / ".matplotlib"),
           "PYTHONPATH": str(box.site), "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MPLBACKEND": "Agg",
           "TOKENIZERS_PARALLELISM": "false"}
    env.update({k: os.environ[k] for k in PASS_ON if k in os.environ})
    if quick:
        env["CMIX_QUICK"] = "1"
    if cache:
        env["CMIX_CACHE"] = str(cache)
    box.env = env
    return box


class CallFailed(BaseException):
    """The kernel gave no answer to a call: ``reason`` is ``timed out`` or ``lost``
    (a BaseException, so that the checkers' ``except Exception`` does not swallow it)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class Kernel:
    """A running kernel for one submission: :meth:`run_notebook`, then :meth:`call`.

    ``wrapper``: the command the kernel is started under (default
    :func:`cmix_course.isolation.namespace_wrapper`; ``[]`` for local mode)."""

    def __init__(self, nb, box: Sandbox, *, timeout: float, cell_timeout: float,
                 wrapper: list[str] | None = None):
        from nbclient import NotebookClient

        self.nb, self.box, self.calls = nb, box, 0
        self.deadline = time.monotonic() + timeout
        self.cell_timeout, self.timeout = cell_timeout, timeout
        self.call_limit = 60.0
        self.client = NotebookClient(
            nb, timeout=int(cell_timeout), timeout_func=self._limit, kernel_name="python3",
            allow_errors=True, interrupt_on_timeout=True, record_timing=False,
            error_on_timeout={"ename": "TimeoutError", "evalue": "the cell ran past its time "
                              "limit", "traceback": []},
            resources={"metadata": {"path": str(box.work)}}, skip_cells_with_tag=SKIP_TAG,
            on_cell_executed=self._executed)
        self._timed_out = False
        self.nonce = os.urandom(6).hex()
        self.wrapper = namespace_wrapper() if wrapper is None else (wrapper or None)
        if self.wrapper:
            from jupyter_client.manager import AsyncKernelManager

            prefix = list(self.wrapper)

            class _Wrapped(AsyncKernelManager):
                def format_kernel_cmd(self, extra_arguments=None):
                    return [*prefix, *super().format_kernel_cmd(extra_arguments)]

            self.client.kernel_manager_class = _Wrapped

    @property
    def mode(self) -> str:
        """``namespace`` (repositories hidden, processes contained) or ``local``."""
        return "namespace" if self.wrapper else "local"

    def _executed(self, cell, cell_index, execute_reply) -> None:
        content = (execute_reply or {}).get("content", {})
        self._timed_out = content.get("status") == "error" and content.get("ename") == "TimeoutError"

    def _limit(self, cell) -> int:
        if HARNESS_TAG in cell.metadata.get("tags", []):
            return max(1, int(self.call_limit))
        return max(1, int(min(self.cell_timeout, self.deadline - time.monotonic())))

    def start(self):
        """The context manager that starts the kernel (with the sandbox's environment and
        folder) and shuts it down."""
        return self.client.setup_kernel(env=dict(self.box.env), cwd=str(self.box.work))

    def run_notebook(self, only: dict[int, str | None] | None = None,
                     ) -> tuple[list[int], list[int]]:
        """Run the code cells in order (``only``: just those cells, each whole (None) or
        only the given code, see :func:`cmix_course.scan.needed_code`); return the cells
        stopped at their time limit and those skipped because the notebook's time ran out."""
        timed_out, skipped = [], []
        for k, cell in enumerate(self.nb.cells):
            if cell.cell_type != "code" or (only is not None and k not in only):
                continue
            if only is not None and only[k] is not None:
                cell.source = only[k]
            if time.monotonic() >= self.deadline:
                skipped.append(k)
                continue
            self._timed_out = False
            self.client.execute_cell(cell, k)
            if self._timed_out:
                timed_out.append(k)
        self._run(DRIVER + f"\n_cmix_call_{self.nonce} = _cmix_make_driver("
                  f"{str(self.box.io)!r}, {self.box.lib_dirs!r})\ndel _cmix_make_driver\n", 60)
        return timed_out, skipped

    def _run(self, source: str, limit: float):
        import nbformat

        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["tags"] = [HARNESS_TAG]
        self.call_limit = limit
        self._timed_out = False
        self.nb.cells.append(cell)           # nbclient writes the executed cell back by index
        try:
            self.client.execute_cell(cell, len(self.nb.cells) - 1, store_history=False)
        finally:
            self.nb.cells.pop()
        return cell

    def call(self, name: str, args: tuple, forbidden: tuple[str, ...] = (),
             limit: float = 60.0) -> dict:
        """Call the kernel's function ``name`` on ``args`` (``args`` None: only say whether it
        exists); return the driver's plain record. Raises :class:`CallFailed` when no answer
        came back in ``limit`` seconds."""
        k = self.calls if args is not None else -1
        self.calls += 1
        out = self.box.io / f"out-{k}.json"
        out.unlink(missing_ok=True)
        if args is not None:
            save_args(tuple(args), self.box.io / f"args-{k}.pt")
        start = time.monotonic()
        cell = self._run(f"_cmix_call_{self.nonce}({name!r}, {k}, {tuple(forbidden)!r})", limit)
        elapsed = time.monotonic() - start
        if args is not None:
            (self.box.io / f"args-{k}.pt").unlink(missing_ok=True)
        if not out.is_file():
            stopped = any(o.get("ename") in ("TimeoutError", "KeyboardInterrupt")
                          for o in cell.get("outputs", []))
            if elapsed >= limit - 0.5 or self._timed_out or stopped:
                raise CallFailed("timed out", f"the function did not return within {limit:g} s "
                                 f"(an endless loop, or far too slow).")
            raise CallFailed("lost", "the function's result never came back (the notebook "
                             "changed the grader's driver, or its kernel died).")
        if out.stat().st_size > MAX_RESULT_BYTES:
            raise CallFailed("lost", "the function's result is far too large.")
        try:
            rec = json.loads(out.read_text(encoding="utf-8"))
        except ValueError:
            raise CallFailed("lost", "the function's result could not be read back.") from None
        return rec if isinstance(rec, dict) else {}


def _without_hooks(arg):
    """A module's copy without hooks (transformers records outputs with local functions as
    hooks, which cannot be pickled); anything else unchanged."""
    import copy

    import torch

    if not isinstance(arg, torch.nn.Module):
        return arg
    arg = copy.deepcopy(arg)
    for m in arg.modules():
        for name, value in vars(m).items():
            if name.endswith("hooks") and hasattr(value, "clear"):
                value.clear()
    return arg


def save_args(args: tuple, path: Path) -> None:
    """Write one call's arguments (the grader's own objects) for the kernel to load."""
    import torch

    try:
        torch.save(args, path)
    except (AttributeError, TypeError, RuntimeError):   # an unpicklable hook on a module
        torch.save(tuple(_without_hooks(a) for a in args), path)


def new_root() -> Path:
    """A new, private temporary folder for one submission (outside the repository)."""
    return Path(tempfile.mkdtemp(prefix="cmix-sandbox-"))
