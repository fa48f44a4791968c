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
``--all``: one of tensorbridge's own, or a framework could not be imported; a closed
output pipe is 1 too, as for the other commands), 2 for a bad command or an EXPR that
cannot be evaluated or checked, 130 on Ctrl-C (the running children killed at once).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tensorbridge._cli.interrupts import Interrupted

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
        from tensorbridge._cli.inspect import NAMES, owner
        from tensorbridge._cli.probes import probe
        from tensorbridge.testing._isolate import resolve

        value = resolve(expr)
        # The setup the names get (JAX's 64-bit types), for the frameworks imported by
        # now, so that jax.dlpack:from_dlpack is graded as jax.dlpack.from_dlpack is.
        owners = {owner(m) for m in NAMES.values() if m in sys.modules}
        for name in sorted(o for o in owners if o is not None):
            probe(name).prepare()
        return value

    # The names are the globals, so that a lambda of EXPR finds them when it is called.
    names = LazyNames(__builtins__=__builtins__)
    return eval(expr, names)  # the user's own code


def producer_of(expr: str) -> Callable[..., Any]:
    """The ``make`` of a producer expression: EXPR evaluated for each object when it
    is an array; EXPR itself when it is a function of no arguments returning one."""
    value = evaluate(expr)
    if isinstance(value, type):
        raise TypeError(
            f"{expr} is a type, not a producer object: write an expression that makes an "
            "array, e.g. np.ones(3) or lambda: np.ones(3)"
        )
    if hasattr(value, "__dlpack__"):

        def make() -> Any:
            return evaluate(expr)

        return make
    if callable(value):
        try:
            inspect.signature(value).bind()
        except TypeError as exc:
            raise _needs_arguments(expr, exc) from None
        except ValueError:  # no signature (some builtins): only a call tells
            try:
                made = value()
            except TypeError as exc:
                raise _needs_arguments(expr, exc) from None
        else:
            made = value()  # the function's own errors are its own
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


def _needs_arguments(expr: str, exc: TypeError) -> TypeError:
    return TypeError(
        f"{expr} is a callable that cannot be called without arguments ({exc}); write the "
        f"call that makes an array, e.g. {expr}(3, 4), or a function of no arguments: "
        f"lambda: {expr}(3, 4)"
    )


def imported(module: str, target: str) -> Any:
    """The object ``target`` (``module:qualname``) names, once ``module`` (a graded
    framework) is imported: a framework whose import fails or hangs then fails at the
    start of the checks (it could not be graded), not in each of them."""
    from tensorbridge.testing._isolate import resolve

    importlib.import_module(module)
    return resolve(target)


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
    from tensorbridge._cli.conformance import Graded, stable
    from tensorbridge._cli.subjects import SUBJECTS
    from tensorbridge.testing import _isolate
    from tensorbridge.testing._isolate import Factory

    chosen = [s for s in SUBJECTS.values() if names is None or s.name in names]
    installed = [s for s in chosen if importlib.util.find_spec(s.module.split(".")[0])]
    missing = [s.name for s in chosen if s not in installed]
    jobs = sorted(
        installed,
        key=lambda s: _SLOW_FIRST.index(s.name) if s.name in _SLOW_FIRST else len(_SLOW_FIRST),
    )
    started: list[str] = []
    done: list[str] = []

    def grade(subject: Any) -> Any:
        started.append(subject.name)

        def target(name: str | None) -> Any:
            return None if name is None else Factory(f"{__name__}:imported", (subject.module, name))

        producer, consumer = testing.check_library(
            target(subject.producer), target(subject.consumer), name=subject.name, timeout=timeout
        )
        done.append(subject.name)
        if progress is not None:
            progress(f"graded {subject.name}… {len(done)}/{len(jobs)}")
        starts = [
            r.detail
            for report in (producer, consumer)
            for r in report.results
            if r.name.endswith(".start")
        ]
        broken = stable(starts[0]) if starts else None
        return Graded(subject, _version(subject.distribution), producer, consumer, broken)

    _isolate.uncancel()
    pool = ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 2)
    try:
        graded = {g.subject.name: g for g in pool.map(grade, jobs)}
    except KeyboardInterrupt as exc:
        # Ctrl-C: no other framework starts, and the children running are killed with
        # their process groups at once (their threads then stop: `Cancelled`).
        running = len(started) - len(done)
        _isolate.cancel_all()
        pool.shutdown(wait=False, cancel_futures=True)
        raise Interrupted("tensorbridge check", f"stopping {running} running checks") from exc
    pool.shutdown(wait=True)
    return [graded[s.name] for s in installed], missing


def _check_all(args: argparse.Namespace) -> int:
    from tensorbridge._cli import conformance
    from tensorbridge._cli.progress import Progress
    from tensorbridge._cli.subjects import SUBJECTS

    names = None
    if args.frameworks is not None:
        names = [n.strip() for n in args.frameworks.split(",") if n.strip()]
        if not names:
            print(
                f"tensorbridge check: --frameworks {args.frameworks!r} names no framework; "
                f"known: {', '.join(SUBJECTS)}",
                file=sys.stderr,
            )
            return 2
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
    broken = [g for g in grades if g.broken is not None]
    grades = [g for g in grades if g.broken is None]
    for g in broken:
        print(
            f"tensorbridge check: {g.subject.name} could not be imported, so it was not "
            f"graded: {g.broken}",
            file=sys.stderr,
        )
    if not grades and not broken:
        print(
            f"tensorbridge check: none of {', '.join(missing)} is installed here",
            file=sys.stderr,
        )
        return 2
    if args.markdown and broken:
        print(
            "tensorbridge check: the page is not written: it would leave out "
            f"{', '.join(g.subject.name for g in broken)}",
            file=sys.stderr,
        )
        return 1
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
    return 1 if broken or any(r is not None and not r.ok for r in own) else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tensorbridge check",
        description="Grade a DLPack producer or consumer against the DLPack and Array API "
        "standards (every probe that may crash runs in a child process). EXPR is Python "
        "code, run as written, as tensorbridge inspect runs it (for a producer, once for "
        "every object the checks need, in child processes, with your rights; "
        "module:function imports that module): never pass text you would not run "
        "yourself. Frameworks are importable by their usual names (np, torch, jax, jnp, "
        "paddle, tf, mx, pa, xp, tvm_ffi, tb); once JAX is imported, by name or by "
        "module:function, its 64-bit types are switched on (jax_enable_x64), as "
        f"tensorbridge inspect does. {_ACCEPTED}. Exit status 0 when no check failed "
        "(warnings allowed), 1 when one did (or a framework of --all could not be "
        "imported, or the output pipe was closed, as with | head), 2 for a bad command or "
        "an EXPR that cannot be checked, 130 on Ctrl-C.",
    )
    parser.add_argument("expr", nargs="?", metavar="EXPR", help='e.g. "torch.arange(4.)"')
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
        "only when tensorbridge's own fail, or a framework could not be imported)",
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
        help="seconds a probe may take before it fails as hung, and so may building the "
        "target in each child process: importing the framework and running EXPR "
        "(default 60)",
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
        if args.markdown and args.frameworks is not None:
            parser.error(
                "--markdown writes the whole page (docs/conformance.md): it takes no --frameworks"
            )
        return _check_all(args)
    if args.expr is None:
        parser.error("an EXPR is needed (or --all)")
    if args.markdown or args.frameworks is not None:
        parser.error("--markdown and --frameworks go with --all")
    return _check_one(args.expr, args.consumer, args.json, args.timeout)
