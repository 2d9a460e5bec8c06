"""The grader's side inside a submission's kernel: after the student's cells have run, one cell
added by :mod:`.grading` loads this file (by path, under a fresh module name) and calls
:func:`run`. Nothing the notebook printed is read: this finds each answer by its name in the
kernel's namespace (wherever it was defined: a new cell counts), runs the instructor's tests
on it (the checkers with the visible and hidden seeds, ``verbose=False``, the answer's own
output silenced, a time limit per test) and writes the verdicts as JSON to a file named by
the grader, with the nonce it passed (so that the notebook cannot have written it first).

Every record: ``exercise``, ``found`` (the name is bound), ``origin`` (where the object was
defined when it is not the notebook's own code, e.g. ``cmix_course.method_exercises``), and
``tests``: one ``{"seed", "visibility", "status", "messages"}`` per test, ``status`` being
``passed``, ``failed``, ``not attempted`` or ``timed out``.
"""
from __future__ import annotations

import contextlib
import io
import json
import signal
import time


class CheckTimeout(BaseException):
    """Raised in the kernel when one test runs past its time limit (a BaseException, so that
    the checkers' ``except Exception`` does not swallow it)."""


def _alarm(_signum, _frame):
    raise CheckTimeout()


def _origin(obj) -> str | None:
    """Where ``obj`` was defined when it is not the notebook's own code, else None."""
    module = getattr(obj, "__module__", None)
    if module in (None, "__main__"):
        return None
    name = getattr(obj, "__qualname__", getattr(obj, "__name__", type(obj).__name__))
    return f"{module}.{name}"


def _write(path: str, nonce: str, records: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"nonce": nonce, "results": records}, f)


def run(spec: dict, out_path: str, nonce: str, namespace: dict) -> None:
    """Test every exercise of ``spec`` (see :func:`cmix_course.grading.grading_spec`) on the
    objects of ``namespace`` and write the records to ``out_path`` after each exercise."""
    import importlib

    course = importlib.import_module("cmix_course")
    records: list[dict] = []
    limit = float(spec.get("check_timeout", 60))
    old = signal.signal(signal.SIGALRM, _alarm)
    try:
        for ex in spec["exercises"]:
            name = ex["answer"]
            rec = {"exercise": ex["id"], "found": name in namespace, "origin": None, "tests": []}
            records.append(rec)
            if name not in namespace:
                _write(out_path, nonce, records)
                continue
            fn = namespace[name]
            rec["origin"] = _origin(fn)
            if not callable(fn):
                rec["origin"] = f"not a function: a {type(fn).__name__}"
                _write(out_path, nonce, records)
                continue
            checker = getattr(course, ex["checker"])
            for seed, visibility in ex["tests"]:
                start = time.monotonic()
                sink = io.StringIO()
                try:
                    signal.setitimer(signal.ITIMER_REAL, limit)
                    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                        result = checker(fn, seed=int(seed), verbose=False)
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    test = {"status": result.status, "messages": list(result.messages)}
                except CheckTimeout:
                    test = {"status": "timed out",
                            "messages": [f"✗ the test did not finish within {limit:g} s "
                                         f"(an endless loop, or far too slow)."]}
                except Exception as exc:  # noqa: BLE001 - the checker itself failed
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    test = {"status": "failed",
                            "messages": [f"✗ the test could not run: {type(exc).__name__}: {exc}"]}
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                test.update(seed=int(seed), visibility=visibility,
                            seconds=round(time.monotonic() - start, 2))
                rec["tests"].append(test)
                _write(out_path, nonce, records)
                if test["status"] in ("not attempted", "timed out"):
                    break                     # the other seeds would say the same
            _write(out_path, nonce, records)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        _write(out_path, nonce, records)
