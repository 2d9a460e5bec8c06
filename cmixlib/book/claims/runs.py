"""A run as the status page shows it: the model that ran (short names, exact model-id
comparison with the paper's), its accuracy, its size beside the paper's
(:data:`PAPER_RUN_SIZES`), and the common columns of a status row (:func:`status_row`).
Presentation only: no run imports this module."""
from __future__ import annotations

import re
from functools import lru_cache

from cmixlib.data import paper_numbers as pn
from cmixlib.book.runs import CONDITION_LABELS
from cmixlib.models.loading import DEFAULT_MODEL

__all__ = ["MAIN_MODEL", "PAPER_RUN_SIZES", "short_model", "show_size", "same_model_id",
           "run_models", "same_model", "accuracies", "status_row"]

#: The papers' main model (the library's default model): the only one whose numbers ours can
#: "reproduce".
MAIN_MODEL = DEFAULT_MODEL


def short_model(description: str) -> str:
    """The model part of a run's description, for reading: "sst2: X (...) | sva: Y (...)" ->
    "sst2: X | sva: Y", with "fine-tuned" kept when the description says so; parts that name
    the same model are merged ("X (fine-tuned; sst2, mnli)"), and a "sentence-transformers/"
    organisation is dropped (display only: the verdicts compare the full ids)."""
    parts = []
    for part in str(description).split(" | "):
        name = part.split(" (")[0]
        if "fine-tuned" in part and "fine-tuned" not in name:
            name += " (fine-tuned)"
        parts.append(name.replace("sentence-transformers/", ""))
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


def run_models(description: str) -> list[str]:
    """The model ids of a run's description, one per part ("sst2: X (...) | sva: Y (...)" ->
    [X, Y]; "A: X (...) | B: Y (...)" -> [X, Y]): a part's "key: " prefix (one word) and
    everything from its " (" on are dropped."""
    ids = []
    for part in str(description).split(" | "):
        key, sep, rest = part.partition(": ")
        if sep and " " not in key and "(" not in key:
            part = rest
        ids.append(part.split(" (")[0].strip())
    return ids


def same_model(res, paper_models: str | tuple[str, ...] = MAIN_MODEL) -> bool:
    """Rule: the run is of the paper's model iff its description has no offline fallback (the
    marker :meth:`cmixlib.ModelBundle.describe` writes) and each part's model id is exactly the
    paper's (:func:`same_model_id`): with one id, every part must be it; with a tuple, part i
    must be ``paper_models[i]`` (ALTI Figure 7: BERT, then DistilBERT)."""
    text = str(res.meta["model"])
    if "offline fallback" in text:
        return False
    ids = run_models(text)
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
_ACC = re.compile(r"accuracy ([0-9.]+)")


def accuracies(description: str) -> str:
    """The accuracies a run's model description states, per part ("sst2: X (...); accuracy
    0.516 | mnli: ..." -> "sst2 0.516, mnli 0.281"); "" when it states none."""
    out = []
    for part in str(description).split(" | "):
        key, sep, _ = part.partition(": ")
        m = _ACC.search(part)
        if m:
            out.append((f"{key} " if sep and " " not in key else "") + m.group(1))
    return ", ".join(out)


@lru_cache(maxsize=None)
def _mlm_accuracy(condition: str) -> str:
    from cmixlib.book.runs import mlm_condition_metrics

    m = mlm_condition_metrics(condition)
    return (f"BLiMP agreement {m['agreement_accuracy_test']:.2f} on {m['n_agreement_test']:,} "
            f"(paper {pn.VZ_MLM_ACCURACY[condition]:.2f})")


def status_row(res, verdict: tuple[str, str], paper: str = "", ours: str = "") -> dict:
    exp = res.meta.get("experiment", "")
    cond = (res.meta.get("settings") or {}).get("condition")
    acc = (_mlm_accuracy(cond) if exp.startswith("vz-") and cond in CONDITION_LABELS
           else accuracies(res.meta["model"]))
    return {"verdict": verdict[0], "detail": verdict[1], "paper value": paper, "ours": ours,
            "model": short_model(res.meta["model"]), "n": show_size(res.meta["data_size"]),
            "paper n": PAPER_RUN_SIZES.get(exp, ""), "accuracy": acc}
