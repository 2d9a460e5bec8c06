"""``python -m cmix_course``: the coursework commands (also ``cmix editions`` / ``cmix grade``).

::

    python -m cmix_course editions [--check]        # write (or only check) both editions
    python -m cmix_course check NOTEBOOK...         # the exercise format of some notebooks
    python -m cmix_course grade SUBMISSION... --out DIR [--assignment NB] [--quick]
                         [--timeout S] [--cell-timeout S] [--check-timeout S] [--seed N]
                         [--random-tests K] [--id-pattern REGEX] [--answers-only]
    python -m cmix_course site HTML_DIR [--no-solutions OUT_DIR]

Run them in the book's repository (they read ``notebooks/`` and ``editions/``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def editions_command(check_only: bool, root: str | Path = ".") -> int:
    from . import editions

    paths = editions.chapter_notebooks(root)
    if not paths:
        print("cmix_course: run this in the book's repository (no notebooks/ here)", file=sys.stderr)
        return 2
    if check_only:
        return editions.main(["check", *map(str, paths)])
    try:
        written = editions.write_editions(root)
    except ValueError as exc:
        print(f"cmix_course: {exc}", file=sys.stderr)
        return 2
    for kind, files in written.items():
        print(f"{kind} edition: {len(files)} notebooks in {files[0].parent}")
    return 0


def grade_command(args: argparse.Namespace) -> int:
    from .gradebook import grade_class, write_gradebook

    paths = [Path(p) for p in args.submissions]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f"cmix_course: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2

    def show(g):
        state = f"ERROR: {g.error}" if g.error else f"{g.total:g}/{g.max_total}"
        pending = f" (by hand: {' '.join(g.pending)})" if g.pending else ""
        print(f"{g.student:<20} {g.file:<40} {state}{pending}  [{g.seconds:.0f} s]", flush=True)

    grades = grade_class(paths, args.assignment, timeout=args.timeout,
                         cell_timeout=args.cell_timeout, check_timeout=args.check_timeout,
                         quick=args.quick, batch_seed=args.seed, random_tests=args.random_tests,
                         id_pattern=args.id_pattern, progress=show,
                         answers_only=args.answers_only, jobs=args.jobs)
    from .isolation import namespace_wrapper

    mode = "namespace" if namespace_wrapper() else "local"
    written = write_gradebook(grades, args.out, settings={
        "sandbox": mode, "answers_only": args.answers_only, "jobs": args.jobs,
        "timeout_s": args.timeout, "cell_timeout_s": args.cell_timeout,
        "check_timeout_s": args.check_timeout, "quick": args.quick, "batch_seed": args.seed})
    by_hand = sum(e.status == "graded by hand" for g in grades for e in g.exercises)
    left = sum(len(g.pending) for g in grades)
    print(f"hand grades from {Path(args.out) / 'hand_grades.csv'}: {by_hand} applied, "
          f"{left} exercises still to grade by hand")
    print(f"written: {written['grades']}, {written['lms']}, {written['feedback']}/, "
          f"{written['gradescope']}/")
    return 0


def site_command(html_dir: str, no_solutions: str | None) -> int:
    from .site import serve_student_edition, strip_solutions

    if not Path(html_dir).is_dir():
        print(f"cmix_course: no built site in {html_dir} (run `make book` first)", file=sys.stderr)
        return 2
    if no_solutions:
        n = strip_solutions(html_dir, no_solutions)
        print(f"site without solutions: {no_solutions} ({n} solution blocks removed)")
    else:
        changed = serve_student_edition(html_dir)
        print(f"download and Colab buttons of chapters 2-16 serve the student "
              f"edition ({len(changed)} files changed)")
    return 0


def build_parser(prog: str = "python -m cmix_course") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Coursework: editions and grading.")
    sub = parser.add_subparsers(dest="command", required=True)
    add_editions(sub)
    chk = sub.add_parser("check", help="check the exercise format of notebooks")
    chk.add_argument("notebooks", nargs="+")
    add_grade(sub)
    site = sub.add_parser("site", help="make the built site hand out the student edition")
    site.add_argument("html_dir")
    site.add_argument("--no-solutions", metavar="OUT_DIR", default=None,
                      help="write a copy of the site without any solution to OUT_DIR")
    return parser


def add_editions(sub) -> None:
    eds = sub.add_parser("editions", help="write the student and instructor editions of "
                                          "chapters 2-16")
    eds.add_argument("--check", action="store_true", help="only check the exercise format")


def add_grade(sub) -> None:
    grd = sub.add_parser("grade", help="grade submitted notebooks: gradebook, LMS export, feedback")
    grd.add_argument("submissions", nargs="+", help="the submitted .ipynb files")
    grd.add_argument("--out", default="grades", help="folder for the gradebook (default: grades)")
    grd.add_argument("--assignment", default=None,
                     help="the instructor's copy (default: the chapter named in each file name)")
    grd.add_argument("--quick", action="store_true", help="run with CMIX_QUICK=1 (small sizes)")
    grd.add_argument("--answers-only", action="store_true",
                     help="run only the setup cell, the student's own cells and the book's cells "
                          "they need (fast; the full run is the default)")
    grd.add_argument("--jobs", type=int, default=1, help="submissions graded at once (1)")
    grd.add_argument("--timeout", type=float, default=900, help="seconds per notebook (900)")
    grd.add_argument("--cell-timeout", type=float, default=600, help="seconds per cell (600)")
    grd.add_argument("--check-timeout", type=float, default=60, help="seconds per test (60)")
    grd.add_argument("--seed", type=int, default=None,
                     help="draw the random tests' seeds from this (default: at random; recorded)")
    grd.add_argument("--random-tests", type=int, default=4,
                     help="random seeds drawn for the batch (an exercise uses its own count)")
    grd.add_argument("--id-pattern", default=None,
                     help="regular expression with a group (?P<id>...) for the student id in "
                          "the file name (default: the file name less the chapter's name; "
                          "never a cell of the notebook)")


def dispatch(args: argparse.Namespace) -> int:
    if args.command == "editions":
        return editions_command(args.check)
    if args.command == "check":
        from . import editions

        return editions.main(["check", *args.notebooks])
    if args.command == "grade":
        return grade_command(args)
    if args.command == "site":
        return site_command(args.html_dir, args.no_solutions)
    raise SystemExit(f"unknown command {args.command}")   # pragma: no cover


def main(argv: list[str] | None = None) -> int:
    return dispatch(build_parser().parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
