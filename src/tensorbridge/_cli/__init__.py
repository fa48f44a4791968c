# SPDX-License-Identifier: Apache-2.0
"""The ``tensorbridge`` command line.

    tensorbridge                 the interoperability matrix of this machine
    tensorbridge --dtypes        ... with the per-dtype sweep
    tensorbridge --json          ... as JSON
    tensorbridge --markdown      ... as docs/compatibility.md (with every quirk handled)
    tensorbridge --html FILE     ... and as a page in FILE (coloured, with tooltips)
    tensorbridge inspect EXPR    what EXPR's DLPack export looks like
    tensorbridge check EXPR      EXPR's DLPack producer graded (--consumer, --all: `check`)

This module parses the arguments and runs a command: the matrix (`matrix`, rendered
by `markdown` and `page`), `inspect` or `check`. Those are imported only when their
command runs, so ``--help`` and ``--version`` stay quick. While the matrix runs, its
progress is shown on stderr when that is a terminal (`progress`), and the
frameworks' own output is kept out of it (`quiet`). Ctrl-C stops any command within
a second with status 130 and one line on stderr (`interrupts`). ``inspect`` and
``check`` find modules in the working directory, as ``python -m`` does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from tensorbridge._cli import interrupts
from tensorbridge._cli.quiet import QUIET_ENVIRONMENT, set_environment

__all__ = ["QUIET_ENVIRONMENT", "main", "run", "run_matrix"]


def _wanted(args: argparse.Namespace, say: Callable[[str], None]) -> tuple[list[str] | None, int]:
    """The frameworks `--frameworks` asks for, in import order (None: all), and the
    exit status so far (2: a name is unknown; 1: one is left out)."""
    from tensorbridge._cli import matrix
    from tensorbridge._frameworks import ALIASES, FRAMEWORKS, known_targets

    if args.frameworks is None:
        return None, 0
    status = 0
    given = [n.strip() for n in args.frameworks.split(",") if n.strip()]
    if not given:
        say(f"--frameworks {args.frameworks!r} names no framework")
        return [], 2
    # The names convert takes, aliases included ("pytorch", "np"...).
    wanted = [ALIASES.get(n, n) for n in given]
    unknown = sorted(g for g, n in zip(given, wanted, strict=True) if n not in FRAMEWORKS)
    if unknown:
        say(f"unknown framework(s) {', '.join(unknown)}; known: {known_targets()}")
        return wanted, 2
    for name in [n for n in wanted if n not in matrix.ORDER]:
        say(f"{name} is left out: it needs a GPU, and this matrix runs on the CPU")
        status = 1
    if "tensorbridge" not in wanted:
        wanted.append("tensorbridge")
    return [n for n in matrix.ORDER if n in wanted], status


def run_matrix(args: argparse.Namespace) -> int:
    """The interoperability matrix, as the parsed arguments ask."""
    from tensorbridge._cli import markdown, matrix, page
    from tensorbridge._cli.progress import Progress
    from tensorbridge._cli.quiet import quiet
    from tensorbridge._frameworks import FRAMEWORKS

    progress = Progress()

    def say(message: str) -> None:
        progress.clear()
        print(f"tensorbridge: {message}", file=sys.stderr)

    started = time.perf_counter()
    wanted, status = _wanted(args, say)
    if status == 2:
        return 2
    skipped: dict[str, str] = {}
    changes: list[str] = []
    # The sweep runs when asked (--dtypes), and for --markdown: docs/compatibility.md
    # holds every dtype.
    swept = args.dtypes or args.markdown
    try:
        with quiet():
            versions = matrix.available(wanted, skipped, changes, progress)
            names = list(versions)
            for name, reason in skipped.items():
                say(f"{name} is left out: {reason}")
            for name in wanted or []:
                if name not in versions and name not in skipped:
                    say(
                        f"{name} is not installed here (pip install "
                        f"{FRAMEWORKS[name].distribution or name}); left out"
                    )
                    status = 1
            if skipped:
                status = 1  # installed here, yet not tried
            results = matrix.exchange_matrix(names, timing=not args.no_timing, progress=progress)
            sweep = matrix.dtype_sweep(names, progress) if swept else None
            untested = matrix.sweep_dtypes()[1] if swept else None
            # A Ctrl-C a framework swallowed on the way: what was measured is not the
            # whole matrix, so none of it is printed as if it were.
            interrupts.check()
    finally:
        progress.clear()
    seconds = time.perf_counter() - started

    # What every output is made of.
    facts: dict[str, Any] = dict(
        versions=versions,
        skipped=skipped,
        changes=changes,
        results=results,
        sweep=sweep,
        untested=untested,
        seconds=seconds,
    )
    if args.html:
        text = page.render(**facts)  # (before the file is truncated)
        with open(args.html, "w", encoding="utf-8") as file:
            file.write(text)
    if args.json:
        data = matrix.payload(**facts)
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return status
    print(markdown.report(markdown=args.markdown, **facts))
    return status


def _inspect(argv: list[str]) -> int:
    from tensorbridge._cli import inspect

    parser = argparse.ArgumentParser(
        prog="tensorbridge inspect",
        description="Show what an expression's DLPack export looks like. The installed "
        "frameworks are importable by their usual names (np, torch, jax, jnp, paddle, tf, "
        "mx, pa, tb).",
    )
    parser.add_argument("expr", help='e.g. "torch.arange(4)[::2]"')
    return inspect.run(parser.parse_args(argv).expr)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tensorbridge",
        description="Zero-copy tensor exchange over DLPack. With no arguments: the "
        "interoperability matrix of the frameworks installed here (progress is shown on "
        "stderr when it is a terminal). Also: tensorbridge inspect EXPR, tensorbridge check "
        "EXPR (tensorbridge check --help).",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    output = parser.add_mutually_exclusive_group()
    output.add_argument(
        "--json",
        action="store_true",
        help='machine-readable output (its "dtypes" are null without --dtypes)',
    )
    parser.add_argument(
        "--dtypes",
        action="store_true",
        help="also sweep every dtype through each consumer (both routes): the coverage "
        "row and the table of every dtype; --markdown always includes it",
    )
    output.add_argument(
        "--markdown",
        action="store_true",
        help="docs/compatibility.md: the matrix, every dtype and every quirk handled",
    )
    parser.add_argument(
        "--html",
        metavar="FILE",
        help="also write the matrix to FILE as a self-contained HTML page (coloured "
        "cells whose tooltips say why); stdout still gets the text, --json or --markdown",
    )
    parser.add_argument("--no-timing", action="store_true", help="skip the per-exchange timing")
    parser.add_argument(
        "--frameworks",
        metavar="A,B",
        help="only these frameworks, by the names convert takes (default: every one "
        "installed); exit status 1 when one is not installed (and, with or without "
        "this option, when one that is installed fails to import)",
    )
    return parser


def _check_html(parser: argparse.ArgumentParser, path: str) -> None:
    """Refuse an --html FILE that cannot be written, before the matrix runs."""
    if path == "-":
        parser.error("--html needs a file name: stdout gets the text, --json or --markdown")
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        parser.error(f"--html {path}: is a directory")
    if not os.path.isdir(folder):
        parser.error(f"--html {path}: the directory {folder} does not exist")
    if not os.access(path if os.path.exists(path) else folder, os.W_OK):
        parser.error(f"--html {path}: not writable")


def _working_directory_importable() -> None:
    """Modules in the working directory can be imported, as under ``python -m`` (the
    console script's ``sys.path`` starts with its own folder instead): the folder is
    put before the installed packages, after the standard library, so that a file of
    it cannot shadow a module of Python's own."""
    import site
    import sysconfig

    here = os.getcwd()
    if here in sys.path or "" in sys.path:
        return
    installed = {os.path.realpath(p) for p in (*site.getsitepackages(), site.getusersitepackages())}
    installed |= {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
    for index, entry in enumerate(sys.path):
        if os.path.realpath(entry or ".") in installed:
            sys.path.insert(index, here)
            return
    sys.path.append(here)


def run(argv: list[str]) -> int:
    """Run the command line on argv; the exit status."""
    # The command imports frameworks only to try them: keep their C++ start-up
    # logging out of the terminal (a user's own setting wins).
    set_environment()
    # Started with stderr or stdout closed (2>&-, >&-): what would go there goes nowhere
    # (print to a None stderr would write to stdout; flushing a None stdout raises).
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (for the rest of the process)
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    try:
        status = _command(argv)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # The reader went away (`tensorbridge | head`): nothing more to say. Python
        # flushes stdout again at exit, so it is pointed at /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _command(argv: list[str]) -> int:
    """Parse argv and run its command; the exit status."""
    if argv and argv[0] in ("inspect", "check"):
        _working_directory_importable()  # (EXPR may name a module of it)
        if argv[0] == "inspect":
            return _inspect(argv[1:])
        from tensorbridge._cli import check

        return check.run(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.html is not None:
        _check_html(parser, args.html)
    if args.version:
        from tensorbridge._core import DLPACK_VERSION
        from tensorbridge._version import __version__

        major, minor = DLPACK_VERSION
        print(f"tensorbridge {__version__} (DLPack {major}.{minor})")
        return 0
    return run_matrix(args)


def main(argv: list[str] | None = None) -> int:
    """The console script ``tensorbridge`` (and ``python -m tensorbridge``).

    Called without `argv` (as the console script is), it handles Ctrl-C itself
    (`interrupts`: status 130 within a second, one line on stderr, whatever a
    framework does with the KeyboardInterrupt), and ends the process once its
    output is flushed, without waiting for the frameworks it imported to tear down
    (over a second with all of them): `os._exit`, so no atexit handler runs, unless
    a profiler, a debugger or coverage is watching (they write their results at
    exit). Output that could not be written makes the status nonzero (120, as
    Python's own failed final flush). With `argv` (the tests) it returns the exit
    status, and a Ctrl-C reaches the caller as a KeyboardInterrupt."""
    if argv is not None:
        return run(list(argv))
    interrupts.install()
    try:
        status = run(sys.argv[1:])
    except SystemExit as exc:  # argparse: --help, usage errors
        code = exc.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if not isinstance(code, int) and code is not None:
            print(code, file=sys.stderr)
    except KeyboardInterrupt as exc:  # Ctrl-C: the user knows; one line, no traceback
        with contextlib.suppress(AttributeError, OSError, ValueError):
            sys.stderr.flush()  # (what the command said first comes first)
        if isinstance(exc, interrupts.Interrupted):
            interrupts.note(exc.command, exc.what)
        else:
            interrupts.note()
        status = interrupts.STATUS
    if interrupts.interrupted():
        # Also when the KeyboardInterrupt was swallowed all the way (a producer's
        # __dlpack__ that catches it): the run did not end as asked.
        interrupts.note()
        status = interrupts.STATUS
    interrupts.finishing()
    try:
        sys.stdout.flush()
    except (OSError, ValueError):  # the output was not written (a full disk, a closed pipe)
        status = status or 120  # (what Python exits with when its final flush fails)
    with contextlib.suppress(AttributeError, OSError, ValueError):
        sys.stderr.flush()
    if sys.gettrace() is not None or sys.getprofile() is not None or "coverage" in sys.modules:
        # A profiler, a debugger or coverage writes its results at exit: let it.
        raise SystemExit(status)
    os._exit(status)
