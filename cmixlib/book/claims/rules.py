"""One place for the claim rules: every claim's test by id, and how an item's verdict follows
from its claims.

* :data:`TESTS` -- test id (the ``test`` of a claim in the papers' JSON files) -> function
  returning an :class:`~cmixlib.book.claims.compare.Outcome` (:mod:`.rules_vz`, :mod:`.rules_alti`,
  :mod:`.rules_vz_probing`, :mod:`.rules_globenc`);
* :func:`evaluate` -- one claim's outcome;
* :func:`claims_verdict` -- the verdict of an item from its claims' outcomes, the headline
  weighted (:data:`CLAIM_VERDICTS`);
* :func:`table_verdict` -- the verdict of an item with printed numbers: its ranking verdict
  (:func:`cmixlib.book.verdicts.ranking_verdict`), overruled by its headline claim.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from cmixlib.book.claims import Claim
from cmixlib.book.claims import rules_alti as A
from cmixlib.book.claims import rules_globenc as G
from cmixlib.book.claims import rules_globenc_layers as GL
from cmixlib.book.claims import rules_vz as V
from cmixlib.book.claims import rules_vz_probing as P
from cmixlib.book.claims.compare import Outcome, not_run, not_tested
from cmixlib.book.runs import run
from cmixlib.book.verdicts import OTHER_MODEL

__all__ = ["TESTS", "CLAIM_VERDICTS", "CLAIM_ONLY", "evaluate", "claims_verdict",
           "table_verdict", "outcome_line", "example_holds"]


def example_holds(row) -> bool:
    """Whether a paper-example claim holds: the run's measurement ``value`` against what the
    claim says, ``op`` ``expected`` (``"=="``: the same text, e.g. the top token or the class;
    ``">"``: a number above, e.g. the target's probability above 0.5). The run
    (:mod:`cmixlib.experiments.examples`) measures; this rule decides."""
    op, value, expected = row["op"], row["value"], row["expected"]
    if op == "==":
        return _text(value) == _text(expected)
    if op == ">":
        return float(value) > float(expected)
    raise ValueError(f"unknown example-claim operator {op!r}")


def _text(v) -> str:
    """A measurement as text, alike whether it came from the run or its CSV (5 == 5.0 == '5')."""
    if v is None or (isinstance(v, float) and v != v):
        return ""
    if isinstance(v, (int, float)) and float(v).is_integer():
        return str(int(v))
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return v
        return str(int(f)) if f.is_integer() else v
    return str(v)


def _example_item(item: str, claim: str | None = None) -> Outcome:
    """A paper-example claim from the ``paper-examples`` run (its claims and evidence:
    :mod:`cmixlib.experiments.examples`): the row named ``claim``, or the item's headline."""
    r = run("paper-examples").result
    r = r[r["item"] == item]
    rows = r[r["claim"] == claim] if claim else r[r["headline"].astype(bool)]
    if rows.empty:
        return not_tested(f"the paper-examples run has no claim {claim or 'headline'!r} for "
                          f"{item!r}")
    row = rows.iloc[0]
    return Outcome("holds" if example_holds(row) else "fails",
                   f"{row['claim']}: {row['evidence']}", "one sentence: no sampling")


def _example_all(item: str) -> Outcome:
    """Every non-headline claim of a paper-example item holds (e.g. each of VZ Table 1's
    examples' annotations)."""
    r = run("paper-examples").result
    r = r[(r["item"] == item) & ~r["headline"].astype(bool)]
    bad = r[~r.apply(example_holds, axis=1).astype(bool)] if len(r) else r
    return Outcome("fails" if len(bad) else "holds",
                   f"{len(r) - len(bad)} of {len(r)} hold" + (": not " + "; not ".join(
                       f"{c} ({e})" for c, e in zip(bad["claim"], bad["evidence"]))
                       if len(bad) else ""), "the paper's examples: no sampling")


#: Every claim test by id.
TESTS: dict[str, Callable[..., Outcome]] = {
    "vz_best_among_mixing": V.vz_best_among_mixing,
    "vz_attention_below_random": V.vz_attention_below_random,
    "vz_norm_above_attention": V.vz_norm_above_attention,
    "vz_above_resln": V.vz_above_resln,
    "vz_gradients_early": V.vz_gradients_early,
    "vz_rollout_benefit": V.vz_rollout_benefit,
    "vz_layerwise_not_good": V.vz_layerwise_not_good,
    "vz_probes_best_among_mixing": V.vz_probes_best_among_mixing,
    "vz_distance_agrees": V.vz_distance_agrees,
    "vz_compression_rises": P.vz_compression_rises,
    "vz_compression_jumps": P.vz_compression_jumps,
    "vz_jumps_where_alignment_rises": P.vz_jumps_where_alignment_rises,
    "vz_table_best": V.vz_table_best,
    "vz_table2_gradients_negative": P.vz_table2_gradients_negative,
    "vz_table2_high": P.vz_table2_high,
    "vz_overall": V.vz_overall,
    "alti_outperforms": A.alti_outperforms,
    "alti_sva_lower": A.alti_sva_lower,
    "alti_depth_rollout": A.alti_depth_rollout,
    "alti_depth_relative": A.alti_depth_relative,
    "alti_fig6_special": A.alti_fig6_special,
    "alti_fig7_most_consistent": A.alti_fig7_most_consistent,
    "alti_fig7_grad_second": A.alti_fig7_grad_second,
    "alti_fig3_close_to_one": A.alti_fig3_close_to_one,
    "alti_fig3_rules": A.alti_fig3_rules,
    "alti_figs8_10": A.alti_figs8_10,
    "alti_overall": A.alti_overall,
    "ge_table1_best": G.ge_table1_best,
    "ge_table1_above": G.ge_table1_above,
    "ge_fig4_encoder": GL.ge_fig4_encoder,
    "ge_table2": G.ge_table2,
    "ge_fig3": G.ge_fig3,
    "ge_fig4": GL.ge_fig4,
    "ge_fig5": GL.ge_fig5,
    "ge_fig1": G.ge_fig1,
    "example_item": _example_item,
    "example_all": _example_all,
    "not_run": not_run,
    "not_tested": not_tested,
}

#: The verdicts of an item decided by claims alone (:func:`claims_verdict`), best first. None
#: of them is a ranking word: a figure without printed numbers ranks nothing.
CLAIM_VERDICTS = ("claims hold", "headline holds", "not decided", "differs", "reversed",
                  "not run")
#: The label of the "ours" column of an item decided by claims alone.
CLAIM_ONLY = "claims only (no printed numbers)"


def evaluate(claim: Claim) -> Outcome:
    """The outcome of ``claim``'s test (:data:`TESTS`) with its ``args``."""
    if claim.test not in TESTS:
        raise KeyError(f"claim {claim.id}: no test {claim.test!r}; known: {', '.join(TESTS)}")
    return TESTS[claim.test](**claim.args)


def claims_verdict(outcomes: Sequence[tuple[Claim, Outcome]]) -> tuple[str, str]:
    """``(verdict, detail)`` of an item from its claims' outcomes. Rule, on the headline claim
    (exactly one per item) and the others:

    * every claim "not run" -> "not run";
    * the headline "reversed" -> "reversed"; "fails" -> "differs";
    * the headline "tie" or "not tested" -> "not decided";
    * the headline holds and every other claim holds (those not tested left out, and named) ->
      "claims hold";
    * the headline holds and others fail: "differs" when at least two of them fail and they are
      more than half of the other tested claims; else "headline holds" (one secondary claim
      alone does not overrule a headline that holds: the failing claim is named in the detail
      and explained in the item's why)."""
    heads = [(c, o) for c, o in outcomes if c.headline]
    if len(heads) != 1:
        raise ValueError(f"an item needs exactly one headline claim, not {len(heads)}")
    head = heads[0][1].outcome
    others = [o.outcome for c, o in outcomes if not c.headline]
    tested = [x for x in others if x not in ("not tested", "not run")]
    held = sum(x == "holds" for x in tested)
    detail = (f"headline {head}; other claims: {held} of {len(tested)} tested hold"
              + (f", {len(others) - len(tested)} not tested" if len(tested) < len(others)
                 else ""))
    if all(o.outcome == "not run" for _, o in outcomes):
        return "not run", detail
    if head in ("reversed",):
        return "reversed", detail
    if head == "fails":
        return "differs", detail
    if head in ("tie", "not tested", "not run"):
        return "not decided", detail
    if held == len(tested):
        return "claims hold", detail
    failed = len(tested) - held
    return ("differs" if failed >= 2 and 2 * held < len(tested) else "headline holds"), detail


def table_verdict(ranking: str, headline: Outcome | None) -> str:
    """The verdict of an item with printed numbers. Rule: the headline claim "fails" or is
    "reversed" -> "differs" (whatever the ranking); a "tie" -> "not decided" (the paper's main
    claim about the item cannot be told on our run, whatever the ranking); the ranking verdict is
    "too few methods"
    (no order of so few methods could be significant) -> the headline decides: holds -> "headline
    holds", tie/not tested -> "not decided"; otherwise the ranking verdict
    (:func:`cmixlib.book.verdicts.ranking_verdict`). "(other model)" is kept."""
    other = ranking.endswith(OTHER_MODEL)
    base = ranking.removesuffix(OTHER_MODEL)
    if headline is not None and headline.outcome in ("fails", "reversed"):
        base = "differs"
    elif headline is not None and headline.outcome == "tie":
        base = "not decided"
    elif base == "too few methods" and headline is not None:
        base = "headline holds" if headline.outcome == "holds" else "not decided"
    return base + (OTHER_MODEL if other and base != "reproduced" else "")


def outcome_line(claim: Claim, outcome: Outcome) -> str:
    """One claim for reading: where, the quote in quotation marks, the outcome, our numbers
    and their uncertainty."""
    head = "HEADLINE " if claim.headline else ""
    return (f'{head}{claim.where}: "{claim.quote}" -> {outcome.outcome.upper()}'
            + (f"; ours: {outcome.ours}" if outcome.ours else "")
            + (f" ({outcome.uncertainty})" if outcome.uncertainty else ""))
