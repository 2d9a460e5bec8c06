"""A run as the status page shows it: the model that ran (short names, exact model-id
comparison with the paper's), its accuracy, its size beside the paper's
(:data:`PAPER_RUN_SIZES`), and the common columns of a status row (:func:`status_row`).
Presentation only: no run imports this module."""
from __future__ import annotations

from functools import lru_cache

from cmixlib.data import paper_numbers as pn
from cmixlib.book.identity import (is_fallback, model_identities, model_ids, parse_model_text,
                                   stated_accuracies)
from cmixlib.book.runs import CONDITION_LABELS, mlm_condition_metrics
from cmixlib.models.classifiers import ASSET_DIR, read_manifest
from cmixlib.models.loading import DEFAULT_MODEL

__all__ = ["MAIN_MODEL", "PAPER_RUN_SIZES", "short_model", "short_models", "show_size",
           "same_model_id", "same_model", "accuracies", "status_row", "size_note"]

#: The papers' main model (the library's default model): the only one whose numbers ours can
#: "reproduce".
MAIN_MODEL = DEFAULT_MODEL


def short_model(description: str) -> str:
    """The model part of a run's description, for reading: "sst2: X (...) | sva: Y (...)" ->
    "sst2: X | sva: Y", with "fine-tuned" kept when the description says so; parts that name
    the same model are merged ("X (fine-tuned; sst2, mnli)"), and a "sentence-transformers/"
    organisation is dropped (display only: the verdicts compare the full ids). The parts are
    read by :func:`cmixlib.book.identity.parse_model_text` (:func:`short_models` takes them)."""
    return short_models(parse_model_text(description))


def short_models(identities: list[dict]) -> str:
    """:func:`short_model` of a run's identities (:func:`cmixlib.book.identity.model_identities`):
    each model's ``id`` (after its ``key``, where it has one) with " (fine-tuned)" when its
    ``variant`` says "fine-tuned"."""
    parts = []
    for ident in identities:
        name = str(ident["id"])
        if "fine-tuned" in str(ident.get("variant") or "") and "fine-tuned" not in name:
            name += " (fine-tuned)"
        name = name.replace("sentence-transformers/", "")
        parts.append(f"{ident['key']}: {name}" if ident.get("key") else name)
    keyed = [p.partition(": ") for p in parts]
    if len(parts) > 1 and all(sep for _, sep, _ in keyed) and len({m for *_, m in keyed}) == 1:
        model, keys = keyed[0][2], ", ".join(k for k, _, _ in keyed)
        return (model[:-1] + f"; {keys})" if model.endswith(")") else f"{model} ({keys})")
    return " | ".join(parts)


def show_size(size) -> str:
    """A run's data size for reading: 1106 -> "1,106"; {"sst2": 500, "sva": 500} -> "sst2 500,
    sva 500" (never a dict repr); None -> ""."""
    if size is None:
        return ""
    if isinstance(size, dict):
        return ", ".join(f"{k} {show_size(v)}" for k, v in size.items())
    return f"{size:,}" if isinstance(size, int) else str(size)


#: Organisations the Hub moved the papers' legacy model ids under ("bert-base-uncased" is now
#: also "google-bert/bert-base-uncased"): the only prefix ``_model_id`` drops.
_LEGACY_ORGS = ("google-bert", "distilbert", "FacebookAI", "openai-community")


def _model_id(name: str) -> str:
    """A Hub model id without a legacy organisation prefix (``_LEGACY_ORGS``)."""
    name = name.strip()
    org, _, rest = name.partition("/")
    return rest if rest and org in _LEGACY_ORGS else name


def same_model_id(a: str, b: str) -> bool:
    """Rule: two model ids name the same model iff they are equal after dropping a legacy
    organisation prefix -- never a substring test ("bert-base-uncased" is inside
    "distilbert-base-uncased")."""
    return _model_id(a) == _model_id(b)


def same_model(res, paper_models: str | tuple[str, ...] = MAIN_MODEL) -> bool:
    """Rule: the run is of the paper's model iff no model of it is an offline fallback and each
    model's id is exactly the paper's (:func:`same_model_id`), read from the run's identity
    (:func:`cmixlib.book.identity.model_identities`): with one id, every model must be it; with
    a tuple, model i must be ``paper_models[i]`` (ALTI Figure 7: BERT, then DistilBERT)."""
    if is_fallback(res.meta):
        return False
    ids = model_ids(res.meta)
    want = (paper_models,) * len(ids) if isinstance(paper_models, str) else paper_models
    return len(ids) == len(want) and all(same_model_id(a, b) for a, b in zip(ids, want))


#: The data each paper's evaluation ran on, by the experiment that redoes it (beside our run's
#: size on the page). VZ §4.1: 4,276 BLiMP data points "divide[d] equally into Train and Test
#: sets"; ALTI §4: "500 random samples"; GlobEnc: "the validation set" of each task (dataset
#: sizes: SST-2 dev 872, MNLI dev-matched 9,815, HateXplain validation 1,922).
PAPER_RUN_SIZES = {
    "vz-cue-alignment": "Test set, 2,138", "vz-distance-ablation": "Test set, 2,138",
    "vz-mdl-probing": "Test set, 2,138", "vz-faithfulness": "Test set, 2,138",
    "vz-rollout-depth": "(beyond the paper)", "alti-table2": "500 per task",
    "alti-fig6-special-ranks": "500 (SST-2)", "alti-fig3-anisotropy": "500 (SST-2)",
    "alti-fig7-consistency": "SST-2 sentences both models classify alike (count not printed)",
    "alti-figs8-10-homogeneity": "one sentence (the figures)",
    "globenc-correlations": "SST-2 872, MNLI 9,815, HateXplain 1,922",
    "globenc-fig4-hta": "not printed", "paper-example-claims": "the papers' sentences",
}


def size_note(res) -> str:
    """Why a run's size differs from the paper's where the run itself chose its data: GlobEnc's
    MNLI rows are the committed classifier's held-out dev-matched rows (the data description of
    its manifest, :func:`cmixlib.models.classifiers.read_manifest`); "" elsewhere."""
    if res.meta.get("experiment") != "globenc-correlations":
        return ""
    if "mnli" not in ((res.meta.get("settings") or {}).get("tasks") or []):
        return ""
    data = read_manifest(ASSET_DIR / "mnli").get("data") or {}
    text = str(data.get("description") or "").removeprefix("MNLI: ")
    return f" (MNLI, the classifier's split: {text})" if text else ""


def accuracies(meta) -> str:
    """The accuracies a run states for its models (:func:`cmixlib.book.identity.stated_accuracies`
    of its metadata ``meta``), per model ("sst2 0.516, mnli 0.281"; a model without a key: the
    number alone); "" when it states none."""
    return ", ".join((f"{key} " if key else "") + f"{acc:.3f}"
                     for key, acc in stated_accuracies(meta))


@lru_cache(maxsize=None)
def _mlm_accuracy(condition: str) -> str:
    m = mlm_condition_metrics(condition)
    return (f"BLiMP agreement {m['agreement_accuracy_test']:.2f} on {m['n_agreement_test']:,} "
            f"(paper {pn.VZ_MLM_ACCURACY[condition]:.2f})")


def status_row(res, verdict: tuple[str, str], paper: str = "", ours: str = "") -> dict:
    """The common columns of a status row for result ``res``: ``verdict`` (the pair verdict,
    detail), the paper's value and ours as given, the models that ran (:func:`short_models`),
    the run's size beside the paper's (:data:`PAPER_RUN_SIZES`) and the accuracy (a Value
    Zeroing run: the MLM's BLiMP agreement accuracy beside the paper's; else
    :func:`accuracies`)."""
    exp = res.meta.get("experiment", "")
    cond = (res.meta.get("settings") or {}).get("condition")
    acc = (_mlm_accuracy(cond) if exp.startswith("vz-") and cond in CONDITION_LABELS
           else accuracies(res.meta))
    return {"verdict": verdict[0], "detail": verdict[1], "paper value": paper, "ours": ours,
            "model": short_models(model_identities(res.meta)),
            "n": show_size(res.meta["data_size"]) + size_note(res),
            "paper n": PAPER_RUN_SIZES.get(exp, ""), "accuracy": acc}
