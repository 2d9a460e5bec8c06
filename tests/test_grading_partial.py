"""Partial credit per test case, as the grading notes define it (:mod:`cmix_course.rubric`):
unit tests of the rubric on the real checkers (no kernel), the exports, and submissions built
from the committed student editions of chapters 3 and 12 that are right on some cases and
wrong on others."""
from __future__ import annotations

import json
import math

import nbformat
import numpy as np
import pandas as pd
import pytest

import cmix_course
from cmix_course import rubric
from cmix_course.editions import exercises
from cmix_course.gradebook import HAND_GRADES, write_gradebook
from cmix_course.grading import FAILED, ExerciseGrade, SubmissionGrade, _grade_computational
from cmix_course.scan import parse_cells
from tests.test_grading_submissions import NOTEBOOKS, ROOT, chapter, submission

SEEDS = (0, 7, 1234)


def _exercise(ex_id: str):
    ch = int(ex_id.split(".")[0])
    nb = nbformat.read(NOTEBOOKS / chapter(ch), as_version=4)
    return next(e for e in exercises(nb, ch) if e.id == ex_id)


def _records(checker, fn, seeds=SEEDS) -> dict:
    """What the harness records for ``fn`` (checker run in this process, no kernel)."""
    tests = []
    for k, seed in enumerate(seeds):
        res = getattr(cmix_course, checker)(fn, seed=seed, verbose=False)
        tests.append({"seed": seed, "visibility": "visible" if k == 0 else "hidden",
                      "status": res.status, "messages": res.messages, "cases": dict(res.cases)})
    return {"found": True, "tests": tests}


def _grade(ex_id: str, fn):
    ex = _exercise(ex_id)
    return _grade_computational(ex, parse_cells(nbformat.v4.new_notebook()),
                                _records(ex.checker, fn), [])


def _rollout(maps, add_identity, identity=True, transpose=False, order=False):
    m = np.asarray(maps, dtype=float)
    if add_identity and identity:
        m = m + np.eye(m.shape[-1])
        m = m / m.sum(-1, keepdims=True)
    out, prev = [], None
    for layer in m:
        prev = layer if prev is None else (prev @ layer if order else layer @ prev)
        out.append(prev.T if transpose else prev)
    return np.array(out)


def test_every_rubric_matches_its_exercises_points():
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for ex in exercises(nb):
            assert rubric.problems(ex.rubric, ex.points) == [], (ex.id, ex.rubric)
            if ex.kind == "computational" and ex.id != "12.2":   # 12.2's notes give none
                assert ex.rubric, ex.id
    assert rubric.problems((("case", "a", 1.0), ("case", "b", 1.0)), 3)
    assert rubric.problems((("cause", "x", 3.0),), 3)          # a cause never full marks


def test_rollout_without_the_identity_gets_the_cases_points():
    g = _grade("3.1", lambda m, a: _rollout(m, a, identity=False))
    assert g.status == FAILED and g.points == 3.0
    assert [(p.name, p.points, p.max_points) for p in g.parts] == [
        ("test case 'add_identity=False'", 3.0, 3.0), ("test case 'add_identity=True'", 0.0, 1.0)]
    assert any("likely cause: the identity was not added" in f for f in g.feedback)
    assert any("partial credit" in f and "3 of 4" in f for f in g.feedback)


def test_a_transposed_or_reversed_rollout_gets_the_causes_points():
    for kw in (dict(transpose=True), dict(order=True)):
        g = _grade("3.1", lambda m, a: _rollout(m, a, **kw))
        assert g.status == FAILED and g.points == 2.0, (kw, g.feedback)
        assert len(g.parts) == 1 and "likely cause" in g.parts[0].name
    assert _grade("3.1", lambda m, a: _rollout(m, a)).points == 4.0     # the right answer
    assert _grade("3.1", lambda m, a: np.zeros_like(m)).points == 0.0   # nothing right


def test_spearman_cases_as_the_notes_say():
    from scipy.stats import pearsonr, rankdata

    def rho(s_m, s_bo, t, ranks="average", nan=True):
        keep = [j for j in range(len(s_m)) if j not in (0, len(s_m) - 1, t)]
        a, b = np.asarray(s_m)[keep], np.asarray(s_bo)[keep]
        if np.ptp(a) == 0 or np.ptp(b) == 0:
            return float("nan") if nan else 0.0
        return float(pearsonr(rankdata(a, method=ranks), rankdata(b, method=ranks))[0])

    assert _grade("11.1", rho).points == 4.0
    assert _grade("11.1", lambda *a: rho(*a, nan=False)).points == 3.0      # only NaN fails
    assert _grade("11.1", lambda *a: rho(*a, ranks="ordinal")).points == 2.0  # only ties fail


def test_the_exports_show_the_parts_and_a_hand_grade_overrides(tmp_path):
    g = SubmissionGrade("s1", "s1_03_attention_rollout_flow.ipynb", "03_attention_rollout_flow.ipynb")
    g.exercises = [_grade("3.1", lambda m, a: _rollout(m, a, identity=False)),
                   ExerciseGrade("3.2", "interpretive", "why", 5, "answered (grade by hand)", None)]
    write_gradebook([g], tmp_path)
    row = pd.read_csv(tmp_path / "grades.csv", keep_default_na=False).iloc[0]
    assert row["3.1"] == 3.0 and row["total"] == 3.0
    assert row["3.1 parts"] == ("test case 'add_identity=False': 3 / 3; "
                                "test case 'add_identity=True': 0 / 1")
    lms = pd.read_csv(tmp_path / "lms.csv")
    assert lms.iloc[0, 1] == 3.0
    gs = json.loads((tmp_path / "gradescope" / "s1" / "results.json").read_text())
    parts = [t for t in gs["tests"] if t["name"].startswith("Exercise 3.1")]
    assert [(t["score"], t["max_score"]) for t in parts] == [(3.0, 3.0), (0.0, 1.0)]
    assert gs["score"] == 3.0
    fb = (tmp_path / "feedback" / "s1.md").read_text()
    assert "3 / 4" in fb and "test case 'add_identity=True': 0 / 1" in fb
    hand = pd.read_csv(tmp_path / HAND_GRADES, dtype=str, keep_default_na=False)
    r = hand[hand.exercise == "3.1"].iloc[0]
    assert r.auto_points == "3" and "rubric:" in r.reason and r.points == ""
    # the instructor overrides the automatic points; a regrade keeps it
    hand.loc[hand.exercise == "3.1", "points"] = "3.5"
    hand.to_csv(tmp_path / HAND_GRADES, index=False)
    g.exercises[0] = _grade("3.1", lambda m, a: _rollout(m, a, identity=False))
    write_gradebook([g], tmp_path)
    row = pd.read_csv(tmp_path / "grades.csv", keep_default_na=False).iloc[0]
    assert row["3.1"] == 3.5 and row["3.1 status"] == "graded by hand"


NO_IDENTITY = '''def my_rollout(maps, add_identity):
    out, prev = [], None
    for m in np.asarray(maps, dtype=float):      # the identity is never added
        prev = m if prev is None else m @ prev
        out.append(prev)
    return np.array(out)'''

TRANSPOSED = '''def my_rollout(maps, add_identity):
    out, prev = [], None
    for m in np.asarray(maps, dtype=float):
        if add_identity:
            m = m + np.eye(m.shape[-1])
            m = m / m.sum(-1, keepdims=True)
        prev = m if prev is None else m @ prev
        out.append(prev.T)                       # rows and columns swapped
    return np.array(out)'''

AVERAGE_RANKS = '''def my_special_rank(scores, tokens):
    from scipy.stats import rankdata
    r = rankdata(scores) / len(scores)           # average ranks, not dense ones
    keep = [r[j] for j, t in enumerate(tokens) if t in ("[CLS]", "[SEP]", ",", ".")]
    return float(np.mean(keep))'''


@pytest.mark.slow
def test_partial_answers_on_the_real_student_editions(tmp_path):
    from cmix_course.gradebook import grade_class

    paths = [submission(3, {"my_rollout": NO_IDENTITY}, tmp_path / f"noid_{chapter(3)}"),
             submission(3, {"my_rollout": TRANSPOSED}, tmp_path / f"transp_{chapter(3)}"),
             submission(12, {"my_special_rank": AVERAGE_RANKS},
                        tmp_path / f"avg_{chapter(12)}")]
    grades = grade_class(paths, root=ROOT, quick=True, batch_seed=38, random_tests=2,
                         answers_only=True, check_timeout=120)
    got = {(g.student, e.exercise): (e.status, e.points) for g in grades for e in g.exercises
           if e.kind == "computational"}
    assert got[("noid", "3.1")] == (FAILED, 3.0), grades[0].exercises[0].feedback
    assert got[("transp", "3.1")] == (FAILED, 2.0), grades[1].exercises[0].feedback
    assert got[("avg", "12.1")] == (FAILED, 2.0), grades[2].exercises[0].feedback
    assert got[("avg", "12.2")][1] == 0.0                       # not attempted
    write_gradebook(grades, tmp_path / "out")
    table = pd.read_csv(tmp_path / "out" / "grades.csv", keep_default_na=False)
    assert "test case 'add_identity=False': 3 / 3" in table.loc[0, "3.1 parts"]
    assert not math.isnan(table.loc[0, "total"])
