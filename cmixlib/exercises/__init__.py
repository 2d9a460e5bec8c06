"""Checkers for the book's exercises.

Each ``check_*`` function takes the reader's function, runs it on a tiny random model (built by
:func:`cmixlib.random_model`, nothing is downloaded) or on random maps, compares the result
with a reference implementation and prints what is right and what is wrong: shape, row sums,
the entries that differ and, where a typical mistake can be recognised, its likely cause.

It returns a :class:`CheckResult` (truthy when everything passed). In a notebook the report is
printed once; ``result.messages`` holds the lines.

Exercises and their checkers
----------------------------
``check_attention_probs(fn)``
    ``fn(layer, hidden) -> (H, n, n)``: the attention weights of one BERT layer from its weights.
``check_ln_decomposition(fn)``
    ``fn(parts, ln) -> (m, d)``: split ``LN(sum(parts))`` into one term per part (plus ``ln.bias``).
``check_rollout(fn)``
    ``fn(maps, add_identity) -> (L, n, n)``: rollout of per-layer maps.
``check_value_zeroing_row(fn)``
    ``fn(layer, hidden, i) -> (n,)``: row ``i`` of one layer's Value Zeroing map.
``check_nenc(fn)``
    ``fn(T, q, ln2) -> (n, n)``: GlobEnc's un-normalised N-Enc map from the LN1 vectors.
``check_alti_row(fn)``
    ``fn(T, y) -> (n,)``: one row of ALTI's normalised contributions.
``check_grad_x_input(fn)``
    ``fn(model, ids, pos, t_id, f_id) -> (n,)``: gradient × input (L2) at the word embeddings.

The package: :mod:`.checking` (the report and comparison helpers shared by every checker),
:mod:`.layer_exercises` (1, 2, 4: one encoder layer), :mod:`.method_exercises` (3, 5, 6, 8).
"""
from .checking import CheckResult
from .layer_exercises import (check_attention_probs, check_ln_decomposition,
                              check_value_zeroing_row, reference_attention_probs,
                              reference_ln_decomposition, reference_value_zeroing_row)
from .method_exercises import (check_alti_row, check_grad_x_input, check_nenc, check_rollout,
                               reference_alti_row, reference_grad_x_input, reference_nenc,
                               reference_rollout)

__all__ = ["CheckResult", "check_attention_probs", "check_ln_decomposition", "check_rollout",
           "check_value_zeroing_row", "check_nenc", "check_alti_row", "check_grad_x_input",
           "reference_attention_probs", "reference_ln_decomposition", "reference_rollout",
           "reference_value_zeroing_row", "reference_nenc", "reference_alti_row",
           "reference_grad_x_input"]
