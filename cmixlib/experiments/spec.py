"""What identifies one run of an experiment: :class:`RunSpec`, frozen.

The runner (:mod:`cmixlib.experiments.runner`) builds it from the caller's arguments and the
experiment's defaults, and passes it down: to the run's :class:`~cmixlib.experiments.sources.Sources`
(which models and data, for which model name and settings) and, inside the run's
:class:`~cmixlib.experiments.runner.Context`, to the experiment. This module imports nothing of
cmixlib, so the runner, the sources and the experiments' shared helpers depend on it and not on
each other.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Protocol

__all__ = ["RunSpec", "RunView"]


@dataclass(frozen=True)
class RunSpec:
    """One run: the experiment's name, the model name (as the cache knows it), the example limit
    (None: the experiment's whole data), the merged settings (read-only) and whether progress
    bars are shown. Part of the cache key except ``progress``."""

    experiment: str
    model: str
    limit: int | None
    settings: Mapping[str, Any]
    progress: bool = True

    def __post_init__(self):
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))


class RunView(Protocol):
    """What the experiments' shared helpers (:mod:`cmixlib.experiments.common`) read of a run:
    its settings and a progress bar. :class:`~cmixlib.experiments.runner.Context` is one."""

    settings: Mapping[str, Any]

    def tqdm(self, iterable: Iterable | None, **kw: Any) -> Any: ...
