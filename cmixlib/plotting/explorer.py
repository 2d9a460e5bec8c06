"""The static explorer: every method's maps for a fixed set of sentences, viewable with no kernel.

The live explorer of chapter 15 (ipywidgets) needs a running Python kernel: on the rendered site
its controls do nothing. This module precomputes, when the book is built, the maps of every
method of :data:`cmixlib.METHODS` at every layer for :data:`EXPLORER_SENTENCES`, and writes one
self-contained HTML fragment (:func:`explorer_html`): the maps as JSON and a small viewer in
plain JavaScript that draws them on ``<canvas>`` elements. Controls: sentence, method, layer,
layer-wise map vs its rollout, whole map vs one receiving token's row, and a second method side
by side.

Why plain JavaScript over embedded JSON: the page must work offline with nothing fetched from a
CDN, and the viewer only draws coloured squares and bars. plotly.js would add about 3.5 MB to
the page for that; an ipywidgets embed would have to store every (sentence, method, layer,
view) state as a picture. The viewer is about 250 lines of JavaScript, and the data are the
numbers themselves, rounded to 0.001 (the maps are row-normalised, so values lie in [0, 1]).

``#cmix-explorer-selftest`` in the page's address makes the viewer drive its own controls
(every sentence x method, the layer slider, the rollout toggle, the row view, the comparison)
by dispatching the same ``change``/``input`` events a user's clicks fire, hash the canvases'
pixels after each step and print the hashes into the page (``tools/check_explorer.py`` reads
them in headless Chromium).
"""
from __future__ import annotations

import hashlib
import html
import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["EXPLORER_SENTENCES", "BLIMP_SUBSETS", "SST2_REVIEWS", "MAX_WORDS", "DECIMALS",
           "explorer_sentences", "explorer_data", "pack_maps", "explorer_html"]

#: Rounding of the values stored in the page (maps are row-normalised: values in [0, 1]).
DECIMALS = 3

#: The papers' own example sentences (the rest come from the data files, :func:`explorer_sentences`).
#: ``[MASK]`` is replaced by the model's mask token.
EXPLORER_SENTENCES: tuple[dict[str, str], ...] = (
    {"text": "The pictures of some hat [MASK] scaring Marcus.",
     "source": "Mohebbi et al. 2023, Appendix A.4 (a BLiMP agreement item with the verb masked)"},
    {"text": "a remarkable 179-minute meditation on the nature of revolution .",
     "source": "Ferrando et al. 2022, Table 1 (SST-2)"},
    {"text": "a 1770s map of philadelphia's naval defenses [MASK] a fort on the island , "
             "but it is unidentified .",
     "source": "Ferrando et al. 2022, Table 3 (subject-verb agreement)"},
)

#: The BLiMP agreement subsets whose first pair is shown (the choice is fixed in advance, not
#: picked by result).
BLIMP_SUBSETS = ("rpsv", "dna", "darn", "ana")
#: How many SST-2 dev sentences are shown: the first ones of at most :data:`MAX_WORDS` words.
SST2_REVIEWS = 2
#: The longest SST-2 sentence shown, in words.
MAX_WORDS = 16


def explorer_sentences() -> list[dict[str, str]]:
    """The explorer's sentences: :data:`EXPLORER_SENTENCES`, then for each subset of
    :data:`BLIMP_SUBSETS` the first BLiMP pair (grammatical and ungrammatical sentence), then
    the first :data:`SST2_REVIEWS` SST-2 dev sentences of at most :data:`MAX_WORDS` words. Each
    entry has ``text`` and ``source`` (with the dataset's licence, as ``data/*/README.md``)."""
    from ..data.loaders import load_blimp, load_sst2

    out = [dict(s) for s in EXPLORER_SENTENCES]
    for subset in BLIMP_SUBSETS:
        row = load_blimp(subset).iloc[0]
        for key, what in (("sentence_good", "grammatical"), ("sentence_bad", "ungrammatical")):
            out.append({"text": str(row[key]),
                        "source": f"BLiMP (Warstadt et al. 2020), subset {subset}, pair 1, "
                                  f"{what}; CC BY 4.0"})
    sst = load_sst2("dev")
    short = [t for t in sst["sentence"] if len(str(t).split()) <= MAX_WORDS][:SST2_REVIEWS]
    for k, t in enumerate(short, 1):
        out.append({"text": str(t), "source": f"SST-2 dev (Socher et al. 2013, via GLUE), "
                                              f"short review {k}"})
    return out


def pack_maps(maps: dict[str, np.ndarray]) -> dict[str, list]:
    """Maps ``{method: (L, n, n)}`` as JSON-ready nested lists of integers: value x 10^3 rounded
    (:data:`DECIMALS`); NaN (rows not computed) becomes -1."""
    scale = 10 ** DECIMALS
    out = {}
    for name, m in maps.items():
        a = np.asarray(m, dtype=np.float64)
        q = np.where(np.isfinite(a), np.rint(a * scale), -1).astype(np.int64)
        out[name] = q.tolist()
    return out


def _method_table() -> list[dict[str, Any]]:
    from ..core import METHODS

    rows = []
    for name, m in METHODS.items():
        rows.append({"name": name, "label": m.label, "kind": m.kind, "colour": m.colour,
                     "base": m.base, "reference": m.reference})
    return rows


def _cache_key(model_name: str, sentences: list[dict[str, str]], quick: bool) -> str:
    from ..cache import code_text, stable_hash
    from ..experiments import code_version

    own = hashlib.sha256(code_text(Path(__file__)).encode()).hexdigest()[:12]
    return stable_hash({"what": "explorer", "model": model_name, "code_version": code_version(),
                        "explorer_code": own, "sentences": sentences, "quick": quick})


def explorer_data(bundle=None, sentences: list[dict[str, str]] | None = None, *,
                  quick: bool = False, use_cache: bool = True, progress: bool = True
                  ) -> dict[str, Any]:
    """Every method's maps at every layer for ``sentences`` (default :func:`explorer_sentences`;
    quick mode: the first 3) with ``bundle`` (default :func:`cmixlib.load_model`), packed for the
    page: ``{"model", "layers", "decimals", "methods": [...], "sentences": [{"text", "source",
    "tokens", "maps": {method: (L, n, n) ints}}]}``. Cached on disk, keyed by the model, the
    sentences, the library's code version and this module's code."""
    import torch
    from tqdm.auto import tqdm

    from ..cache import cache_root
    from ..core import METHODS, context_mixing, tokens
    from ..models import load_model

    if bundle is None:
        bundle = load_model()
    if sentences is None:
        sentences = explorer_sentences()
        if quick:
            sentences = sentences[:3]
    model_name = bundle.describe()
    path = cache_root() / "explorer" / f"{_cache_key(model_name, sentences, quick)}.json"
    if use_cache and path.exists():
        return json.loads(path.read_text())
    tok = bundle.tokenizer
    out_sentences = []
    for s in tqdm(sentences, desc="explorer maps", disable=not progress):
        text = s["text"].replace("[MASK]", tok.mask_token or "[MASK]")
        ids = tok(text)["input_ids"]
        with torch.no_grad():
            maps = context_mixing(bundle, None, text, methods=list(METHODS))
        out_sentences.append({"text": text, "source": s["source"], "tokens": tokens(tok, ids),
                              "maps": pack_maps(maps)})
    data = {"model": model_name, "layers": int(bundle.model.config.num_hidden_layers),
            "decimals": DECIMALS, "methods": _method_table(), "sentences": out_sentences}
    if use_cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, separators=(",", ":")))
    return data


_ASSET = Path(__file__).with_name("explorer.js")


def explorer_html(data: dict[str, Any], element_id: str = "cmix-explorer") -> str:
    """One self-contained HTML fragment (controls, two canvases, the data as JSON and the viewer
    script from ``explorer.js``): no external file, nothing fetched."""
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    eid = html.escape(element_id, quote=True)
    return (f'<div id="{eid}" class="cmix-explorer" '
            f'style="font:14px sans-serif;max-width:100%;overflow-x:auto"></div>\n'
            f'<script type="application/json" id="{eid}-data">{payload}</script>\n'
            f"<script>{_ASSET.read_text(encoding='utf-8')}\n"
            f'cmixExplorer("{eid}");</script>')
