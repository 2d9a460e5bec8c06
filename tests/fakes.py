"""Stand-ins shared by the experiment tests: a tiny tokenizer namespace, a model bundle and the
model accessors of a fake :class:`cmixlib.experiments.Sources`."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from cmixlib import experiments as X
from cmixlib.encoder import encoder_layers

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
