"""What :func:`cmixlib.context_mixing` returns for one sentence: :class:`MixingResult`, the maps
by method (a ``dict``, so ``maps["alti"]`` reads as always) that also carries the sentence's
tokens and ids, its words, the model it came from and the options it was computed with, and can
be saved, loaded and aggregated to words and layers, plotted (:meth:`MixingResult.plot`) and
explored in a browser (:meth:`MixingResult.to_html`); both views need the ``plot`` extra
(matplotlib) and live in :mod:`cmixlib.plotting.result_views`.

Word-level maps (:meth:`MixingResult.aggregate`): with :math:`W_a` the pieces of word
:math:`a` (a special token is a word of its own),

.. math:: C^{\\ell}_{ab} = \\frac{1}{|W_a|} \\sum_{i \\in W_a} \\sum_{j \\in W_b} C^{\\ell}_{ij},

what a word receives is the mean over its pieces and what it gives the sum over its pieces, so
rows that sum to 1 still do.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from cmixlib.methods.alti_logit import AltiLogit
from cmixlib.validation import InputError, check_positions

__all__ = ["MixingResult", "FORMAT", "VIEWS", "EXTRA_TYPES"]

#: The ``format`` written in a saved result's metadata (:meth:`MixingResult.save`).
FORMAT = "cmixlib.MixingResult/1"
#: Where :meth:`MixingResult.plot` and :meth:`MixingResult.to_html` find their code, by name
#: (as pandas finds its plotting backend): the views are presentation
#: (:mod:`cmixlib.plotting`), which no computing module imports, and need the ``plot`` extra.
VIEWS = "cmixlib.plotting.result_views"
#: The types an entry of ``MixingResult.extras`` may have (saved field by field).
EXTRA_TYPES = {"AltiLogit": AltiLogit}


class MixingResult(dict):
    """Maps of one sentence by method, ``{name: (L, n, n) array}`` (row i receives, column j
    gives), with what produced them:

    ``tokens`` (n token strings, or None without a tokenizer), ``input_ids`` ((n,) ints),
    ``word_ids`` (per token the index of its word, None for a special token; None when unknown:
    ids given without text), ``model`` (the model's description), ``options`` (the methods and
    options of the call), ``layers`` (the layer numbers of the maps, 1-based), ``text`` (the
    sentence as given, None for ids), ``family`` (``"encoder"`` or ``"decoder"``), ``extras``
    (what a method returns beside its maps: ``extras["alti_logit"]``, a decoder's
    :class:`~cmixlib.methods.alti_logit.AltiLogit` with the logit, the per-token terms, the
    remainder and the target used).

    Examples
    --------
    >>> import torch, cmixlib
    >>> res = cmixlib.context_mixing(cmixlib.random_model("bert", layers=2), None,
    ...                              {"input_ids": torch.tensor([1, 5, 6, 2])}, ["alti"])
    >>> res["alti"].shape, res.layers, res.input_ids.tolist()
    ((2, 4, 4), [1, 2], [1, 5, 6, 2])
    >>> res.aggregate(layers=[-1])["alti"].shape       # the last layer only
    (1, 4, 4)
    >>> res.to_html().startswith('<div id="cmix-result-')   # the explorer (plot extra)
    True
    """

    def __init__(self, maps: dict[str, np.ndarray], *, input_ids: Sequence[int] | None = None,
                 tokens: Sequence[str] | None = None, word_ids: Sequence[int | None] | None = None,
                 model: str = "", options: dict[str, Any] | None = None,
                 layers: Sequence[int] | None = None, text: str | None = None,
                 family: str | None = None, extras: dict[str, Any] | None = None):
        super().__init__(maps)
        self.text = text
        self.family = family
        self.extras = dict(extras or {})
        self.input_ids = None if input_ids is None else np.asarray(input_ids, dtype=np.int64)
        self.tokens = None if tokens is None else list(tokens)
        self.word_ids = None if word_ids is None else list(word_ids)
        self.model = model
        self.options = dict(options or {})
        first = next(iter(maps.values()), None)
        n_layers = 0 if first is None else int(np.shape(first)[0])
        self.layers = list(range(1, n_layers + 1)) if layers is None else [int(x) for x in layers]

    def __repr__(self) -> str:
        n = None if self.input_ids is None else len(self.input_ids)
        return (f"MixingResult(methods={list(self)}, n={n}, layers={self.layers}, "
                f"model={self.model!r})")

    # ------------------------------------------------------------------ views
    def plot(self, method: str | Sequence[str] | None = None,
             layer: int | Sequence[int] | None = -1, head: int | Sequence[int] | None = None,
             **kwargs: Any):
        """A matplotlib figure of the maps, one panel per method and layer (methods in rows,
        layers in columns), the tokens on both axes: ``method`` a name, a list or None (all);
        ``layer`` an index into :attr:`layers` (default -1, the last), a list or None (all);
        ``head`` (per-head maps, ``heads=True``) a head index, a list or None (every head).
        Keywords go to :func:`cmixlib.plotting.plot_layer_maps`. Needs the ``plot`` extra."""
        return importlib.import_module(VIEWS).plot_result(self, method, layer, head=head,
                                                          **kwargs)

    def to_html(self, **kwargs: Any) -> str:
        """The book's explorer on this sentence, as one self-contained HTML fragment (the maps
        packed in the page, no script fetched: works offline; in a notebook
        ``IPython.display.HTML(res.to_html())``). Maps with negative values (ALTI-Logit) are
        left out of the page, and named in its note; of per-head maps (``heads=True``), the
        attention heads go under the page's head control (the layer map: their mean, the
        head-averaged attention), the others are left out and named. Several results on one page:
        :func:`cmixlib.plotting.result_views.results_html`. Needs the ``plot`` extra."""
        return importlib.import_module(VIEWS).results_html(self, **kwargs)

    # ------------------------------------------------------------------ aggregation
    def aggregate(self, *, words: bool = False, layers: Sequence[int] | None = None,
                  heads: Sequence[int] | str | None = None) -> "MixingResult":
        """A new result: with ``words``, maps between words (module docstring: rows averaged
        over a word's pieces, columns summed), the tokens joined into words; with ``layers``,
        only those layers (0-based indices into the maps, negative from the last); with
        ``heads`` (a result of ``heads=True``, maps (L, H, n, n)), only those heads (indices),
        or ``"mean"``: the mean over heads, :math:`\\bar C_{ij} = \\frac{1}{H}\\sum_h C^h_{ij}`,
        (L, n, n) (for attention that is the per-layer map; for N, ALTI and Value Zeroing it is
        the heads' average, not the per-layer method).

        The ``extras`` are not carried over (their terms are per token and per layer of the
        whole result). ``words=True`` needs ``word_ids`` (a result of raw text with a fast tokenizer); a
        result of ids is refused (:class:`~cmixlib.InputError`) rather than guessed from token
        strings."""
        out = {k: np.asarray(v) for k, v in self.items()}
        kept = self.layers
        if layers is not None:
            idx = check_positions(layers, len(self.layers), "layers", negative=True)
            out = {k: v[idx] for k, v in out.items()}
            kept = [self.layers[i] for i in idx]
        if heads is not None:
            if not self.options.get("heads") or any(np.ndim(v) != 4 for v in out.values()):
                raise InputError("heads= needs per-head maps: compute them with "
                                 "context_mixing(..., heads=True).")
            if isinstance(heads, str):
                if heads != "mean":
                    raise InputError(f"heads must be head indices or 'mean', got {heads!r}.")
                out = {k: v.mean(axis=1) for k, v in out.items()}
            else:
                n_heads = next(iter(out.values())).shape[1]
                idx = check_positions(heads, n_heads, "heads", negative=True)
                out = {k: v[:, idx] for k, v in out.items()}
        tokens, ids, word_ids = self.tokens, self.input_ids, self.word_ids
        if words:
            if self.word_ids is None:
                raise InputError("This result has no word boundaries (it was computed from token "
                                 "ids, or with a slow tokenizer): pass the raw text to "
                                 "context_mixing with a fast tokenizer to aggregate to words.")
            groups = _word_groups(self.word_ids)
            P = np.zeros((len(groups), len(self.word_ids)))
            for a, pieces in enumerate(groups):
                P[a, pieces] = 1.0
            mean = P / P.sum(1, keepdims=True)
            out = {k: np.einsum("ai,...ij,bj->...ab", mean, v, P) for k, v in out.items()}
            if self.tokens is not None:
                tokens = [_join_pieces([self.tokens[i] for i in g]) for g in groups]
            ids, word_ids = None, list(range(len(groups)))
        opts = dict(self.options, aggregated={"words": bool(words), "layers": kept,
                                              "heads": heads})
        if heads == "mean":
            opts["heads"] = False
        return MixingResult(out, input_ids=ids, tokens=tokens, word_ids=word_ids,
                            model=self.model, options=opts, layers=kept, text=self.text,
                            family=self.family)

    # ------------------------------------------------------------------ saving
    def save(self, path: str | Path) -> Path:
        """Write the result to ``path`` (a ``.npz`` file: the maps, and the rest as JSON);
        :meth:`load` reads it back equal. Returns the path written."""
        path = Path(path)
        if path.suffix != ".npz":
            path = path.with_suffix(".npz")
        meta = {"format": FORMAT, "methods": list(self), "model": self.model,
                "options": _jsonable(self.options), "layers": self.layers,
                "tokens": self.tokens, "word_ids": self.word_ids, "text": self.text,
                "family": self.family,
                "input_ids": None if self.input_ids is None else self.input_ids.tolist()}
        arrays = {f"map_{k}": np.asarray(v) for k, v in enumerate(self.values())}
        meta["extras"] = {}
        for name, value in self.extras.items():
            kind = type(value).__name__
            if EXTRA_TYPES.get(kind) is not type(value):
                raise InputError(f"extras[{name!r}] is a {kind}; save() writes "
                                 f"{', '.join(EXTRA_TYPES)} extras only.")
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            meta["extras"][name] = {"type": kind, "none": [k for k, v in fields.items()
                                                           if v is None]}
            arrays.update({f"extra_{name}_{k}": np.asarray(v) for k, v in fields.items()
                           if v is not None})
        np.savez_compressed(path, meta=np.array(json.dumps(meta)), **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "MixingResult":
        """A result written by :meth:`save`."""
        with np.load(Path(path), allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("format") != FORMAT:
                raise InputError(f"{path} is not a saved MixingResult (format "
                                 f"{meta.get('format')!r}, expected {FORMAT!r}).")
            maps = {name: z[f"map_{k}"] for k, name in enumerate(meta["methods"])}
            extras = {}
            for name, about in meta.get("extras", {}).items():
                kind = EXTRA_TYPES[about["type"]]
                extras[name] = kind(**{f.name: None if f.name in about["none"]
                                       else z[f"extra_{name}_{f.name}"]
                                       for f in dataclasses.fields(kind)})
        return cls(maps, input_ids=meta["input_ids"], tokens=meta["tokens"],
                   word_ids=meta["word_ids"], model=meta["model"], options=meta["options"],
                   layers=meta["layers"], text=meta.get("text"), family=meta.get("family"),
                   extras=extras)


def _word_groups(word_ids: Sequence[int | None]) -> list[list[int]]:
    """Token positions grouped by word, in order; a token without a word (special) alone."""
    groups: list[list[int]] = []
    last = object()
    for i, w in enumerate(word_ids):
        if w is None or w != last:
            groups.append([i])
        else:
            groups[-1].append(i)
        last = w if w is not None else object()
    return groups


def _join_pieces(pieces: list[str]) -> str:
    """A word from its pieces (WordPiece ``##``, SentencePiece / byte-level markers dropped)."""
    text = pieces[0] + "".join(p[2:] if p.startswith("##") else p for p in pieces[1:])
    return text.replace("\u2581", "").replace("\u0120", "") or text


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)
