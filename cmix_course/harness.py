"""The grader's side of the tests: the instructor's checkers run in the grader's own process,
on inputs the grader makes; only the student's function runs in the submission's kernel.

Each checker (``check_rollout`` and the others) is called with a *proxy* in place of the
student's function. When the checker calls it with its inputs (the tiny random model, the
random maps of the test's seed), the proxy sends those arguments to the kernel
(:meth:`cmix_course.sandbox.Kernel.call`), the student's function runs there, and the plain
numbers that come back (:func:`to_value`) are what the proxy returns to the checker. The
checker then compares them with its reference, with this process's own numpy and its own
diagnoses, so nothing the notebook patched, rebound or wrote in its kernel (``numpy.allclose``,
the ``cmix_course`` module, ``json.dump``, the results files) can change a verdict; the seeds
never leave this process.

Every record: ``exercise``, ``found`` (the name is bound in the kernel), ``origin`` (where the
object was defined when it is not the notebook's own code), ``library_calls`` (the forbidden
library functions or ``reference_*`` functions seen running during the calls) and ``tests``:
one ``{"seed", "visibility", "status", "messages", "cases", "seconds"}`` per test, ``status``
being ``passed``, ``failed``, ``not attempted`` or ``timed out``, ``cases`` the checker's test
cases by label (True: matched the reference; :mod:`cmix_course.rubric` gives points per case).
"""
from __future__ import annotations

import contextlib
import io
import re
import time

import numpy as np

from .sandbox import CallFailed, Kernel


class _Opaque:
    """Stands for a result the kernel could not turn into numbers (its type's name only)."""


def _student_exception(name: str, message: str) -> Exception:
    name = name if re.fullmatch(r"[A-Za-z_]\w{0,60}", name or "") else "Exception"
    if name == "NotImplementedError":
        return NotImplementedError(message)
    return type(name, (Exception,), {"__module__": "builtins"})(message)


def to_value(result: dict):
    """The student's result as the checker would have seen it after ``_to_numpy``: a float
    array, a dict of floats, None, or an object that is not numbers; an exception the
    function raised is raised again (with the student's exception's name and message)."""
    kind = result.get("kind")
    if kind == "none":
        return None
    if kind == "array":
        shape = tuple(int(s) for s in result.get("shape", []))
        values = np.asarray(result.get("values", []), dtype=float)
        if values.size != int(np.prod(shape)):
            return _Opaque()
        return values.reshape(shape)
    if kind == "mapping":
        return {str(k): float(v) for k, v in dict(result.get("values", {})).items()}
    if kind == "raised":
        raise _student_exception(str(result.get("type")), str(result.get("message", "")))
    opaque = type(str(result.get("type", "object"))[:60] or "object", (_Opaque,), {})
    return opaque()


class Proxy:
    """The student's function as a checker sees it: each call runs in the kernel."""

    def __init__(self, kernel: Kernel, name: str, forbidden: tuple[str, ...], limit: float):
        self.kernel, self.name, self.forbidden, self.limit = kernel, name, forbidden, limit
        self.library_calls: list[str] = []

    def __call__(self, *args):
        rec = self.kernel.call(self.name, args, self.forbidden, self.limit)
        calls = rec.get("library_calls")
        for c in calls if isinstance(calls, list) else []:
            if isinstance(c, str) and c not in self.library_calls:
                self.library_calls.append(c[:200])
        if "result" not in rec:
            raise CallFailed("lost", f"`{self.name}` was no longer a function when it was called.")
        return to_value(rec["result"])


def run(spec: dict, kernel: Kernel) -> dict[str, dict]:
    """Run every test of ``spec`` (see :func:`cmix_course.grading.grading_spec`); the records
    by exercise id (see the module docstring)."""
    import cmix_course

    limit = float(spec.get("check_timeout", 60))
    records: dict[str, dict] = {}
    for ex in spec["exercises"]:
        name = ex["answer"]
        rec = {"exercise": ex["id"], "found": False, "origin": None, "tests": [],
               "library_calls": []}
        records[ex["id"]] = rec
        try:
            probe = kernel.call(name, None, (), limit)
        except CallFailed as exc:
            rec["lost"] = exc.detail
            continue
        rec["found"] = bool(probe.get("found"))
        if not rec["found"]:
            continue
        if not probe.get("callable"):
            rec["origin"] = f"not a function: a {probe.get('type', 'object')}"
            continue
        rec["origin"] = probe.get("origin") if isinstance(probe.get("origin"), str) else None
        checker = getattr(cmix_course, ex["checker"])
        proxy = Proxy(kernel, name, tuple(ex.get("forbidden", ())), limit)
        for seed, visibility in ex["tests"]:
            start = time.monotonic()
            sink = io.StringIO()
            try:
                with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                    result = checker(proxy, seed=int(seed), verbose=False)
                test = {"status": result.status, "messages": list(result.messages),
                        "cases": {str(k): bool(v) for k, v in result.cases.items()}}
            except CallFailed as exc:
                test = {"status": "timed out" if exc.reason == "timed out" else "failed",
                        "messages": [f"✗ {exc.detail}"]}
            except Exception as exc:  # noqa: BLE001 - the checker itself failed
                test = {"status": "failed",
                        "messages": [f"✗ the test could not run: {type(exc).__name__}: {exc}"]}
            test.update(seed=int(seed), visibility=visibility,
                        seconds=round(time.monotonic() - start, 2))
            rec["tests"].append(test)
            if test["status"] in ("not attempted", "timed out"):
                break                     # the other seeds would say the same
        rec["library_calls"] = proxy.library_calls
    return records
