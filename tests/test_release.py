"""A citable, versioned book: one version everywhere, the footer stamp, each chapter's run line."""
from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import yaml

import cmixlib
from cmixlib.book import chapter_footer, hardware

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import cmix_version  # noqa: E402


def test_one_version_everywhere():
    """cmixlib.__version__ is the one place: the metadata reads it, CITATION.cff and the
    changelog name it, the footer stamp reads it from the source."""
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["title"] and cff["authors"]
    assert cff["version"] == cmixlib.__version__
    toml = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in toml and 'version = {attr = "cmixlib.__version__"}' in toml
    assert not re.search(r'^version\s*=\s*"', toml, flags=re.M)      # no second copy
    base = re.match(r"\d+\.\d+\.\d+", cmixlib.__version__).group(0)
    assert re.search(rf"^## {re.escape(base)}\b.*{re.escape(cmixlib.__version__)}",
                     (ROOT / "CHANGELOG.md").read_text(), flags=re.M)
    assert cmix_version.package_version() == cmixlib.__version__


def test_footer_stamp_names_version_and_commit():
    stamp = cmix_version.stamp()
    assert re.fullmatch(rf"cmixlib {re.escape(cmixlib.__version__)}, commit "
                        r"([0-9a-f]{7,}(\+changes)?|no git checkout)", stamp), stamp

    class Config:
        html_theme_options = {"extra_footer": "Built offline."}
    cfg = Config()
    cmix_version.add_stamp(None, cfg)
    assert cfg.html_theme_options["extra_footer"] == "Built offline.<br>" + stamp
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["local_extensions"].get("cmix_version") == "tools/"


def test_every_chapter_ends_with_its_run_line():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        last = json.loads(path.read_text())["cells"][-1]
        assert "print(chapter_footer(run_info))" in "".join(last["source"]), path.name
        assert "remove-input" in last["metadata"].get("tags", []), path.name


def test_chapter_footer_says_time_mode_and_hardware():
    info = {"quick": True, "colab": False, "device": "cpu", "torch": "2.x",
            "started": time.time() - 12.4}
    text = chapter_footer(info)
    assert text.startswith("Executed in 12 s (quick mode (CMIX_QUICK=1), local, device cpu)")
    assert hardware() in text and f"cmixlib {cmixlib.__version__}" in text
    assert "logical cores" in hardware() and "torch threads" in hardware()


def test_the_building_page_is_in_the_book():
    toc = (ROOT / "_toc.yml").read_text()
    assert "file: book/building" in toc and (ROOT / "book" / "building.md").is_file()
