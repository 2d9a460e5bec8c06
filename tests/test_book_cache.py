"""The book's executed notebooks follow the library code (tools/cmix_nbdeps.py).

A tiny Sphinx + myst-nb project in a temporary folder, built with the same execution mode as the
book (``cache``), whose two notebooks (an ``.ipynb`` and a MyST Markdown notebook, like
``book/instructors.md``) import a small package and count their executions in a file. A change to a module it imports (directly or through another module) re-executes it and
the page shows the new output; an unchanged tree, a change to a module it cannot import, and a
docstring-only edit do not; changing ``CMIX_QUICK`` does. The book's own ``_config.yml`` loads
the extension (checked too).

The parallel path of ``make book`` (``tools/run_notebooks.py --jobs 2``, then ``jupyter-book
build``) on the same project as a Jupyter Book with a third notebook: the build only renders what
the script executed and shows the new outputs; a changed module re-executes only the notebooks
that import it; a cell that raises makes the script fail with its traceback (a cell tagged
``raises-exception`` does not), the other notebooks still being executed and cached.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import cmix_nbdeps  # noqa: E402

pytestmark = pytest.mark.slow

CONF = """
import sys
sys.path.insert(0, {tools!r})
extensions = ["myst_nb", "cmix_nbdeps"]
nb_execution_mode = "cache"
nb_execution_raise_on_error = True
cmix_nbdeps_package = {package!r}
cmix_nbdeps_data = ["data"]
exclude_patterns = ["_build", "fakepkg", "data"]
"""

CELLS = ["import fakepkg.a as a\n",
         "with open('runs.txt', 'a') as f:\n    f.write('x')\nprint('VALUE', a.value())\n"]


MD_NOTEBOOK = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A MyST Markdown notebook

```{code-cell}
from fakepkg.a import value
with open('runs_md.txt', 'a') as f:
    f.write('x')
print('MD', value())
```
"""


def _notebook(cells):
    return {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Page\n"}] + [
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": c}
        for c in cells],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5}


@pytest.fixture()
def project(tmp_path):
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import VALUE\n\n\ndef value():\n    return VALUE\n")
    (pkg / "b.py").write_text('"""Module b."""\nVALUE = 1\n')
    (pkg / "c.py").write_text("OTHER = 1\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "table.csv").write_text("a,b\n1,2\n")
    (tmp_path / "conf.py").write_text(CONF.format(tools=str(ROOT / "tools"), package=str(pkg)))
    (tmp_path / "index.md").write_text("# Index\n\n```{toctree}\nchapter\nmdpage\n```\n")
    (tmp_path / "mdpage.md").write_text(MD_NOTEBOOK)
    (tmp_path / "chapter.ipynb").write_text(json.dumps(_notebook(CELLS)))
    return tmp_path


def build(project: Path, **env) -> tuple[int, str]:
    """Build the project; return (executions so far, the chapter's HTML)."""
    environ = dict(os.environ, PYTHONPATH=str(project), **env)
    environ.pop("CMIX_QUICK", None) if "CMIX_QUICK" not in env else None
    subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", str(project),
                    str(project / "_build" / "html")], check=True, env=environ, cwd=project,
                   capture_output=True, text=True)
    runs, runs_md = project / "runs.txt", project / "runs_md.txt"
    html = (project / "_build" / "html" / "chapter.html").read_text()
    md_runs = len(runs_md.read_text()) if runs_md.exists() else 0
    assert md_runs == (len(runs.read_text()) if runs.exists() else 0), "the .md notebook runs alike"
    return len(runs.read_text()) if runs.exists() else 0, html


def test_a_changed_module_re_executes_the_notebook_and_nothing_else_does(project):
    runs, html = build(project)
    assert runs == 1 and "VALUE 1" in html
    assert build(project)[0] == 1                                     # unchanged: from the cache
    b = project / "fakepkg" / "b.py"
    b.write_text(b.read_text().replace('"""Module b."""', '"""Module b, documented."""  # note'))
    assert build(project)[0] == 1                                     # docstring/comment only
    (project / "fakepkg" / "c.py").write_text("OTHER = 2\n")
    assert build(project)[0] == 1                                     # not importable from it
    b.write_text(b.read_text().replace("VALUE = 1", "VALUE = 2"))     # imported through a.py
    runs, html = build(project)
    assert runs == 2 and "VALUE 2" in html and "VALUE 1" not in html
    assert "MD 2" in (project / "_build" / "html" / "mdpage.html").read_text()
    (project / "data" / "table.csv").write_text("a,b\n1,3\n")         # the data it may read
    assert build(project)[0] == 3
    assert build(project, CMIX_QUICK="1")[0] == 4                      # other sizes
    assert build(project, CMIX_QUICK="1")[0] == 4


def test_keys_follow_imports_of_the_cells(tmp_path):
    nb = tmp_path / "x.ipynb"
    nb.write_text(json.dumps(_notebook(["%matplotlib inline\nimport cmixlib.book.notebook\n",
                                        "def f():\n    from cmixlib.plotting import plot_map\n"])))
    assert {"cmixlib.book.notebook", "cmixlib.plotting", "cmixlib.plotting.plot_map"} <= \
        cmix_nbdeps.notebook_imports(nb)
    key = cmix_nbdeps.notebook_key(nb)
    assert key == cmix_nbdeps.notebook_key(nb)
    os.environ["CMIX_MODEL"], before = "another-model", os.environ.get("CMIX_MODEL")
    try:
        assert cmix_nbdeps.notebook_key(nb) != key
    finally:
        os.environ.pop("CMIX_MODEL") if before is None else os.environ.update(CMIX_MODEL=before)


def test_keys_follow_the_course_package_too(tmp_path):
    """A chapter that imports a checker from an extra package (cmix_course) is keyed on that
    package's code: editing a module it imports changes the key; a module it does not import
    does not."""
    pkg = tmp_path / "coursepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .checks import check_a\n")
    (pkg / "checks.py").write_text("def check_a():\n    return 1\n")
    (pkg / "unused.py").write_text("X = 1\n")
    nb = tmp_path / "x.ipynb"
    nb.write_text(json.dumps(_notebook(["from coursepkg import check_a\n"])))
    key = cmix_nbdeps.notebook_key(nb, extra_packages=(pkg,))
    assert key != cmix_nbdeps.notebook_key(nb)                    # the package counts
    # the digests are memoised per modification time: give each edit a new one explicitly
    # (some file systems keep coarse time stamps)
    (pkg / "unused.py").write_text("X = 2\n")
    os.utime(pkg / "unused.py", ns=(10**18, 10**18))
    assert cmix_nbdeps.notebook_key(nb, extra_packages=(pkg,)) == key
    (pkg / "checks.py").write_text("def check_a():\n    return 2\n")
    os.utime(pkg / "checks.py", ns=(10**18 + 10**9, 10**18 + 10**9))
    assert cmix_nbdeps.notebook_key(nb, extra_packages=(pkg,)) != key


def test_the_book_loads_the_extension():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["local_extensions"].get("cmix_nbdeps") == "tools/"
    assert config["execute"]["execute_notebooks"] == "cache"


# --- the parallel path of `make book`: tools/run_notebooks.py, then `jupyter-book build` ---------

JB_CONFIG = """
title: Test book
only_build_toc_files: true
exclude_patterns: ["_build/*", "fakepkg/*", "data/*"]
execute:
  execute_notebooks: cache
  timeout: 300
  allow_errors: false
  run_in_temp: false
sphinx:
  local_extensions:
    cmix_nbdeps: {tools}
  config:
    nb_execution_raise_on_error: true
    nb_kernel_rgx_aliases:
      ".*": python3
    cmix_nbdeps_package: {package}
    cmix_nbdeps_data: ["data"]
"""

JB_TOC = "format: jb-book\nroot: index\nchapters:\n- file: chapter\n- file: mdpage\n- file: other\n"

OTHER_CELLS = ["from fakepkg.c import OTHER\n",
               "with open('runs_other.txt', 'a') as f:\n    f.write('x')\nprint('OTHER', OTHER)\n"]


def _counts(project: Path) -> tuple[int, int, int]:
    return tuple(len(f.read_text()) if f.exists() else 0
                 for f in (project / n for n in ("runs.txt", "runs_md.txt", "runs_other.txt")))


@pytest.fixture()
def jb_project(project):
    """The project above as a Jupyter Book (``_config.yml``, ``_toc.yml``), plus a third
    notebook that imports another module (``fakepkg.c``)."""
    (project / "conf.py").unlink()
    (project / "_config.yml").write_text(JB_CONFIG.format(tools=str(ROOT / "tools"),
                                                          package=str(project / "fakepkg")))
    (project / "_toc.yml").write_text(JB_TOC)
    (project / "index.md").write_text("# Index\n")
    (project / "other.ipynb").write_text(json.dumps(_notebook(OTHER_CELLS)))
    return project


def pre_execute(project: Path, jobs: int = 2) -> subprocess.CompletedProcess:
    environ = dict(os.environ, PYTHONPATH=str(project))
    environ.pop("CMIX_QUICK", None)
    return subprocess.run([sys.executable, str(ROOT / "tools" / "run_notebooks.py"),
                           "--jobs", str(jobs), str(project)], env=environ, cwd=project,
                          capture_output=True, text=True)


def jb_build(project: Path) -> str:
    """``jupyter-book build`` (as `make book`); the chapter's HTML."""
    environ = dict(os.environ, PYTHONPATH=str(project))
    environ.pop("CMIX_QUICK", None)
    done = subprocess.run([str(Path(sys.executable).parent / "jupyter-book"), "build",
                           str(project), "--builder", "html"], env=environ, cwd=project,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return (project / "_build" / "html" / "chapter.html").read_text()


def test_parallel_pre_execution_feeds_the_build_and_follows_the_imports(jb_project):
    p = jb_project
    done = pre_execute(p)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _counts(p) == (1, 1, 1) and "3 executed" in done.stdout
    html = jb_build(p)                                  # renders from the cache: no execution
    assert _counts(p) == (1, 1, 1) and "VALUE 1" in html
    assert "OTHER 1" in (p / "_build" / "html" / "other.html").read_text()
    assert "0 to execute" in pre_execute(p).stdout and _counts(p) == (1, 1, 1)
    b = p / "fakepkg" / "b.py"                          # imported (through a.py) by two of them
    b.write_text(b.read_text().replace("VALUE = 1", "VALUE = 2"))
    done = pre_execute(p)
    assert done.returncode == 0 and _counts(p) == (2, 2, 1), done.stdout + done.stderr
    html = jb_build(p)
    assert _counts(p) == (2, 2, 1) and "VALUE 2" in html and "VALUE 1" not in html
    (p / "fakepkg" / "c.py").write_text("OTHER = 2\n")  # imported by the third only
    assert pre_execute(p, jobs=1).returncode == 0 and _counts(p) == (2, 2, 2)
    # the same records with one process or two, and the extension keeps them: nothing re-runs
    jb_build(p)
    assert _counts(p) == (2, 2, 2)
    assert "OTHER 2" in (p / "_build" / "html" / "other.html").read_text()


def test_parallel_pre_execution_fails_on_an_error_and_keeps_expected_ones(jb_project):
    p = jb_project
    expected = {"cell_type": "code", "execution_count": None, "outputs": [],
                "metadata": {"tags": ["raises-exception"]}, "source": "raise KeyError('meant')\n"}
    nb = _notebook(CELLS)
    nb["cells"].append(expected)                       # tagged: an output, not a failure
    (p / "chapter.ipynb").write_text(json.dumps(nb))
    (p / "other.ipynb").write_text(json.dumps(_notebook(OTHER_CELLS + ["1 / 0\n"])))
    done = pre_execute(p)
    assert done.returncode == 1
    assert "ZeroDivisionError" in done.stdout and "other.ipynb" in done.stderr
    assert "chapter.ipynb executed" in done.stdout      # the others still ran and are cached
    again = pre_execute(p)                              # the failed one is not cached
    assert again.returncode == 1 and "1 to execute" in again.stdout
