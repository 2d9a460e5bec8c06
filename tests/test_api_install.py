"""A lean install: the library's wheel requires only torch, transformers, numpy and tqdm, carries
neither the coursework package nor the book's weights, and its core imports and runs without the
extras (pandas, scipy, matplotlib, captum... hidden by a meta-path finder in a subprocess)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = {"torch", "transformers", "numpy", "tqdm"}
EXTRAS = ("pandas", "scipy", "sklearn", "networkx", "matplotlib", "seaborn", "captum", "gguf",
          "accelerate")


def _name(req: str) -> str:
    return re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].strip().lower()


def test_pyproject_core_dependencies_and_packages():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert {_name(r) for r in meta["project"]["dependencies"]} == CORE
    extras = meta["project"]["optional-dependencies"]
    heavy = {_name(r) for r in extras["experiments"] + extras["plot"] + extras["gradients"]
             + extras["flow"] + extras["decoders"]}
    assert {"pandas", "scipy", "scikit-learn", "networkx", "matplotlib", "seaborn", "captum",
            "gguf", "accelerate"} <= heavy
    assert meta["tool"]["setuptools"]["packages"]["find"]["include"] == ["cmixlib*"]
    course = tomllib.loads((ROOT / "course" / "pyproject.toml").read_text())
    assert course["tool"]["setuptools"]["packages"] == ["cmix_course"]
    assert (ROOT / "course" / "cmix_course" / "__init__.py").is_file()
    # make install (requirements.txt) still installs everything the book needs
    reqs = {_name(line) for line in (ROOT / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")}
    assert heavy <= reqs and CORE <= reqs


@pytest.mark.slow
def test_built_wheel_metadata_requires_only_the_core(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for f in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / f, src / f)
    shutil.copytree(ROOT / "cmixlib", src / "cmixlib",
                    ignore=shutil.ignore_patterns("__pycache__", "minilm_mlm*", "*.safetensors"))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                          "--no-build-isolation", str(src), "-w", str(tmp_path / "dist")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("cmixlib-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in meta.splitlines()
                if line.startswith("Requires-Dist:")]
    unconditional = {_name(r) for r in requires if "extra ==" not in r}
    assert unconditional == CORE, requires
    assert not any(n.startswith("cmix_course/") for n in names)
    assert not any("/assets/" in n for n in names)
    assert "cmixlib/plotting/explorer.js" in names or not list((ROOT / "cmixlib/plotting").glob("*.js"))


BLOCKER = f"""
import sys
BLOCK = set({list(EXTRAS)!r})
class Hide:
    def __init__(self, inner): self.inner = inner
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCK:
            return None                       # as if the package were not installed
        return self.inner.find_spec(name, path, target)
    def __getattr__(self, attr): return getattr(self.inner, attr)
sys.meta_path[:] = [Hide(f) for f in sys.meta_path]
"""

CORE_USE = """
import torch, cmixlib
model = cmixlib.random_model("bert", layers=2, type_vocab_size=2)
enc = {"input_ids": torch.tensor([[1, 5, 6, 2, 7, 2]]),
       "token_type_ids": torch.tensor([[0, 0, 0, 0, 1, 1]])}
maps = cmixlib.context_mixing(model, None, enc, ["attention", "attention_rollout", "globenc",
                                                 "alti", "value_zeroing_rollout"])
cap = cmixlib.capture(model, enc)
assert maps["alti"].shape == (2, 6, 6) and cap[1, "resid_out"].shape == (6, 32)
assert cmixlib.rollout(maps["attention"]).shape == (2, 6, 6)
try:
    cmixlib.attention_flow(maps["attention"])
except ImportError as exc:
    assert "cmixlib[flow]" in str(exc), exc
else:
    raise AssertionError("attention_flow ran without scipy")
loaded = sorted({m.split(".")[0] for m in sys.modules} & BLOCK)
assert not loaded, loaded
print("core OK")
"""


def test_core_runs_without_the_extras():
    out = subprocess.run([sys.executable, "-c", BLOCKER + CORE_USE], capture_output=True,
                         text=True, timeout=600, cwd=ROOT,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0 and "core OK" in out.stdout, out.stderr[-3000:]


def test_the_blocker_really_hides_the_extras():
    code = BLOCKER + "import importlib.util\nassert importlib.util.find_spec('pandas') is None\n" \
                     "try:\n    import pandas\nexcept ImportError:\n    print('hidden')\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "hidden" in out.stdout, out.stderr
