"""The book's coursework: exercise checkers, student and instructor editions, grading and a
gradebook. A package beside :mod:`cmixlib`, installed with it, so that the library holds only
what a reader of the library needs.

Each ``check_*`` function takes the reader's function, runs it on a tiny random model (built by
:func:`cmixlib.random_model`, nothing is downloaded) or on random maps, compares the result
with a reference implementation and prints what is right and what is wrong: shape, row sums,
the entries that differ and, where a typical mistake can be recognised, its likely cause
(including, for every map, a transposed map, an off-by-one layer, rows not normalised and
negatives not clipped). Its ``seed`` picks the inputs: the notebook uses seed 0 (the visible
test); the grader adds the instructor's hidden seeds and seeds drawn for each batch.

It returns a :class:`CheckResult` (truthy when everything passed) whose ``status`` is
``passed``, ``failed`` or ``not attempted`` (the starter code still raises
``NotImplementedError``); it never raises on a wrong answer. ``result.messages`` holds the lines.

The exercises themselves live in the chapter notebooks, marked by cell tags; :mod:`.editions`
checks that format and writes the student and instructor editions, :mod:`.grading` grades a
submission from the instructor's copy (the notebook in a sandboxed kernel, :mod:`.sandbox` and
:mod:`.isolation`; the checkers in the grader's own process on the plain numbers the answers
return, :mod:`.harness`; answers that may not be the student's work left to a human,
:mod:`.scan`), :mod:`.gradebook` grades a class and writes the CSV files, the hand-grades file
and the feedback, :mod:`.course` builds the instructors' page and
:mod:`.site` makes the built book hand out the student edition. Command line:
``python -m cmix_course`` (:mod:`.cli`).

Exercises and their checkers
----------------------------
``check_attention_probs(fn)``
    ``fn(layer, hidden) -> (H, n, n)``: the attention weights of one BERT layer from its weights.
``check_ln_decomposition(fn)``
    ``fn(parts, ln) -> (m, d)``: split ``LN(sum(parts))`` into one term per part (plus ``ln.bias``).
``check_rollout(fn)``
    ``fn(maps, add_identity) -> (L, n, n)``: rollout of per-layer maps.
``check_attention_flow(fn)``
    ``fn(maps, i, j, add_identity) -> float``: attention flow, the maximum flow from input token
    ``j`` to token ``i`` at the last layer.
``check_n_res_ln(fn)``
    ``fn(alpha, fx, x, b_O, ln1) -> (n, n)``: the N-ResLN map of one layer from its parts.
``check_value_zeroing_row(fn)``
    ``fn(layer, hidden, i) -> (n,)``: row ``i`` of one layer's Value Zeroing map.
``check_nenc(fn)``
    ``fn(T, q, ln2) -> (n, n)``: GlobEnc's un-normalised N-Enc map from the LN1 vectors.
``check_mixing_ratio(fn)``
    ``fn(T) -> (n,)``: the context-mixing ratio r_i of every token of one layer from its
    vectors T_i(x_j) (norm of the summed context against the token's own vector).
``check_value_bias(fn)``
    ``fn(alpha, b_V, W_O) -> (n, n, d)``: the value bias's part of every F_ij (its rows add up
    to b_V W_O).
``check_alti_row(fn)``
    ``fn(T, y) -> (n,)``: one row of ALTI's normalised contributions.
``check_row_spread(fn)``
    ``fn(C) -> {spread, delta, floor}``: the mean and largest total-variation distance between
    the rows of a map and its common floor sum_j min_i C_ij (why rollout makes rows alike).
``check_grad_x_input(fn)``
    ``fn(model, ids, pos, t_id, f_id) -> (n,)``: gradient × input (L2) at the word embeddings.
``check_integrated_gradients(fn)``
    ``fn(f, x, baseline, n_steps) -> (n,)``: integrated gradients by the midpoint rule (its
    completeness checked).
``check_cls_spearman(fn)``
    ``fn(maps, saliency, normalize) -> (L,)``: Spearman of the rolled-out [CLS] row with saliency.
``check_blank_out(fn)``
    ``fn(model, ids, pos, t_id, f_id, r_id) -> (n,)``: blank-out (erasure) row of an MLM example.
``check_cue_alignment(fn)``
    ``fn(scores, cue_indices) -> (dot, ap, probes_needed)``: chapter 9's scores of one row.
``check_online_codelength(fn)``
    ``fn(probs, labels, bounds) -> (codelength, compression)``: chapter 10's online MDL code.
``check_random_baselines(fn)``
    ``fn(n, c) -> (dot, ap, probes_needed)``: chapter 9's scores of a uniformly random row with
    ``c`` cue tokens, in closed form (the level of the method *Random*).
``check_prior_code(fn)``
    ``fn(labels, bounds, n_classes) -> (codelength, compression)``: chapter 10's online code
    with the add-one rule of the label frequencies in place of a probe.
``check_faithfulness(fn)``
    ``fn(s_method, s_bo, t) -> float``: chapter 11's Spearman of one example with blank-out.
``check_special_rank(fn)``
    ``fn(scores, tokens) -> float``: chapter 12's special-token rank (ALTI Figure 6) of one row.
``check_identity_rollout(fn)``
    ``fn(maps, i) -> (L, n)``: chapter 11's row i of the rollout of ½C + ½I up to each layer
    (its self weight is at least 2^-l).
``check_anisotropy(fn)``
    ``fn(T) -> (r,)``: chapter 12's mean pairwise cosine of each query's transformed vectors.
``check_word_map(fn)``
    ``fn(C, word_ids) -> (m, m)``: chapter 15's word map of a token map (what a word receives
    averaged over its pieces, what it gives summed).
``check_row_entropy(fn)``
    ``fn(C) -> (n,)``: chapter 15's entropy (nats) of every row of a map, a summary of how
    focused a method is.
``check_raw_cls_row(fn)``
    ``fn(norm_maps, row_sums) -> (L, n)``: chapter 13's [CLS] row of GlobEnc's raw rollout,
    rebuilt from the row-normalised maps and their row sums.
``check_causal_rollout(fn)``
    ``fn(maps) -> (L, n, n)``: chapter 16's rollout of causal maps that hold the residual (rows
    normalised, no identity; lower-triangular, rows summing to 1).
``check_logit_explanation(fn)``
    ``fn(target, foil, rollout, p) -> (n,)``: chapter 16's row p of ALTI-Logit's explanation of
    lambda_t - lambda_f from the target's and the foil's terms.

The checkers: :mod:`.checking` (the report and comparison helpers shared by every checker),
:mod:`.layer_exercises` (chapters 2 and 7: one encoder layer), :mod:`.method_exercises`
(chapters 3, 5, 6, 8), :mod:`.flow_exercises` (chapter 3: attention flow),
:mod:`.bias_exercises` (chapter 5: the value bias), :mod:`.ratio_exercises` (chapter 4: the
context-mixing ratio), :mod:`.spread_exercises` (chapter 6: how alike a map's rows are), :mod:`.ig_exercises` (chapter 8:
integrated gradients), :mod:`.norm_exercises` (chapter 4: N-ResLN),
:mod:`.word_exercises` and :mod:`.entropy_exercises` (chapter 15: a token map aggregated
to words, the entropy of a row),
:mod:`.saliency_exercises` (chapters 13, 14: maps against saliency, blank-out),
:mod:`.evaluation_exercises` (chapters 9, 10: cue alignment, online codelength),
:mod:`.chance_exercises` (chapters 9, 10: the random row's scores, the label-frequency code),
:mod:`.faithfulness_exercises` (chapters 11, 12: faithfulness to blank-out, special-token
ranks, anisotropy), :mod:`.rollout_variant_exercises` (chapters 11, 13: rollout with the
identity, the raw rollout's row sums), :mod:`.decoder_exercises` (chapter 16: the causal rollout, ALTI-Logit's
explanation).
"""
from .checking import CheckResult
from .saliency_exercises import (check_blank_out, check_cls_spearman, reference_blank_out,
                                 reference_cls_spearman)
from .layer_exercises import (check_attention_probs, check_ln_decomposition,
                              check_value_zeroing_row, reference_attention_probs,
                              reference_ln_decomposition, reference_value_zeroing_row)
from .norm_exercises import check_n_res_ln, reference_n_res_ln
from .evaluation_exercises import (check_cue_alignment, check_online_codelength,
                                   reference_cue_alignment, reference_online_codelength)
from .faithfulness_exercises import (check_anisotropy, check_faithfulness, check_special_rank,
                                     reference_anisotropy, reference_faithfulness,
                                     reference_special_rank)
from .rollout_variant_exercises import (check_identity_rollout, check_raw_cls_row,
                                        reference_identity_rollout_row,
                                        reference_raw_cls_row)
from .bias_exercises import check_value_bias, reference_value_bias
from .ratio_exercises import check_mixing_ratio, reference_mixing_ratio
from .spread_exercises import check_row_spread, reference_row_spread
from .decoder_exercises import (check_causal_rollout, check_logit_explanation,
                                reference_causal_rollout, reference_logit_explanation)
from .chance_exercises import (check_prior_code, check_random_baselines, reference_prior_code,
                               reference_random_baselines)
from .word_exercises import check_word_map, reference_word_map
from .entropy_exercises import check_row_entropy, reference_row_entropy
from .flow_exercises import check_attention_flow, reference_flow
from .ig_exercises import check_integrated_gradients, reference_integrated_gradients
from .method_exercises import (check_alti_row, check_grad_x_input, check_nenc, check_rollout,
                               reference_alti_row, reference_grad_x_input, reference_nenc,
                               reference_rollout)

__all__ = ["CheckResult", "check_cls_spearman", "check_blank_out", "reference_cls_spearman",
           "reference_blank_out", "check_attention_probs", "check_ln_decomposition", "check_rollout",
           "check_value_zeroing_row", "check_nenc", "check_alti_row", "check_grad_x_input",
           "reference_attention_probs", "reference_ln_decomposition", "reference_rollout",
           "reference_value_zeroing_row", "reference_nenc", "reference_alti_row",
           "reference_grad_x_input", "check_n_res_ln", "reference_n_res_ln",
           "check_cue_alignment", "check_online_codelength", "reference_cue_alignment",
           "reference_online_codelength", "check_faithfulness", "check_special_rank",
           "check_anisotropy", "reference_faithfulness", "reference_special_rank",
           "reference_anisotropy", "check_attention_flow", "reference_flow",
           "check_integrated_gradients", "reference_integrated_gradients",
           "check_value_bias", "reference_value_bias", "check_mixing_ratio",
           "reference_mixing_ratio", "check_row_spread", "reference_row_spread",
           "check_causal_rollout", "check_logit_explanation", "reference_causal_rollout",
           "reference_logit_explanation", "check_random_baselines",
           "reference_random_baselines", "check_prior_code", "reference_prior_code",
           "check_word_map", "reference_word_map", "check_row_entropy",
           "reference_row_entropy",
           "check_identity_rollout", "reference_identity_rollout_row", "check_raw_cls_row",
           "reference_raw_cls_row"]
