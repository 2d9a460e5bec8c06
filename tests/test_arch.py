"""cmixlib.models.arch (the module names of each family) and cmixlib.methods.registry (one entry per method),
checked against module paths spelled out here independently and against the models' own outputs."""
import pytest
import torch
import transformers

from cmixlib.models import arch
from cmixlib import random_model
from cmixlib.methods import registry
from cmixlib.methods.dispatch import METHODS
from cmixlib.gradients import GRADIENT_METHODS

# the parts of layer 0, spelled out by hand per family (independent of arch.FAMILIES)
BY_HAND = {
    "bert": lambda m: m.base_model.encoder.layer[0],
    "roberta": lambda m: m.base_model.encoder.layer[0],
    "electra": lambda m: m.base_model.encoder.layer[0],
    "distilbert": lambda m: m.base_model.transformer.layer[0],
    "mpnet": lambda m: m.base_model.encoder.layer[0],
}
LN1 = {"bert": lambda l: l.attention.output.LayerNorm, "distilbert": lambda l: l.sa_layer_norm,
       "mpnet": lambda l: l.attention.LayerNorm}
VALUE = {"bert": lambda l: l.attention.self.value, "distilbert": lambda l: l.attention.v_lin,
         "mpnet": lambda l: l.attention.attn.v}


@pytest.mark.parametrize("name", ["bert", "roberta", "electra", "distilbert", "mpnet"])
@pytest.mark.parametrize("task", ["base", "mlm", "sequence-classification"])
def test_parts_are_the_modules_by_hand(name, task):
    model = random_model(name, task=task, layers=3)
    key = name if name in ("distilbert", "mpnet") else "bert"
    assert arch.family_of(model).name == name
    parts = arch.layer_parts(model)
    assert len(parts) == arch.num_layers(model) == 3
    layer0 = BY_HAND[name](model)
    assert parts[0].layer is layer0
    assert parts[0].ln1 is LN1[key](layer0) and parts[0].value is VALUE[key](layer0)
    assert parts[0].num_heads == arch.num_heads(model) == 4
    assert [p.layer for p in parts] == arch.layer_list(model)


@pytest.mark.parametrize("name", ["bert", "roberta", "electra", "distilbert", "mpnet"])
def test_embedding_output_module_gives_hidden_states_0(name):
    model = random_model(name, dtype=torch.float64)
    ids = torch.tensor([[2, 5, 7, 9, 3]])
    seen = []
    handle = arch.embedding_output_module(model).register_forward_hook(
        lambda mod, inp, out: seen.append(out))
    try:
        out = model(input_ids=ids, output_hidden_states=True)
    finally:
        handle.remove()
    torch.testing.assert_close(seen[0], out.hidden_states[0], rtol=0, atol=0)


def test_family_found_by_layout_when_the_type_is_unknown():
    model = random_model("bert")
    model.config.model_type = "my-bert-clone"
    assert arch.family_of(model).name == "bert"


def test_unsupported_models_get_a_clear_error():
    model = random_model("bert")
    model.config.is_decoder = True
    with pytest.raises(arch.UnsupportedModelError, match="decoder"):
        arch.family_of(model)
    with pytest.raises(arch.UnsupportedModelError, match="FAMILIES"):
        arch.family_of(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="has no masked-LM head"):
        arch.mlm_head(random_model("roberta"))


def test_random_config_matches_the_configs_written_out():
    sizes = dict(hidden=32, layers=2, heads=4, intermediate=64, vocab=50)
    want = {
        "bert": transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=4, intermediate_size=64,
                                        max_position_embeddings=128),
        "distilbert": transformers.DistilBertConfig(vocab_size=50, dim=32, n_layers=2,
                                                    n_heads=4, hidden_dim=64,
                                                    max_position_embeddings=128),
        "electra": transformers.ElectraConfig(vocab_size=50, embedding_size=16, hidden_size=32,
                                              num_hidden_layers=2, num_attention_heads=4,
                                              intermediate_size=64,
                                              max_position_embeddings=128),
    }
    for name, cfg in want.items():
        assert arch.random_config(name, **sizes).to_dict() == cfg.to_dict(), name
    assert arch.position_offset(random_model("roberta")) == 2
    with pytest.raises(ValueError, match="Unknown architecture"):
        arch.random_config("gpt2", **sizes)


def test_registry_covers_every_method_once():
    for name in [*METHODS, *GRADIENT_METHODS, "blank_out", "random"]:
        m = registry.ALL_METHODS[name]
        assert m.label and m.colour.startswith("#"), name
    assert set(METHODS) == {n for n, m in registry.ALL_METHODS.items()
                            if m.kind in registry.MIXING_KINDS}
    colours = [m.colour for m in registry.ALL_METHODS.values()]
    assert len(set(colours)) == len(colours)
    assert registry.method_label("rollout:attn_norm_res") == "N-Res rollout"
    assert registry.method_color("grad_x_input") == registry.METHOD_COLORS["grad_x_input_l2"]
    assert len(registry.describe_methods(None)) == len(registry.ALL_METHODS)
    assert set(registry.describe_methods()["name"]) == set(METHODS)
