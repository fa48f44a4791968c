# SPDX-License-Identifier: Apache-2.0
"""The ``tensorbridge`` command line.

    tensorbridge                 the interoperability matrix of this machine
    tensorbridge --dtypes        ... with a per-dtype sweep
    tensorbridge --json          ... as JSON
    tensorbridge --markdown      ... as docs/compatibility.md (with every quirk handled)
    tensorbridge inspect EXPR    what EXPR's DLPack export looks like

This module parses the arguments and runs a command: the matrix (`matrix`, rendered
by `markdown`) or `inspect`. Those are imported only when their command runs, so
``--help`` and ``--version`` stay quick.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

__all__ = ["main", "run_matrix"]


def run_matrix(args: argparse.Namespace) -> int:
    """The interoperability matrix, as the parsed arguments ask."""
    from tensorbridge._cli import markdown, matrix
    from tensorbridge._frameworks import ALIASES, FRAMEWORKS

    started = time.perf_counter()
    wanted = None
    status = 0
    if args.frameworks:
        given = [n.strip() for n in args.frameworks.split(",") if n.strip()]
        # The names convert takes, aliases included ("pytorch", "np", "jnp"...).
        wanted = [ALIASES.get(n, n) for n in given]
        unknown = sorted(g for g, n in zip(given, wanted, strict=True) if n not in FRAMEWORKS)
        if unknown:
            print(
                f"tensorbridge: unknown framework(s) {', '.join(unknown)}; known: "
                f"{', '.join(FRAMEWORKS)} (and their aliases: {', '.join(sorted(ALIASES))})",
                file=sys.stderr,
            )
            return 2
        for name in [n for n in wanted if n not in matrix.ORDER]:
            print(
                f"tensorbridge: {name} is left out: it needs a GPU, and this matrix "
                "runs on the CPU",
                file=sys.stderr,
            )
            status = 1
        if "tensorbridge" not in wanted:
            wanted.append("tensorbridge")
        wanted = [n for n in matrix.ORDER if n in wanted]
    skipped: dict[str, str] = {}
    versions = matrix.available(wanted, skipped)
    names = list(versions)
    for name, reason in skipped.items():
        print(f"tensorbridge: skipped {name}: {reason}", file=sys.stderr)
    if wanted is not None:
        for name in wanted:
            if name not in versions and name not in skipped:
                print(
                    f"tensorbridge: {name} is not installed here (pip install "
                    f"{FRAMEWORKS[name].distribution or name}); left out",
                    file=sys.stderr,
                )
                status = 1
        if skipped:
            status = 1
    results = matrix.exchange_matrix(names, timing=not args.no_timing)
    sweep = matrix.dtype_sweep(names)  # the coverage row needs it in every format
    untested = matrix.sweep_dtypes()[1]
    seconds = time.perf_counter() - started

    if args.json:
        data = matrix.payload(
            versions=versions,
            skipped=skipped,
            seconds=seconds,
            results=results,
            sweep=sweep,
            untested=untested,
        )
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return status
    print(
        markdown.report(
            versions=versions,
            results=results,
            sweep=sweep,
            untested=untested,
            seconds=seconds,
            markdown=args.markdown,
            dtypes=args.dtypes,
        )
    )
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


def main(argv: list[str] | None = None) -> int:
    """The console script ``tensorbridge`` (and ``python -m tensorbridge``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # The command imports TensorFlow only to try it: keep its C++ start-up log out of
    # the terminal (a user's own setting wins).
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if argv and argv[0] == "inspect":
        return _inspect(argv[1:])
    parser = argparse.ArgumentParser(
        prog="tensorbridge",
        description="Zero-copy tensor exchange over DLPack. With no arguments: the "
        "interoperability matrix of the frameworks installed here. "
        "Also: tensorbridge inspect EXPR.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--dtypes", action="store_true", help="add the per-dtype sweep")
    output.add_argument(
        "--markdown",
        action="store_true",
        help="docs/compatibility.md: the matrix and every quirk handled",
    )
    parser.add_argument("--no-timing", action="store_true", help="skip the per-exchange timing")
    parser.add_argument(
        "--frameworks",
        metavar="A,B",
        help="only these frameworks, by the names convert takes (default: every one "
        "installed); exit status 1 when one is not installed",
    )
    args = parser.parse_args(argv)
    try:
        if args.version:
            from tensorbridge._core import DLPACK_VERSION
            from tensorbridge._version import __version__

            major, minor = DLPACK_VERSION
            print(f"tensorbridge {__version__} (DLPack {major}.{minor})")
            return 0
        status = run_matrix(args)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # The reader went away (`tensorbridge | head`): nothing more to say. Python
        # flushes stdout again at exit, so it is pointed at /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
