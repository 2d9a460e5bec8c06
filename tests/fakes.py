"""Stand-ins shared by the experiment tests: a tiny tokenizer namespace, a model bundle and the
model accessors of a fake :class:`cmixlib.experiments.Sources`."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from cmixlib import experiments as X
from cmixlib.forward.encoder import encoder_layers

TOK = SimpleNamespace(pad_token_id=0, cls_token_id=1, sep_token_id=2, unk_token_id=3, mask_token_id=4)


@dataclass
class FakeBundle:
    model: object
    tokenizer: object = field(default_factory=lambda: TOK)
    name: str = "random-tiny"
    notes: list = field(default_factory=list)

    def describe(self):
        return f"random tiny {self.model.config.model_type} ({len(encoder_layers(self.model))} layers, test)"


class BundleSources(X.Sources):
    """Sources whose models are the bundles a subclass sets (``mlm_bundle``, ``cls_bundle``,
    ``base_bundle``), each reported with a fake accuracy; the subclass supplies the data."""

    def mlm(self, condition):
        return self.mlm_bundle, {"accuracy": 0.5}

    def classifier(self, task):
        return self.cls_bundle, {"accuracy": 0.5}

    def base(self):
        return self.base_bundle, None


def rationale_posts(limit: int | None, cls_id: int = 1, sep_id: int = 2) -> list[dict]:
    """HateXplain-like posts (as :func:`cmixlib.data.load_hatexplain_rationale_inputs` returns
    them) of 2-9 words, some words of 2-3 pieces, each with a non-empty rationale."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(limit or 7):
        n_words = int(rng.integers(2, 10))
        pieces = rng.integers(1, 4, n_words).tolist()
        ids, w2t = [cls_id], []
        for k in pieces:
            w2t.append(list(range(len(ids), len(ids) + k)))
            ids += rng.integers(5, 100, k).tolist()
        ids.append(sep_id)
        rationale = (rng.uniform(size=n_words) < 0.4).astype(int).tolist()
        rationale[int(rng.integers(n_words))] = 1
        word_ids = [-1] * len(ids)
        for w, ks in enumerate(w2t):
            for k in ks:
                word_ids[k] = w
        out.append({"idx": 10 + i, "id": f"p{i}", "post_tokens": [f"w{j}" for j in range(n_words)],
                    "label": i % 3, "rationale": rationale, "input_ids": ids, "word_to_tokens": w2t,
                    "word_ids": word_ids, "target_index": 0})
    return out
