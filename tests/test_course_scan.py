"""The parts of grading that run no kernel (fast): reading a submission's code (cmix_course.scan),
the student id, the interpretive answer without tags, zero rows for submissions that cannot be
graded, the command line, and the site that hands out the student edition (cmix_course.site)."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pandas as pd
import pytest

from cmix_course import editions as E
from cmix_course import grading as G
from cmix_course import scan
from cmix_course.site import serve_student_edition, strip_solutions

ROOT = Path(__file__).resolve().parents[1]


def _nb(*sources, kinds=None):
    nb = nbformat.v4.new_notebook()
    kinds = kinds or ["code"] * len(sources)
    nb.cells = [nbformat.v4.new_code_cell(s) if k == "code" else nbformat.v4.new_markdown_cell(s)
                for s, k in zip(sources, kinds)]
    return nb


@pytest.mark.parametrize("sources, found", [
    (["from cmix_course import reference_rollout\n"
      "def my_rollout(m, a):\n    return reference_rollout(m, a)"], ["cmix_course.reference_rollout"]),
    (["import cmixlib as cl", "def helper(m):\n    return cl.methods.aggregation.rollout(m)",
      "def my_rollout(m, a):\n    return helper(m)"], ["cmixlib.methods.aggregation.rollout"]),
    (["from cmixlib import rollout as r", "my_rollout = r"], ["cmixlib.rollout"]),
    (["from cmix_course.method_exercises import *", "def my_rollout(m, a):\n    return reference_rollout(m, a)"],
     ["reference_rollout"]),
    (["import numpy as np\ndef rollout(m):\n    return m", "def my_rollout(m, a):\n    return np.stack([rollout(m)])"],
     []),                                     # the student's own function named rollout is fine
    (["%time x = 1", "def my_rollout(m, a):\n    out = [m[0]]\n    return out"], []),
])
def test_answer_uses_finds_copied_computations(sources, found):
    code = scan.parse_cells(_nb(*sources))
    assert scan.answer_uses(code, "my_rollout", ("rollout", "attention_flow")) == found


def test_the_last_definition_counts_and_syntax_errors_are_listed():
    code = scan.parse_cells(_nb("from cmix_course import reference_rollout as ref\n"
                                "def my_rollout(m, a):\n    return ref(m, a)",
                                "def broken(:\n    pass",
                                "def my_rollout(m, a):\n    return m"))
    assert scan.answer_uses(code, "my_rollout", ("rollout",)) == []
    assert code.errors and code.errors[0][0] == 1


@pytest.mark.parametrize("source, flagged", [
    ("import cmix_course\ncmix_course.check_rollout = lambda f, **k: None", "cmix_course.check_rollout"),
    ("import sys\nsys.modules['cmix_course'] = None", "sys.modules"),
    ("from cmix_course import checking\nsetattr(checking, 'PASSED', 'x')", "setattr"),
    ("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)", "signal"),
    ("import builtins\nbuiltins.print = None", "builtins"),
    ("import importlib\nlib = importlib.import_module('cmix' + 'lib')", "importlib"),
    ("import numpy\nnumpy.allclose = lambda *a, **k: True", "numpy.allclose"),
    ("exec(open('/x/notebooks/03.ipynb').read())", "open"),
    ("def f(m):\n    return getattr(m, 'roll' + 'out')", "getattr"),
    ("import atexit\natexit.register(print)", "atexit"),
])
def test_suspicious_code_is_flagged(source, flagged):
    found = scan.suspicious(scan.parse_cells(_nb(source)))
    assert found and any(flagged in f for f in found), found


def test_ordinary_code_and_the_books_own_cells_are_not_flagged():
    clean = _nb("import numpy as np\nimport torch\nx = np.zeros(3)\nmodel = None",
                "def f(a):\n    a.weight = 1\n    return getattr(a, 'bias')")
    assert scan.suspicious(scan.parse_cells(clean)) == []
    student = nbformat.read(ROOT / "editions" / "student" / "03_attention_rollout_flow.ipynb", 4)
    known = G.book_code(ROOT / "notebooks" / "03_attention_rollout_flow.ipynb", ROOT)
    book = scan.book_cells(student, known)
    assert 2 in book                       # the setup cell, with its Colab line
    assert scan.suspicious(scan.parse_cells(student), book) == []
    assert scan.suspicious(scan.parse_cells(student))                  # read alone, it is flagged
    forged = _nb("print('check_rollout: all checks passed')")
    assert scan.forged_reports(scan.parse_cells(forged))


def test_names_are_resolved_with_function_scope():
    """The starter's parameter ``maps`` and a local ``m`` are not the notebook's variables
    computed by the library (the false positive of issue 38)."""
    code = scan.parse_cells(_nb(
        "import cmixlib\nmaps = cmixlib.context_mixing(None, None, 'x')\nm = cmixlib.rollout(maps)",
        "def my_rollout(maps, add_identity):\n    m = maps[0]\n    return [m] + [x for x in maps]"))
    assert scan.answer_uses(code, "my_rollout", ("rollout", "context_mixing")) == []
    code = scan.parse_cells(_nb("import cmixlib\nr = cmixlib.rollout",
                                "def my_rollout(maps, a):\n    return r(maps)"))
    assert scan.answer_uses(code, "my_rollout", ("rollout",)) == ["cmixlib.rollout"]


def test_student_id_from_the_file_name_or_a_pattern_never_a_cell():
    assert G.student_id("whatever.ipynb", "03_x.ipynb") == "whatever"
    assert G.student_id("alice_03_x.ipynb", "03_x.ipynb") == "alice"
    assert G.student_id("03_x-bob.ipynb", "03_x.ipynb") == "bob"
    assert G.student_id("03_x.ipynb", "03_x.ipynb") == "03_x"
    assert G.student_id("lastfirst_12345_678_03_x.ipynb", "03_x.ipynb",
                        pattern=r"_(?P<id>\d+)_") == "12345"
    assert not hasattr(scan, "student_id_from_cells")


def test_the_interpretive_answer_is_found_by_its_heading():
    nb = nbformat.read(ROOT / "notebooks" / "03_attention_rollout_flow.ipynb", as_version=4)
    ex = next(e for e in E.exercises(nb) if e.kind == "interpretive")
    student = _nb(nb.cells[ex.cell].source, E.ANSWER_TEXT, "And a second paragraph, new cell.",
                  "x = 1", kinds=["markdown", "markdown", "markdown", "code"])
    assert G.interpretive_answer(student, ex) == "And a second paragraph, new cell."
    student.cells[1].source = E.ANSWER_TEXT + "\nRows become alike because ..."
    assert G.interpretive_answer(student, ex).startswith("Rows become alike because ...")
    assert G.interpretive_answer(_nb("x = 1"), ex) == ""


def test_submissions_that_cannot_be_graded_give_zero_rows(tmp_path):
    """No kernel starts: an unreadable file, and one whose chapter cannot be told."""
    bad = tmp_path / "carol_04_vector_norms.ipynb"
    bad.write_text("[]", encoding="utf-8")
    g = G.grade_submission(bad, root=ROOT)
    assert g.error and g.total == 0 and g.student == "carol" and g.assignment == "04_vector_norms.ipynb"
    chapter = nbformat.read(ROOT / "notebooks" / "04_vector_norms.ipynb", as_version=4)
    assert {e.status for e in g.exercises} == {G.ERROR}
    assert len(g.exercises) == len(E.exercises(chapter)) >= 3     # one row per exercise
    unknown = tmp_path / "dave.ipynb"
    nbformat.write(_nb("x = 1"), unknown)
    g = G.grade_submission(unknown, root=ROOT)
    assert g.error and "cannot tell which chapter" in g.error and g.student == "dave"


def test_the_command_line_writes_a_gradebook_for_a_broken_batch(tmp_path, monkeypatch, capsys):
    from cmix_course.cli import main

    for name in ("x1_06_alti.ipynb", "x2_06_alti.ipynb"):
        (tmp_path / name).write_text("not a notebook", encoding="utf-8")
    monkeypatch.chdir(ROOT)
    out = tmp_path / "grades"
    assert main(["grade", str(tmp_path / "x1_06_alti.ipynb"), str(tmp_path / "x2_06_alti.ipynb"),
                 "--out", str(out), "--seed", "1"]) == 0
    table = pd.read_csv(out / "grades.csv")
    assert list(table["student"]) == ["x1", "x2"] and (table["total"] == 0).all()
    assert (out / "feedback" / "x1.md").is_file() and (out / "gradescope" / "x2" / "results.json").is_file()
    assert "ERROR" in capsys.readouterr().out
    assert main(["grade", str(tmp_path / "missing.ipynb"), "--out", str(out)]) == 2


PAGE = """<html><body><main>
<a href="https://colab.research.google.com/github/o/r/blob/main/notebooks/03_attention_rollout_flow.ipynb">Colab</a>
<div class="cell tag_exercise docutils container"><pre>def my_rollout(maps, add_identity):</pre></div>
<div class="cell tag_solution tag_hide-input docutils container"><pre># Solution SECRET-CODE</pre></div>
<div class="admonition dropdown"><p class="admonition-title">Model answer</p><p>SECRET-TEXT</p></div>
<div class="admonition note"><p class="admonition-title">Note</p><p>kept</p></div>
</main></body></html>"""


def _site(tmp_path: Path) -> Path:
    html = tmp_path / "html"
    (html / "notebooks").mkdir(parents=True)
    (html / "_sources" / "notebooks").mkdir(parents=True)
    (html / "notebooks" / "03_attention_rollout_flow.html").write_text(PAGE, encoding="utf-8")
    (html / "notebooks" / "01_preface.html").write_text(
        PAGE.replace("03_attention_rollout_flow", "01_preface"), encoding="utf-8")
    for name in ("03_attention_rollout_flow.ipynb", "01_preface.ipynb"):
        (html / "_sources" / "notebooks" / name).write_text(
            (ROOT / "notebooks" / name).read_text(encoding="utf-8"), encoding="utf-8")
    return html


def test_the_site_buttons_serve_the_student_edition(tmp_path):
    html = _site(tmp_path)
    changed = serve_student_edition(html, ROOT)
    assert len(changed) == 2
    page = (html / "notebooks" / "03_attention_rollout_flow.html").read_text(encoding="utf-8")
    assert "/blob/main/editions/student/03_attention_rollout_flow.ipynb" in page
    assert "blob/main/notebooks/03_" not in page
    download = (html / "_sources" / "notebooks" / "03_attention_rollout_flow.ipynb").read_text(encoding="utf-8")
    assert download == (ROOT / E.STUDENT_DIR / "03_attention_rollout_flow.ipynb").read_text(encoding="utf-8")
    assert "# Solution" not in download and E.GRADING_HEAD not in download
    # chapter 1 has no exercises: left as it is
    assert "blob/main/notebooks/01_preface" in (html / "notebooks" / "01_preface.html").read_text()


def test_the_site_without_solutions(tmp_path):
    html = _site(tmp_path)
    removed = strip_solutions(html, tmp_path / "student-site", ROOT)
    page = (tmp_path / "student-site" / "notebooks" / "03_attention_rollout_flow.html").read_text()
    assert removed == 2 and "SECRET" not in page
    assert "def my_rollout" in page and "kept" in page and "editions/student/" in page
    assert "SECRET-CODE" in (html / "notebooks" / "03_attention_rollout_flow.html").read_text()


@pytest.mark.parametrize("path", E.chapter_notebooks(ROOT), ids=lambda p: p.name)
def test_the_chapters_own_text_is_not_an_answer(path):
    """In the untouched student edition every interpretive answer is empty (the chapter's prose
    after an exercise is not the student's); text added to the answer cell is found."""
    _, found, known = G.load_assignment(path)
    student = nbformat.read(ROOT / E.STUDENT_DIR / path.name, as_version=4)
    for ex in (e for e in found if e.kind == "interpretive"):
        assert G.interpretive_answer(student, ex, known) == "", ex.id
        k = next(i for i, c in enumerate(student.cells) if i > 0 and c.source.strip() == E.ANSWER_TEXT
                 and student.cells[i - 1].source.startswith(f"### Exercise {ex.id} "))
        student.cells[k].source += "\nMy answer."
        assert G.interpretive_answer(student, ex, known) == "My answer.", ex.id
