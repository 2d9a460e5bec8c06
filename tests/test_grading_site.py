"""The students' site (``make book-student``), on a small site built by Sphinx (a chapter page
with a solution cell and a model answer, the instructors' page with a hidden seed and the
detection rules): the copy carries none of them anywhere, search index included, and the
make target reuses the built book instead of building it again."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from cmix_course.site import strip_solutions

ROOT = Path(__file__).resolve().parents[1]
SECRET = "zanzibarsolution"            # a word only the solution, answer and notes contain


def _site(tmp: Path) -> Path:
    src = tmp / "src"
    (src / "notebooks").mkdir(parents=True)
    (src / "book").mkdir()
    (src / "conf.py").write_text("project = 'fixture'\nextensions = []\n")
    (src / "index.rst").write_text("Fixture\n=======\n\n.. toctree::\n\n   "
                                   "notebooks/03_attention_rollout_flow\n   book/instructors\n")
    (src / "notebooks" / "03_attention_rollout_flow.rst").write_text(
        "Rollout\n=======\n\nRollout multiplies the layer maps.\n\n"
        ".. raw:: html\n\n   <div class=\"cell tag_solution\"><p>The solution: zanzibarsolution "
        "matrices.</p></div>\n\n"
        ".. admonition:: Model answer\n\n   Because zanzibaranswer rows average.\n\n"
        "Exercise 3.1 asks for the rollout.\n")
    (src / "book" / "instructors.rst").write_text(
        "For instructors\n===============\n\nThe hidden seed is zanzibarseed 7; flagged code "
        "uses zanzibarrules such as exec.\n")
    out = tmp / "html"
    subprocess.run([sys.executable, "-m", "sphinx", "-q", "-b", "html", str(src), str(out)],
                   check=True, capture_output=True)
    return out


def _everything(folder: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8", errors="replace")
                     for p in folder.rglob("*") if p.is_file()
                     and p.suffix in (".html", ".js", ".txt", ".rst", ".md", ".ipynb", ".json"))


def test_the_students_site_carries_no_solution_seed_or_rule(tmp_path):
    html = _site(tmp_path)
    assert "zanzibarsolut" in (html / "searchindex.js").read_text()        # the fixture works
    out = tmp_path / "html-student"
    removed = strip_solutions(html, out, root=ROOT)
    assert removed == 2
    text = _everything(out).lower()
    for word in ("zanzibarsolut", "zanzibaransw", "zanzibarseed", "zanzibarrul"):
        assert word not in text, word
    index = (out / "searchindex.js").read_text()
    assert re.search(r'"multipli\w*"', index) and re.search(r'"rollout"', index)   # kept text
    assert "zanzibar" in _everything(html)                 # the instructor's site is untouched


def test_make_book_student_reuses_the_built_book():
    make = (ROOT / "Makefile").read_text()
    rule = re.search(r"^book-student:(.*)$", make, re.M).group(1)
    assert "book" not in rule.split()
    dry = subprocess.run(["make", "-n", "book-student"], cwd=ROOT, capture_output=True, text=True)
    assert "jupyter-book" not in dry.stdout
