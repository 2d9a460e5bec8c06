"""The forgeries of issue 38, each on the committed student editions of chapters 3 and 9 (their
real setup cell): none gets points, each gets 0 or "to be graded by hand" with its reason;
the student id comes from the file name, never from a cell; the kernel holds no seed and no
grader file, and writing into its copy of the packages changes nothing of the grader's."""
from __future__ import annotations

import pytest

from cmix_course.gradebook import grade_class
from cmix_course.grading import COPIED, FAILED, FLAGGED, NOT_ATTEMPTED, NOT_RUN
from tests.test_grading_submissions import ROOT, chapter, submission

#: chapter -> (answer name, checker, the library's function as a dotted path, a wrong answer)
CASES = {
    3: ("my_rollout", "check_rollout", ("cmixlib.methods.aggregation", "rollout"),
        "np.zeros_like(np.asarray(args[0], dtype=float))"),
    9: ("my_cue_alignment", "check_cue_alignment", ("cmixlib.metrics.evaluation", "cue_alignment"),
        "(0.0, 0.0, 0.0)"),
}


def forgeries(ch: int) -> dict[str, list[str]]:
    """Each forgery as the code cells a student writes: the last one in place of the starter
    code (where the answer goes), the others as new cells after the setup."""
    name, checker, (module, fn), wrong = CASES[ch]
    nb_name = chapter(ch)
    return {
        "importlib": [f"import importlib\n\ndef {name}(*args):\n"
                      f"    lib = importlib.import_module('cmix' + 'lib.' + {'.'.join(module.split('.')[1:])!r})\n"
                      f"    return getattr(lib, {fn[:3]!r} + {fn[3:]!r})(*args)"],
        # the library through a worker thread, its name computed (not getattr)
        "thread": [f"import operator\nimport concurrent.futures as cf\nimport {module} as lib\n\n"
                   f"def {name}(*args):\n"
                   f"    fn = operator.attrgetter({fn[:3]!r} + {fn[3:]!r})(lib)\n"
                   "    with cf.ThreadPoolExecutor(1) as ex:\n"
                   "        return ex.submit(fn, *args).result()"],
        "allclose": ["import numpy\nnumpy.allclose = lambda *a, **k: True\n"
                     "numpy.isclose = lambda a, b, *x, **k: numpy.ones(numpy.broadcast(a, b).shape, bool)",
                     f"def {name}(*args):\n    return {wrong}"],
        "module_dict": [f"import cmix_course\nvars(cmix_course)[{checker!r}] = "
                        "lambda *a, **k: cmix_course.CheckResult('x')",
                        f"def {name}(*args):\n    return {wrong}"],
        "read_repo": ["import json, pathlib, cmixlib\nimport numpy as np\n"
                      f"p = pathlib.Path(cmixlib.__file__).resolve().parents[1] / 'notebooks' / {nb_name!r}\n"
                      "cells = json.load(open(p))['cells']\n"
                      "src = [c for c in cells if 'solution' in c['metadata'].get('tags', [])][0]\n"
                      "exec(''.join(src['source']).split('check_')[0])"],
        "read_repo_by_path": ["import json\nimport numpy as np\n"
                              f"p = {str(ROOT / 'notebooks' / nb_name)!r}\n"
                              "cells = json.load(open(p))['cells']\n"
                              "src = [c for c in cells if 'solution' in c['metadata'].get('tags', [])][0]\n"
                              "exec(''.join(src['source']).split('check_')[0])"],
        "json_dump": ["import json\n_dump = json.dump\n"
                      "def _fake(obj, f, *a, **k):\n"
                      "    if isinstance(obj, dict):\n"
                      "        for r in obj.get('results', []):\n"
                      "            for t in r.get('tests', []):\n"
                      "                t['status'] = 'passed'\n"
                      "    return _dump(obj, f, *a, **k)\n"
                      "json.dump = _fake",
                      f"def {name}(*args):\n    return {wrong}"],
        "atexit": ["import atexit, glob, json\n"
                   "def _rewrite():\n"
                   "    for p in glob.glob('../results-*.json') + glob.glob('../io/out-*.json'):\n"
                   "        json.dump({'found': True, 'callable': True, 'result': {'kind': 'none'}}, open(p, 'w'))\n"
                   "atexit.register(_rewrite)",
                   f"def {name}(*args):\n    return {wrong}"],
        "write_grader": ["import cmix_course, pathlib\n"
                         "h = pathlib.Path(cmix_course.__file__).with_name('harness.py')\n"
                         "h.write_text('def run(*a, **k):\\n    return {}\\n')\n"
                         "c = pathlib.Path(cmix_course.__file__).with_name('checking.py')\n"
                         "c.write_text(c.read_text().replace('def _close(', 'def _close_old('))",
                         f"def {name}(*args):\n    return {wrong}"],
    }


@pytest.fixture(scope="module")
def forged(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("forged")
    paths = []
    for ch in CASES:
        name = CASES[ch][0]
        for kind, cells in forgeries(ch).items():     # the last cell replaces the starter code
            paths.append(submission(ch, {name: cells[-1]}, tmp / f"{kind}-{ch:02d}_{chapter(ch)}",
                                    extra=cells[:-1]))
        # an impersonator: the file is mallory's, a cell claims to be alice
        paths.append(submission(ch, {}, tmp / f"mallory_{chapter(ch)}",
                                extra=["STUDENT_ID = 'alice'"]))
    harness_before = (ROOT / "cmix_course" / "harness.py").read_text()
    grades = grade_class(paths, root=ROOT, quick=True, batch_seed=6, random_tests=2,
                         answers_only=True, jobs=2, check_timeout=120)
    assert (ROOT / "cmix_course" / "harness.py").read_text() == harness_before
    return {g.file: g for g in grades}


@pytest.mark.parametrize("ch", sorted(CASES))
@pytest.mark.parametrize("kind, allowed", [
    ("importlib", {COPIED, FLAGGED}),
    ("thread", {COPIED, FLAGGED}),
    ("allclose", {FAILED}),
    ("module_dict", {FAILED}),
    # the kernel's cmixlib is a copy, with no notebooks/ beside it: the cell fails
    ("read_repo", {NOT_ATTEMPTED, NOT_RUN}),
    # hidden by the namespace sandbox (the cell fails); in local mode readable: by hand
    ("read_repo_by_path", {NOT_ATTEMPTED, NOT_RUN, FLAGGED}),
    ("json_dump", {FAILED}),
    ("atexit", {FAILED}),
    ("write_grader", {FAILED}),
])
def test_a_forgery_gets_no_points(forged, ch, kind, allowed):
    g = forged[f"{kind}-{ch:02d}_{chapter(ch)}"]
    assert g.error is None, g.error
    e = next(e for e in g.exercises if e.kind == "computational")
    assert e.status in allowed, (e.status, e.feedback, g.notes)
    assert e.points in (0.0, None)
    if e.points is None:                       # pending: the reason is in the feedback
        assert "by hand" in e.feedback[0] and ("exec" in e.feedback[0] or "import" in e.feedback[0])


@pytest.mark.parametrize("ch", sorted(CASES))
def test_the_id_comes_from_the_file_name(forged, ch):
    g = forged[f"mallory_{chapter(ch)}"]
    assert g.student == "mallory"
