"""Stand-ins shared by the experiment tests: a tiny tokenizer namespace and a model bundle."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

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
