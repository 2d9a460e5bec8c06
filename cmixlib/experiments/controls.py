"""The sanity baselines ("controls") of the faithfulness and correlation tables: scores a
method must beat to mean anything (:data:`cmixlib.book.verdicts.SANITY_BASELINES`)."""
from __future__ import annotations

import numpy as np

from cmixlib.gradients import random_scores

__all__ = ["CONTROLS", "control_scores", "control_seed"]

#: The controls, in the order the tables show them.
CONTROLS = ("random", "nearness")


def control_seed(seed: int, index: int) -> int:
    """The random control's seed of example ``index`` of a run with ``seed`` (as
    ``cmixlib.experiments.common.batched_rows``): ``seed * 100003 + index``."""
    return int(seed) * 100003 + int(index)


def control_scores(n: int, target: int, seed: int,
                   controls=CONTROLS) -> dict[str, np.ndarray]:
    r"""The control scores of one example of ``n`` tokens whose explained position is ``target``
    ([MASK], or 0 for [CLS]): ``"random"``, uniform(0, 1) from ``default_rng(seed)``
    (:func:`cmixlib.gradients.random_scores`), and ``"nearness"``,
    :math:`s_j = -\lvert j - t\rvert` (for [CLS]: earlier tokens score higher)."""
    unknown = [c for c in controls if c not in CONTROLS]
    if unknown:
        raise ValueError(f"Unknown control(s) {unknown}; choose from {list(CONTROLS)}.")
    out = {"random": lambda: random_scores(int(n), seed=int(seed)),
           "nearness": lambda: -np.abs(np.arange(int(n)) - int(target)).astype(float)}
    return {c: out[c]() for c in controls}
