"""The static explorer: every method's maps for a fixed set of sentences, viewable with no kernel.

The live explorer of chapter 15 (ipywidgets) needs a running Python kernel: on the rendered site
its controls do nothing. This module precomputes, when the book is built, the maps of every
method at every layer for :func:`explorer_sentences` on one or more models
(:mod:`cmixlib.plotting.explorer_models` computes one model's block), and writes one
self-contained HTML fragment (:func:`explorer_html`): the data, deflate-compressed, and a small
viewer in plain JavaScript (``explorer.js``) that draws them on ``<canvas>`` elements.

Controls: model, sentence, method (every context-mixing method, every layer-wise method's
rollout, the gradient and erasure baselines as one row), layer, layer-wise map vs its rollout,
attention head, whole map vs one receiving token's row, a second panel (another method side by
side, the difference A - B, or the sentence's BLiMP minimal pair) and a colour scale shared by
the panels or per panel, with colour bars. Pointer events (mouse, pen, touch) read values; the
canvases are drawn at the screen's device-pixel ratio.

Why plain JavaScript over embedded data: the page must work offline with nothing fetched from a
CDN, and the viewer only draws coloured squares and bars. plotly.js would add about 3.5 MB; an
ipywidgets embed would have to store every state as a picture. The numbers are stored as
integers (:mod:`cmixlib.plotting.explorer_packing`: value x 10^3, maps are row-normalised so
values lie in [0, 1]) in JSON, compressed with zlib's deflate and base64-encoded
(:func:`encode_payload`); the browser inflates them with its built-in ``DecompressionStream``.

``#cmix-explorer-selftest`` in the page's address makes the viewer drive its own controls by
dispatching the same events a user's clicks and taps fire, hash the canvases' pixels and record
what it drew after each step, and print that into the page (``tools/check_explorer.py`` reads it
in headless Chromium).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from cmixlib.cache import cache_root, code_text, stable_hash
from cmixlib.data.loaders import load_blimp, load_sst2
from cmixlib.experiments import code_version
from cmixlib.models.loading import load_model
from cmixlib.plotting.explorer_models import model_block
from cmixlib.plotting.explorer_page import (decode_payload, encode_payload, explorer_html,
                                          method_table, payload_size)
from cmixlib.plotting.explorer_packing import DECIMALS

__all__ = ["EXPLORER_SENTENCES", "BLIMP_SUBSETS", "SST2_REVIEWS", "MAX_WORDS",
           "EXPLORER_MODELS", "FURTHER_SENTENCES", "explorer_sentences", "sentence_subset",
           "explorer_data", "encode_payload", "decode_payload", "explorer_html", "payload_size"]

#: The models of the book's explorer, by :func:`cmixlib.load_model` name: the default encoder
#: (None), MPNet and the SmolLM2 decoder.
EXPLORER_MODELS: tuple[str | None, ...] = (None, "all-mpnet-base-v2", "smollm2")

#: Which sentences of :func:`explorer_sentences` the further models (all but the first) show,
#: to keep the page small: the masked Value Zeroing example, ALTI's SST-2 example and the first
#: BLiMP minimal pair (fixed in advance, not picked by result).
FURTHER_SENTENCES = (0, 1, 3, 4)

#: The papers' own example sentences (the rest come from the data files, :func:`explorer_sentences`).
#: ``[MASK]`` is replaced by the model's mask token; a model without one (a decoder) reads the
#: text up to the mask, where it would predict the masked word. ``target_word``/``foil_word``: the
#: papers' correct and wrong word at the mask, explained by the gradient and erasure baselines.
EXPLORER_SENTENCES: tuple[dict[str, str], ...] = (
    {"text": "The pictures of some hat [MASK] scaring Marcus.",
     "source": "Mohebbi et al. 2023, Appendix A.4 (a BLiMP agreement item with the verb masked)",
     "target_word": "were", "foil_word": "is"},
    {"text": "a remarkable 179-minute meditation on the nature of revolution .",
     "source": "Ferrando et al. 2022, Table 1 (SST-2)"},
    {"text": "a 1770s map of philadelphia's naval defenses [MASK] a fort on the island , "
             "but it is unidentified .",
     "source": "Ferrando et al. 2022, Table 3 (subject-verb agreement)",
     "target_word": "shows", "foil_word": "show"},
)

#: The BLiMP agreement subsets whose first pair is shown (the choice is fixed in advance, not
#: picked by result).
BLIMP_SUBSETS = ("rpsv", "dna", "darn", "ana")
#: How many SST-2 dev sentences are shown: the first ones of at most :data:`MAX_WORDS` words.
SST2_REVIEWS = 2
#: The longest SST-2 sentence shown, in words.
MAX_WORDS = 16


def explorer_sentences() -> list[dict[str, Any]]:
    """The explorer's sentences: :data:`EXPLORER_SENTENCES`, then for each subset of
    :data:`BLIMP_SUBSETS` the first BLiMP pair (grammatical and ungrammatical sentence, each with
    ``pair`` = the other's index and ``grammatical``), then the first :data:`SST2_REVIEWS` SST-2
    dev sentences of at most :data:`MAX_WORDS` words (``task`` ``"sst2"``). Each entry has
    ``text`` and ``source`` (with the dataset's licence, as ``data/*/README.md``)."""
    out: list[dict[str, Any]] = [dict(s) for s in EXPLORER_SENTENCES]
    for subset in BLIMP_SUBSETS:
        row = load_blimp(subset).iloc[0]
        k = len(out)
        for key, what, other in (("sentence_good", "grammatical", k + 1),
                                 ("sentence_bad", "ungrammatical", k)):
            out.append({"text": str(row[key]), "pair": other,
                        "grammatical": what == "grammatical",
                        "source": f"BLiMP (Warstadt et al. 2020), subset {subset}, pair 1, "
                                  f"{what}; CC BY 4.0"})
    out[1]["task"] = "sst2"
    sst = load_sst2("dev")
    short = [t for t in sst["sentence"] if len(str(t).split()) <= MAX_WORDS][:SST2_REVIEWS]
    for k, t in enumerate(short, 1):
        out.append({"text": str(t), "task": "sst2",
                    "source": f"SST-2 dev (Socher et al. 2013, via GLUE), short review {k}"})
    return out


def sentence_subset(sentences: list[dict[str, Any]], keep) -> list[dict[str, Any]]:
    """``sentences[k]`` for ``k`` in ``keep`` (in that order), each ``pair`` index renumbered;
    a pair whose other sentence is left out is dropped."""
    keep = [k for k in keep if k < len(sentences)]
    where = {k: i for i, k in enumerate(keep)}
    out = []
    for k in keep:
        s = dict(sentences[k])
        if "pair" in s:
            if s["pair"] in where:
                s["pair"] = where[s["pair"]]
            else:
                s.pop("pair"), s.pop("grammatical", None)
        out.append(s)
    return out


def _cache_key(model_name: str, sentences: list[dict[str, Any]], quick: bool,
               extra: dict[str, Any]) -> str:
    here = Path(__file__).parent
    own = hashlib.sha256("".join(code_text(here / f) for f in
                                 ("explorer.py", "explorer_models.py",
                                  "explorer_packing.py")).encode()).hexdigest()[:12]
    return stable_hash({"what": "explorer", "model": model_name, "code_version": code_version(),
                        "explorer_code": own, "sentences": sentences, "quick": quick, **extra})


def explorer_data(bundles=None, sentences: list[dict[str, Any]] | None = None, *,
                  quick: bool = False, use_cache: bool = True, progress: bool = True,
                  baselines: bool = True) -> dict[str, Any]:
    """The explorer's data for each bundle of ``bundles`` (one bundle or a list; default: each
    of :data:`EXPLORER_MODELS` loaded with :func:`cmixlib.load_model`), for ``sentences``
    (default :func:`explorer_sentences`; quick mode: the first 3; bundles after the first:
    :data:`FURTHER_SENTENCES` of them, :func:`sentence_subset`): ``{"decimals", "methods":
    [registry rows], "models": [block, ...]}``, each block as
    :func:`cmixlib.plotting.explorer_models.model_block` returns it. With ``baselines`` the
    first encoder whose tokenizer is the offline MLM's gets gradient and erasure rows
    (:func:`~cmixlib.plotting.explorer_models.baseline_rows`). Each block is cached on disk,
    keyed by the model, the sentences, the library's code version and this code."""
    if bundles is None:
        bundles = [load_model(name) if name else load_model() for name in EXPLORER_MODELS]
    elif not isinstance(bundles, (list, tuple)):
        bundles = [bundles]
    if sentences is None:
        sentences = explorer_sentences()
        if quick:
            sentences = sentences[:3]
    blocks, want_baselines = [], baselines
    for number, bundle in enumerate(bundles):
        name = bundle.describe()
        these = sentences if number == 0 else sentence_subset(sentences, FURTHER_SENTENCES)
        key = _cache_key(name, these, quick, {"baselines": want_baselines})
        path = cache_root() / "explorer" / f"{key}.json"
        if use_cache and path.exists():
            block = json.loads(path.read_text())
        else:
            block = model_block(bundle, these, baselines=want_baselines, progress=progress)
            if use_cache:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(block, separators=(",", ":")))
        if block.get("baselines"):
            want_baselines = False          # one model's baselines are enough
        blocks.append(block)
    names = [m for b in blocks for m in b["methods"] + b.get("baseline_methods", [])]
    return {"decimals": DECIMALS, "methods": method_table(list(dict.fromkeys(names))),
            "models": blocks}
