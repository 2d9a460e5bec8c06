"""The book's executed notebooks follow the library code (tools/cmix_nbdeps.py).

A tiny Sphinx + myst-nb project in a temporary folder, built with the same execution mode as the
book (``cache``), whose two notebooks (an ``.ipynb`` and a MyST Markdown notebook, like
``book/instructors.md``) import a small package and count their executions in a file. A change to a module it imports (directly or through another module) re-executes it and
the page shows the new output; an unchanged tree, a change to a module it cannot import, and a
docstring-only edit do not; changing ``CMIX_QUICK`` does. The book's own ``_config.yml`` loads
the extension (checked too).
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
    nb.write_text(json.dumps(_notebook(["%matplotlib inline\nimport cmixlib.book\n",
                                        "def f():\n    from cmixlib.plotting import plot_map\n"])))
    assert {"cmixlib.book", "cmixlib.plotting", "cmixlib.plotting.plot_map"} <= \
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
