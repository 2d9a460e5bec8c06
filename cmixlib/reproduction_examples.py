"""Status rows of the papers' example items and of ALTI's Figures 8-10 (for
:mod:`cmixlib.reproduction`), and the verdict of the items that hold no result.

* the example items (Value Zeroing Table 1 and Figure 4, ALTI Tables 1 and 3-9, GlobEnc
  Figure 1) are scored by the claims the papers make about them, from the book run
  "paper-examples" (:mod:`cmixlib.experiments.examples`), with
  :func:`cmixlib.verdicts.claims_verdict` and the item's headline claim;
* ALTI Figures 8-10 by the homogeneity claims of
  :func:`~cmixlib.experiments.alti_layers.figs8_10_claims`, from the book run "alti-figs8-10";
* diagrams and example maps the papers draw without a claim get the verdict
  :data:`NO_CLAIM` with what they show and where the book draws its own.
"""
from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from .verdicts import NO_CLAIM, claims_verdict, with_model_condition

__all__ = ["NO_CLAIM", "no_claim", "example_item", "alti_figs8_10"]

def no_claim(what: str) -> str:
    """The detail of a :data:`NO_CLAIM` item: what it is and where the book draws it."""
    return f"{NO_CLAIM}: {what}"


def _rows_for(frame: pd.DataFrame, item: str) -> pd.DataFrame:
    rows = frame[frame["item"] == item]
    if rows.empty:
        raise KeyError(f"no claims of {item!r} in the run")
    return rows


def example_item(item: str) -> Callable[[], dict]:
    """The status row of example item ``item`` (a key of
    :data:`cmixlib.experiments.examples.EXAMPLE_HEADLINES`). Rule: :func:`claims_verdict` of the
    item's claims with its headline; "(other model)" unless the item involves no model (the
    annotation of Value Zeroing's Table 1: its model column stays empty) or the model is the
    paper's (exact ids,
    :func:`cmixlib.reproduction.same_model_id`)."""
    def assess() -> dict:
        from .book_runs import run
        from .reproduction import MAIN_MODEL, _run_models, _short_model, same_model_id, show_size

        res = run("paper-examples")
        rows = _rows_for(res.result, item)
        claims = pd.Series(rows["holds"].to_numpy(), index=rows["claim"])
        headline = str(rows.loc[rows["headline"], "claim"].iloc[0])
        verdict, detail = claims_verdict(claims, headline=headline)
        model = rows["model"].iloc[0]
        model = "" if pd.isna(model) else str(model)       # "" (NaN once cached): no model
        if model:
            same = "offline fallback" not in model and all(
                same_model_id(m, MAIN_MODEL) for m in _run_models(model))
            verdict = with_model_condition(verdict, same)
        evidence = "; ".join(f"{c}: {e}" for c, e in zip(rows["claim"], rows["evidence"]))
        return {"verdict": verdict, "detail": f"{detail}. Evidence: {evidence}",
                "paper value": "the caption's and text's claims",
                "ours": f"{int(rows['holds'].sum())} of {len(rows)} claims hold",
                "model": _short_model(model) if model else None,    # no model: the rules
                "n": show_size(len(rows)) + " claims"}
    return assess


def alti_figs8_10() -> dict:
    """The status row of ALTI Figures 8-10: :func:`claims_verdict` of
    :func:`cmixlib.experiments.alti_layers.figs8_10_claims` with its headline, "(other model)"
    as every run of another model than the paper's."""
    from .book_runs import run
    from .experiments.alti_layers import FIGS8_10_HEADLINE, figs8_10_claims
    from .reproduction import _claims_row

    res = run("alti-figs8-10")
    r = res.result
    last = int(r["layer"].max())
    h = r[r["layer"] == last].set_index("method")["homogeneity"]
    ours = (f"last-layer homogeneity: attention rollout {h['attention_rollout']:.2f}, "
            f"ALTI {h['alti']:.2f}")
    return _claims_row(res, figs8_10_claims(r), FIGS8_10_HEADLINE, "maps (no numbers)", ours)
