"""cmixlib's layout rules (CONTRIBUTING.md), checked by tools/check_layout.py: no import cycle, at
most 8 plain top-level modules, no private cross-module import, no module over 400 lines."""
import importlib.util
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_layout", ROOT / "tools" / "check_layout.py")
check_layout = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_layout)


def test_cmixlib_keeps_its_layout_rules():
    found = check_layout.breaches()
    assert not found, "\n".join(found)


def test_the_checker_sees_each_kind_of_breach(tmp_path):
    """The checker can fail: a cycle (also through a package __init__), a private import in both
    spellings, a long module and a crowded top level are each reported."""
    pkg = tmp_path / "cmixlib"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from cmixlib.sub.b import f\n")
    (pkg / "sub" / "b.py").write_text("from cmixlib import a\ndef f():\n    return a._hidden\n")
    (pkg / "a.py").write_text("from cmixlib.sub import f\n_hidden = 1\n")
    (pkg / "c.py").write_text("from cmixlib.a import _hidden\n" + "x = 1\n" * 401)
    for i in range(8):
        (pkg / f"m{i}.py").write_text("")
    found = "\n".join(check_layout.breaches(pkg))
    assert "import cycle: cmixlib.a <-> cmixlib.sub <-> cmixlib.sub.b" in found
    assert "cmixlib.c uses cmixlib.a._hidden" in found
    assert "cmixlib.sub.b uses cmixlib.a._hidden" in found
    assert "too long: cmixlib.c has 402 lines" in found
    assert "10 plain modules at the top level" in found
    (pkg / "c.py").write_text(textwrap.dedent("from cmixlib.a import f\n"))
    assert "cmixlib.c uses" not in "\n".join(check_layout.breaches(pkg))
