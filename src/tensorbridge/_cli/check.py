# SPDX-License-Identifier: Apache-2.0
"""``tensorbridge check``: grade a DLPack producer or consumer against the standard.

    tensorbridge check EXPR                  the producer EXPR makes
    tensorbridge check --consumer EXPR       the consumer EXPR names
    tensorbridge check --all                 every installed framework, both ways
    tensorbridge check --all --markdown      ... as docs/conformance.md

EXPR is evaluated as ``tensorbridge inspect`` evaluates it (the installed frameworks
by their usual names: np, torch, jax, jnp, paddle, tf, mx, pa, xp, tvm_ffi, tb). The
checks (`tensorbridge.testing`) run in child processes, and each child evaluates EXPR
itself (a `Factory` of `producer_of` or `consumer_of`), so a crash of the library
under test is a failed check, not the end of the command. ``--all`` grades every
framework of `subjects` in child processes of its own (its producer and consumer
share them), several at a time; this process imports none of them.

Exit status: 0 when no check failed (warnings allowed), 1 when one did (with
``--all``: one of tensorbridge's own), 2 for a bad command or an EXPR that cannot be
evaluated or checked.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["consumer_of", "evaluate", "grade_all", "producer_of", "run"]

#: Frameworks whose child processes take longest (seconds of imports): started
#: first, so that the quick ones fill the gaps.
_SLOW_FIRST = ("tensorflow", "paddle", "torch", "tvm_ffi", "jax")

_ACCEPTED = (
    "EXPR is an array expression (torch.arange(4.)), evaluated afresh for every object "
    "the checks need; or a function of no arguments that returns a new array each call "
    "(lambda: torch.ones(3, 4)), or one named module:function (mylib.testing:make_array), "
    "which may take case= (see tensorbridge.testing.check_producer)"
)


def evaluate(expr: str) -> Any:
    """EXPR's value, with the frameworks importable by their usual names; a
    ``module:qualname`` is the object it names (imported)."""
    from tensorbridge._cli.inspect import LazyNames

    if re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", expr):
        from tensorbridge.testing._isolate import resolve

        return resolve(expr)

    # The names are the globals, so that a lambda of EXPR finds them when it is called.
    names = LazyNames(__builtins__=__builtins__)
    return eval(expr, names)  # the user's own code


def producer_of(expr: str) -> Callable[..., Any]:
    """The ``make`` of a producer expression: EXPR evaluated for each object when it
    is an array; EXPR itself when it is a function of no arguments returning one."""
    value = evaluate(expr)
    if hasattr(value, "__dlpack__"):

        def make() -> Any:
            return evaluate(expr)

        return make
    if callable(value):
        try:
            made = value()
        except TypeError as exc:
            raise TypeError(
                f"{expr} is a callable that cannot be called without arguments ({exc}); "
                f"write the call that makes an array, e.g. {expr}(3, 4), or a function of "
                f"no arguments: lambda: {expr}(3, 4)"
            ) from None
        if not hasattr(made, "__dlpack__"):
            raise TypeError(
                f"{expr}() returned a {type(made).__name__}, which has no __dlpack__: "
                "the function must return an array"
            )
        made_callable: Callable[..., Any] = value
        return made_callable
    raise TypeError(
        f"{expr} evaluates to a {type(value).__name__}, which has no __dlpack__ and is "
        f"not callable; {_ACCEPTED}"
    )


def consumer_of(expr: str) -> Callable[..., Any]:
    """The consumer EXPR names (evaluated once per process)."""
    value = evaluate(expr)
    if not callable(value):
        raise TypeError(
            f"{expr} evaluates to a {type(value).__name__}, not a callable; a consumer is "
            "a function taking an array, such as torch.from_dlpack"
        )
    consumer: Callable[..., Any] = value
    return consumer


def _check_one(expr: str, consumer: bool, as_json: bool, timeout: float) -> int:
    from tensorbridge import testing
    from tensorbridge.testing._isolate import Factory

    kind = "consumer" if consumer else "producer"
    target = Factory(f"{__name__}:{kind}_of", (expr,))
    check = testing.check_consumer if consumer else testing.check_producer
    report = check(target, name=expr, timeout=timeout)
    start = next((r for r in report.results if r.name == f"{kind}.start"), None)
    if start is not None:
        print(f"tensorbridge check: {start.detail}", file=sys.stderr)
        return 2
    print(report.to_json(indent=2) if as_json else str(report))
    return 0 if report.ok else 1


def _version(distribution: str) -> str:
    if distribution == "tensorbridge":
        from tensorbridge._version import __version__

        return __version__
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def grade_all(
    names: list[str] | None = None,
    *,
    timeout: float = 60.0,
    workers: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[Any], list[str]]:
    """Grade the installed frameworks of `subjects` (or those named), each in child
    processes of its own, ``workers`` at a time (default: one per CPU); the
    `conformance.Graded` of each, in the order of `SUBJECTS`, and the names of those
    not installed."""
    from tensorbridge import testing
    from tensorbridge._cli.conformance import Graded
    from tensorbridge._cli.subjects import SUBJECTS

    chosen = [s for s in SUBJECTS.values() if names is None or s.name in names]
    installed = [s for s in chosen if importlib.util.find_spec(s.module.split(".")[0])]
    missing = [s.name for s in chosen if s not in installed]
    jobs = sorted(
        installed,
        key=lambda s: _SLOW_FIRST.index(s.name) if s.name in _SLOW_FIRST else len(_SLOW_FIRST),
    )
    done: list[str] = []

    def grade(subject: Any) -> Any:
        producer, consumer = testing.check_library(
            subject.producer, subject.consumer, name=subject.name, timeout=timeout
        )
        done.append(subject.name)
        if progress is not None:
            progress(f"graded {subject.name}… {len(done)}/{len(jobs)}")
        return Graded(subject, _version(subject.distribution), producer, consumer)

    pool = ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 2)
    try:
        graded = {g.subject.name: g for g in pool.map(grade, jobs)}
    finally:
        # On Ctrl-C no other framework starts; those being graded finish (every probe
        # has its time limit, and each child is killed with its processes at its end).
        pool.shutdown(wait=True, cancel_futures=True)
    return [graded[s.name] for s in installed], missing


def _check_all(args: argparse.Namespace) -> int:
    from tensorbridge._cli import conformance
    from tensorbridge._cli.progress import Progress
    from tensorbridge._cli.subjects import SUBJECTS

    names = None
    if args.frameworks:
        names = [n.strip() for n in args.frameworks.split(",") if n.strip()]
        unknown = sorted(set(names) - set(SUBJECTS))
        if unknown:
            print(
                f"tensorbridge check: unknown framework(s) {', '.join(unknown)}; known: "
                f"{', '.join(SUBJECTS)}",
                file=sys.stderr,
            )
            return 2
    progress = Progress()
    started = time.perf_counter()
    try:
        grades, missing = grade_all(names, timeout=args.timeout, progress=progress)
    finally:
        progress.clear()
    if args.json:
        print(json.dumps(conformance.payload(grades, missing), indent=2, ensure_ascii=False))
    elif args.markdown:
        print(conformance.page(grades, missing), end="")
    else:
        for g in grades:
            for report in (g.producer, g.consumer):
                if report is not None:
                    print(f"{report}\n")
        print(conformance.summary(grades))
        if missing:
            print(f"\nnot installed here: {', '.join(missing)}")
        print(f"\n{len(grades)} frameworks graded in {time.perf_counter() - started:.1f} s")
    own = [r for g in grades if g.subject.name == "tensorbridge" for r in (g.producer, g.consumer)]
    return 1 if any(r is not None and not r.ok for r in own) else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tensorbridge check",
        description="Grade a DLPack producer or consumer against the DLPack and Array API "
        "standards (every probe that may crash runs in a child process). Frameworks are "
        "importable by their usual names (np, torch, jax, jnp, paddle, tf, mx, pa, xp, "
        f"tvm_ffi, tb). {_ACCEPTED}. Exit status 1 when a check fails, 0 with warnings "
        "only, 2 when EXPR cannot be checked.",
    )
    parser.add_argument("expr", nargs="?", help='e.g. "torch.arange(4.)"')
    role = parser.add_mutually_exclusive_group()
    role.add_argument(
        "--consumer",
        action="store_true",
        help="EXPR is a consumer, a callable taking an array (torch.from_dlpack)",
    )
    role.add_argument(
        "--all",
        action="store_true",
        help="grade every installed framework's producer and consumer (exit status 1 "
        "only when tensorbridge's own fail)",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="the reports as JSON")
    output.add_argument("--markdown", action="store_true", help="with --all: docs/conformance.md")
    parser.add_argument(
        "--frameworks",
        metavar="A,B",
        help="with --all: only these (numpy, torch, jax, paddle, tensorflow, mlx, pyarrow, "
        "array_api_strict, tvm_ffi, pydlpack, tensorbridge)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="seconds a probe may take before it fails as hung (default 60)",
    )
    return parser


def run(argv: list[str]) -> int:
    """``tensorbridge check ARGV``; the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if importlib.util.find_spec("numpy") is None:
        print("tensorbridge check: the checker needs NumPy (pip install numpy)", file=sys.stderr)
        return 2
    if not math.isfinite(args.timeout) or args.timeout <= 0:
        parser.error(f"--timeout must be a positive, finite number of seconds; got {args.timeout}")
    if args.all:
        if args.expr is not None:
            parser.error("--all takes no EXPR")
        return _check_all(args)
    if args.expr is None:
        parser.error("an EXPR is needed (or --all)")
    if args.markdown or args.frameworks:
        parser.error("--markdown and --frameworks go with --all")
    return _check_one(args.expr, args.consumer, args.json, args.timeout)
