"""Per-experiment code versions: a run's cache key covers the modules its experiment imports
(cmixlib.cache.result_closure), so editing one module re-runs only the experiments that use it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import cmixlib
from cmixlib.cache import result_closure


def _package(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "pkg"
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


def _names(paths, pkg: Path) -> set[str]:
    return {p.relative_to(pkg).as_posix() for p in paths}


def test_result_closure_follows_what_is_used(tmp_path):
    pkg = _package(tmp_path, {
        "__init__.py": '"""Re-exports only."""\nfrom .a import f\nfrom .b import g\n__version__ = "1"\n'
                       '__all__ = ["f", "g"]\n',
        "a.py": "def f():\n    return 1\n",
        "b.py": "def g():\n    return 2\n",
        "c.py": "from . import f\n",                  # f through the re-export: a.py only
        "d.py": "import pkg\n",                       # the whole package bound: a.py and b.py
        "sub/__init__.py": "from .x import h\n",
        "sub/x.py": "def h():\n    return 3\n",
        "sub/y.py": "def k():\n    from .. import b\n",   # lazy import counts; no sub/__init__
        "e.py": "from .sub import y\n",
        "code/__init__.py": "from .z import q\nREGISTRY = [q]\n",   # code of its own: a module
        "code/z.py": "q = 1\n",
        "w.py": "from .code import q\n",
    })
    assert _names(result_closure(["pkg.c"], pkg), pkg) == {"c.py", "a.py"}
    assert _names(result_closure(["pkg.d"], pkg), pkg) == {"d.py", "a.py", "b.py"}
    assert _names(result_closure(["pkg.e"], pkg), pkg) == {"e.py", "sub/y.py", "b.py"}
    assert _names(result_closure(["pkg.w"], pkg), pkg) == {"w.py", "code/__init__.py", "code/z.py"}


_SCRIPT = """
import sys, json
from pathlib import Path
import cmixlib
from cmixlib.experiments import REGISTRY, code_version
pkg = Path(cmixlib.__file__).resolve().parent
assert str(pkg).startswith(sys.argv[1]), pkg
names = sorted(REGISTRY)
def versions():
    return {n: code_version(n) for n in names}
out = {"before": versions()}
for rel in ["methods/hta.py", "metrics/probing.py", "experiments/saliency.py", "experiments/alti.py"]:
    (pkg / rel).write_text((pkg / rel).read_text() + "\\nAN_EDIT = 1\\n")
    out[rel] = versions()
manifest = pkg / "assets/classifiers/sst2/manifest.json"
manifest.write_text(manifest.read_text() + "\\n")
out["manifest"] = versions()
print(json.dumps(out))
"""


def test_an_edit_changes_only_the_versions_of_experiments_that_import_it(tmp_path):
    """On a copy of the package, in a fresh process: editing methods/hta.py changes GlobEnc Figure 4's
    version and not Value Zeroing's; metrics/probing.py the MDL probing's and not ALTI's; experiments/saliency.py
    (used by notebooks and by the example claims only) that one's alone; a committed classifier's manifest all."""
    import json
    import shutil

    pkg = Path(cmixlib.__file__).resolve().parent
    shutil.copytree(pkg, tmp_path / "cmixlib", ignore=shutil.ignore_patterns("__pycache__", "*.safetensors"))
    out = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path)], cwd=tmp_path, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    v = json.loads(out.stdout.strip().splitlines()[-1])

    def changed(step: str, before: str) -> set[str]:
        return {n for n in v[step] if v[step][n] != v[before][n]}

    assert "globenc-fig4-hta" in changed("methods/hta.py", "before")
    assert "vz-cue-alignment" not in changed("methods/hta.py", "before")
    assert "alti-table2" not in changed("methods/hta.py", "before")
    assert "vz-mdl-probing" in changed("metrics/probing.py", "methods/hta.py")
    assert "alti-table2" not in changed("metrics/probing.py", "methods/hta.py")
    assert changed("experiments/saliency.py", "metrics/probing.py") == {"paper-example-claims"}
    alti = changed("experiments/alti.py", "experiments/saliency.py")
    assert {"alti-table2", "alti-fig7-consistency"} <= alti and "vz-cue-alignment" not in alti
    assert changed("manifest", "experiments/alti.py") == set(v["before"])
