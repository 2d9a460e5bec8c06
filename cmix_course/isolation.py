"""Hiding the repository from a submission's kernel: Linux namespaces through ``unshare``.

:func:`namespace_wrapper` gives the command a kernel is started under (see
:class:`cmix_course.sandbox.Kernel`): a user namespace (the grader's user mapped to root inside,
so that it may mount), a mount namespace in which every entry of the repositories holding the
grader's packages (:func:`repository_roots`) is covered by an empty read-only tmpfs or by
``/dev/null`` (the Python environment kept when it lives inside), and a PID namespace whose
process 1 is the kernel, so that every process the notebook starts dies with it. Where
``unshare`` cannot do this (another OS, user namespaces disabled) it returns None and the
grader runs in local mode.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path


def repository_roots() -> list[Path]:
    """The folders the kernel must not see: the repositories that hold the grader's
    packages (``cmix_course``, ``cmixlib``, the target of an editable install), recognised by
    their ``notebooks/`` or ``.git``."""
    import cmixlib

    import cmix_course

    roots = {Path(cmix_course.__file__).resolve().parents[1],
             Path(cmixlib.__file__).resolve().parents[1]}
    try:
        from importlib.metadata import distribution

        url = json.loads(distribution("cmixlib").read_text("direct_url.json") or "{}").get("url", "")
        if url.startswith("file://"):
            roots.add(Path(url[len("file://"):]).resolve())
    except Exception:  # noqa: BLE001 - not installed as a distribution: the paths above
        pass
    return sorted(r for r in roots if (r / "notebooks").is_dir() or (r / ".git").exists())


def _hide_commands(root: Path, keep: Path) -> list[str]:
    """Shell commands that hide every entry of ``root`` (an empty tmpfs over each folder,
    ``/dev/null`` over each file) but the one on the way to ``keep`` (the Python environment,
    when it lives inside the repository)."""
    import shlex

    out = []
    for entry in sorted(root.iterdir()):
        if entry.is_symlink():
            continue
        if keep == entry or entry in keep.parents:
            if entry != keep and entry.is_dir():
                out += _hide_commands(entry, keep)
            continue
        q = shlex.quote(str(entry))
        out.append(f"mount -t tmpfs -o size=16k,mode=555 none {q}" if entry.is_dir()
                   else f"mount --bind /dev/null {q}")
    return out


def namespace_wrapper() -> list[str] | None:
    """The command that starts the kernel in its own user, mount and PID namespaces
    (``unshare``, Linux): the repositories hidden (:func:`repository_roots`), and every
    process the notebook starts killed with the kernel. None where ``unshare`` cannot do it
    (then local mode) or ``CMIX_SANDBOX=local``."""
    import subprocess

    if os.environ.get("CMIX_SANDBOX", "").strip().lower() == "local" or not shutil.which("unshare"):
        return None
    base = ["unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--kill-child"]
    try:
        ok = subprocess.run([*base, "true"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    if not ok:
        return None
    keep = Path(sys.prefix).resolve()
    script = ["set -e"] + [c for r in repository_roots() for c in _hide_commands(r, keep)]
    return [*base, "sh", "-c", "\n".join(script + ['exec "$@"']), "cmix-sandbox"]
