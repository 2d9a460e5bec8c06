"""Partial credit per test case, as the grading notes define it: an exercise's rubric.

The grading notes' metadata (``cmix.rubric`` of the grading cell, read by
:func:`cmix_course.editions.exercises`) may hold::

    "rubric": {"cases":  {"<part of a case label>": points, ...},
               "causes": {"<part of a likely cause>": points, ...}}

``cases``: a checker's test cases are labelled (``check_rollout``'s "random maps,
add_identity=False", ...; :attr:`cmix_course.CheckResult.cases`). An entry earns its
points when, in **every** test the grader ran (the visible seed, the hidden ones, the batch's
random ones), at least one case whose label contains the key was run and every such case
matched the reference. The entries' points add up to the exercise's points.

``causes``: the notes' "a correct X with Y wrong earns N": a failed answer whose checker
names a likely cause (or a failed check, a ``✗`` line) containing the key earns N points,
when every failed test names such a cause (the smallest N over the failed tests counts).

A failed exercise gets the larger of the two totals (never more than its points). The
grader's own checkers produce the labels and causes, in the grader's process, so nothing
a submission prints can earn points.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Part:
    """One line of a rubric's result: ``points`` of ``max_points`` for ``name``."""

    name: str
    points: float
    max_points: float

    def line(self) -> str:
        return f"{self.name}: {self.points:g} / {self.max_points:g}"


def parse(meta: dict | None) -> tuple:
    """The grading notes' ``rubric`` metadata as a hashable tuple of
    ``(kind, key, points)``, kind ``"case"`` or ``"cause"``."""
    meta = meta or {}
    out = [("case", str(k), float(v)) for k, v in (meta.get("cases") or {}).items()]
    out += [("cause", str(k), float(v)) for k, v in (meta.get("causes") or {}).items()]
    return tuple(out)


def problems(rubric: tuple, points: int) -> list[str]:
    """What is wrong with a rubric for an exercise of ``points`` points (empty when right)."""
    out = []
    cases = [p for kind, _, p in rubric if kind == "case"]
    if cases and abs(sum(cases) - points) > 1e-9:
        out.append(f"the rubric's cases give {sum(cases):g} points, the exercise {points}")
    for kind, key, p in rubric:
        if not 0 <= p <= points or (kind == "cause" and p >= points):
            out.append(f"rubric {kind} {key!r}: {p:g} points is not between 0 and "
                       f"{points}{' (exclusive)' if kind == 'cause' else ''}")
    return out


def _case_parts(rubric: tuple, tests: list[dict]) -> list[Part]:
    parts = []
    for kind, key, pts in rubric:
        if kind != "case":
            continue
        ok = bool(tests)
        for t in tests:
            mine = [v for label, v in (t.get("cases") or {}).items() if key in label]
            ok = ok and bool(mine) and all(mine)
        parts.append(Part(f"test case '{key}'", pts if ok else 0.0, pts))
    return parts


def _cause_part(rubric: tuple, tests: list[dict], max_points: int) -> Part | None:
    causes = [(key, pts) for kind, key, pts in rubric if kind == "cause"]
    failed = [t for t in tests if t.get("status") != "passed"]
    if not causes or not failed:
        return None
    best: tuple[str, float] | None = None
    for t in failed:
        named = [m for m in t.get("messages", [])
                 if "likely cause" in m or m.lstrip().startswith("✗")]
        hits = [(key, pts) for key, pts in causes if any(key in m for m in named)]
        if not hits:
            return None
        top = max(hits, key=lambda h: h[1])
        if best is None or top[1] < best[1]:
            best = top
    return Part(f"partial credit for the likely cause '{best[0]}'", best[1], max_points)


def partial_credit(rubric: tuple, tests: list[dict], max_points: int) -> tuple[float, list[Part]]:
    """Points of a failed computational exercise under ``rubric`` and the parts that give
    them (see the module docstring): ``(0.0, [])`` without a rubric."""
    if not rubric:
        return 0.0, []
    parts = _case_parts(rubric, tests)
    by_cases = sum(p.points for p in parts)
    cause = _cause_part(rubric, tests, max_points)
    if cause is not None and cause.points > by_cases:
        parts = [cause]
    return float(min(sum(p.points for p in parts), max_points)), parts
