"""The status page's rows decided by claims (:mod:`cmixlib.book.reproduction` lists the items): an
item's claims with their outcomes (:func:`claim_rows`), the row of an item decided by its claims
alone (:func:`claims_item`) and of an item with printed numbers whose ranking row its headline
claim weighs (:func:`with_claims`). Presentation only: no run imports this module."""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import pandas as pd

from cmixlib.book.claims import claims_for
from cmixlib.book.claims.alternatives import alternative_holds, alternative_text
from cmixlib.book.claims.rules import (CLAIM_ONLY, claims_verdict, evaluate, example_holds,
                                       outcome_line, table_verdict)
from cmixlib.book.claims.runs import MAIN_MODEL, same_model, short_model, status_row
from cmixlib.book.runs import CONDITION_LABELS, run
from cmixlib.book.verdicts import with_model_condition

__all__ = ["claim_rows", "claims_text", "with_claims", "claims_item", "fig7_models", "claims_why",
           "EXAMPLE_ITEMS", "example_alternative"]


def claim_rows(paper: str, item: str) -> list:
    """``[(claim, outcome)]`` of the claims about one status row, headline first
    (:func:`cmixlib.book.claims.claims_for`, :func:`cmixlib.book.claims.rules.evaluate`)."""
    return [(c, evaluate(c)) for c in claims_for(paper, item)]


def claims_text(rows) -> str:
    return "\n".join(outcome_line(c, o) for c, o in rows)


def with_claims(paper: str, item: str, assess: Callable[[], dict]) -> Callable[[], dict]:
    """An item with printed numbers: its ranking row, the verdict weighted by the headline claim
    (:func:`cmixlib.book.claims.rules.table_verdict`) and its claims."""
    def wrapped() -> dict:
        row = assess()
        rows = claim_rows(paper, item)
        head = next((o for c, o in rows if c.headline), None)
        verdict = table_verdict(row["verdict"], head)
        if verdict != row["verdict"]:
            row["detail"] = (f"ranking: {row['verdict']}; headline claim {head.outcome} -> "
                             f"{verdict}. {row['detail']}")
        return {**row, "verdict": verdict, "claims": claims_text(rows)}
    return wrapped


def claims_item(paper: str, item: str, name: str,
                condition: str | tuple[str, ...] | None = None,
                 paper_models: str | tuple[str, ...] | None = MAIN_MODEL,
                 paper_value: str = CLAIM_ONLY,
                 model: Callable[[object], str] | None = None) -> Callable[[], dict]:
    """An item decided by its claims alone: :func:`cmixlib.book.claims.rules.claims_verdict`
    (a headline that fails while its declared alternative cause holds,
    :func:`cmixlib.book.claims.alternatives.alternative_holds`, makes it "not decided"),
    "(other model)" unless the run's model is the paper's (``paper_models`` None: the item
    involves no model, e.g. an annotation rule). ``name``/``condition``: the book run whose
    model and size the row shows (a tuple of conditions: the claims test each, and the model
    and accuracy columns name each condition's where they differ); ``model``: the model column
    from the run, where the description alone would hide what ran."""
    conds = condition if isinstance(condition, tuple) else (condition,)

    def assess() -> dict:
        runs = [run(name, c) for c in conds]
        res = runs[0]
        rows = claim_rows(paper, item)
        v, detail = claims_verdict(rows)
        head = next(c for c, _ in rows if c.headline)
        if v == "differs" and detail.startswith("headline fails") and alternative_holds(head):
            v, detail = "not decided", (f"{detail}; the headline's declared alternative cause "
                                        "holds (see the why): the failure may not be the "
                                        "method's")
        same = True if paper_models is None else all(same_model(r, paper_models) for r in runs)
        held = sum(o.outcome == "holds" for _, o in rows)
        row = status_row(res, (with_model_condition(v, same), detail), paper_value,
                         f"{held} of {len(rows)} claims hold")
        if len(runs) > 1:
            each = [status_row(r, ("", "")) for r in runs]
            for key in ("model", "accuracy"):
                vals = [e[key] for e in each]
                if len(set(map(str, vals))) > 1:
                    row[key] = " | ".join(f"{CONDITION_LABELS.get(c, c)}: {v}"
                                          for c, v in zip(conds, vals))
        if paper_models is None:
            row["model"], row["accuracy"] = None, ""        # no model: the rules
        elif model is not None:
            row["model"] = model(res)
        return {**row, "claims": claims_text(rows)}
    return assess


def fig7_models(res) -> str:
    """ALTI Figure 7's two models by what they are: A, and B the distilled student (the paper:
    BERT and DistilBERT, its distilled student)."""
    m = res.frames["models"].set_index("model")
    short = {k: short_model(m.loc[k, "description"]) for k in m.index}
    return (f"A: {short['A']} ({int(m.loc['A', 'layers'])} layers) | B: the distilled student "
            f"of A ({int(m.loc['B', 'layers'])} layers; the paper's B: DistilBERT)")


#: The papers' example items of the ``paper-examples`` run, by (paper, item): the run's item.
EXAMPLE_ITEMS = {("Value Zeroing", "Table 1"): "VZ Table 1",
                 ("Value Zeroing", "Figure 4, Figures A.5-A.18"): "VZ Figure 4",
                 ("ALTI", "Tables 1, 3-9"): "ALTI Tables 1, 3-9"}
#: Words of the run's rows that state what the model predicts on an example sentence.
_PREDICTION_WORDS = (" predicts ", " picks ", " prefers ")


def example_alternative(res, paper: str, item: str, failing: Sequence[str] = ()) -> str:
    """The alternative cause of an item whose run states no accuracy: for the papers' example
    sentences (:data:`EXAMPLE_ITEMS`), that the model does not do the task on them, told apart
    by its predictions there (the run's prediction rows); for an item with no prediction rows
    (VZ Table 1: an annotation, no model), that the parse differs from the authors', which the
    run cannot tell apart (said so). ``failing``: the texts of the claims that fail; the
    predictions on the sentences of the tables they name are reported on their own."""
    frame = getattr(res, "result", None)
    key = EXAMPLE_ITEMS.get((paper, item))
    if key is None or frame is None or "claim" not in getattr(frame, "columns", ()):
        return "Alternative cause: not told apart: the run states no accuracy."
    rows = frame[frame["item"] == key]
    pred = rows[rows["claim"].map(lambda c: any(w in f" {c} " for w in _PREDICTION_WORDS))]
    if pred.empty:
        return ("Alternative cause: another parse or other annotation rules than the authors' "
                "(the paper names spaCy, not its model, version or rules); not told apart: "
                "the run has no annotation of theirs beyond these examples.")
    held = pred.apply(example_holds, axis=1).astype(bool)
    wrong = "; ".join(f"not as the paper says: {c} (ours: {e})" for c, e in zip(
        pred.loc[~held, "claim"], pred.loc[~held, "evidence"]))
    text = (f"Alternative cause: the model does not do the task on these sentences; told apart "
            f"by its predictions there: {int(held.sum())} of {len(pred)} as the paper says"
            + (f" ({wrong})" if wrong else ""))
    tables = set().union(*(_tables(c) for c in failing)) if failing else set()
    own = pred[pred["claim"].map(lambda c: bool(_tables(c) & tables))]
    if len(own):
        ok = own.apply(example_holds, axis=1).astype(bool)
        text += (f"; on the failing claim's own sentence ({', '.join(sorted(tables))}): "
                 + "; ".join(f"{c} ({'as the paper says' if k else 'not as the paper says'})"
                             for c, k in zip(own["claim"], ok)))
    return text + "."


def _tables(text: str) -> set[str]:
    """The tables a claim's text names ("Tables 1, 5: ..." -> {"Table 1", "Table 5"})."""
    out = set()
    for group in re.findall(r"Tables? ((?:\d+(?:, | and )?)+)", text):
        out.update(f"Table {n}" for n in re.findall(r"\d+", group))
    return out


def claims_why(paper: str, item: str, name: str, condition: str | None = None, *,
               secondary_only: bool = False):
    """``(sentence, evidence)`` for an item decided by its claims: the claims that fail or are
    reversed (none: those that tie), each with our numbers; then, for each of them that declares
    an alternative cause (:attr:`cmixlib.book.claims.Claim.alternative`), that cause and the
    measurement that tells it apart (:func:`cmixlib.book.claims.rules.alternative_text`). Where
    none declares one: the model does not do the task the claims assume, told apart by its
    accuracy (the status row's) or, for the papers' example sentences, by its predictions on
    them (:func:`example_alternative`). Evidence: every claim with its outcome.
    ``secondary_only``: the failing claims other than the headline (an item whose own why
    explains its headline)."""
    rows = claim_rows(paper, item)
    pool = [(c, o) for c, o in rows if not (secondary_only and c.headline)]
    bad = [(c, o) for c, o in pool if o.outcome in ("fails", "reversed")] or [
        (c, o) for c, o in pool if o.outcome == "tie" and not secondary_only]
    text = ("; ".join(f"{o.outcome}: {c.where} ({c.id}): {o.ours}" for c, o in bad)
            or "no claim fails") + "."
    alts = [t for t in (alternative_text(c) for c, _ in bad) if t]
    if alts:
        text += " " + " ".join(a if a.endswith(".") else a + "." for a in alts)
    else:
        res = run(name, condition)
        acc = status_row(res, ("", ""))["accuracy"]
        text += " " + (f"Alternative cause: the model does not do the task the claims assume; "
                       f"told apart by its accuracy: {acc}." if acc
                       else example_alternative(res, paper, item, [o.ours for _, o in bad]))
    ev = pd.DataFrame([{"claim": c.id, "where": c.where, "headline": c.headline,
                        "outcome": o.outcome, "ours": o.ours} for c, o in rows])
    return text, ev.set_index("claim")
