# SPDX-License-Identifier: Apache-2.0
"""The grades of ``tensorbridge check --all``: the tables frameworks x checks, as text
and as ``docs/conformance.md`` (with every failure and warning, the known bugs and
the versions).

The page holds nothing that changes from run to run on the same installation (no
date, no timing, no address), so a test can regenerate it and compare it whole
(``tests/testing/test_conformance_doc.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tensorbridge._cli.markdown import table
from tensorbridge._cli.subjects import Subject
from tensorbridge._core import DLPACK_VERSION
from tensorbridge._version import __version__
from tensorbridge.testing import Report

__all__ = [
    "KNOWN_BUGS",
    "REGENERATE",
    "Graded",
    "KnownBug",
    "page",
    "payload",
    "stable",
    "summary",
]

#: The command that writes docs/conformance.md.
REGENERATE = "tensorbridge check --all --markdown > docs/conformance.md"


@dataclass
class Graded:
    """One framework's grades (a report is None when that role was not graded)."""

    subject: Subject
    version: str
    producer: Report | None
    consumer: Report | None
    #: Why the framework could not be graded (its import failed or hung), or None.
    broken: str | None = None


@dataclass(frozen=True)
class KnownBug:
    """A bug found by hand before the checker existed, and the check that names it."""

    framework: str
    check: str
    text: str


#: The bugs tensorbridge's interop work found by hand (issue 14): each must be a
#: failure of the check named here.
KNOWN_BUGS = (
    KnownBug("torch", "consumer.negative_strides", "torch.from_dlpack aborts on negative strides"),
    KnownBug("paddle", "producer.dlpack_device", "Paddle reports its device id as None"),
    KnownBug("paddle", "consumer.byte_offset", "Paddle's from_dlpack ignores byte_offset"),
    KnownBug("paddle", "producer.struct.dtype", "Paddle exports uint16 tensors as bfloat16"),
    KnownBug("paddle", "consumer.dtypes", "Paddle imports uint16 tensors as bfloat16"),
    KnownBug("pyarrow", "consumer.legacy_answer", "PyArrow refuses legacy capsules"),
    KnownBug(
        "mlx",
        "consumer.read_after_free",
        "MLX reads a used capsule after freeing it (it calls the deleter without "
        "renaming the capsule)",
    ),
    KnownBug("tvm_ffi", "producer.read_only", "tvm-ffi drops READ_ONLY"),
    KnownBug(
        "pydlpack",
        "producer.struct.kind",
        "pydlpack puts a versioned struct in a capsule named dltensor",
    ),
)

_CELLS = {"pass": "pass", "fail": "**fail**", "warn": "warn", "skip": "skip"}


def _reports(graded: Graded) -> list[Report]:
    return [r for r in (graded.producer, graded.consumer) if r is not None]


def _rows(grades: list[Graded], kind: str) -> list[str]:
    """The check names of one role, in the order the checks ran."""
    names: dict[str, None] = {}
    for g in grades:
        report = g.producer if kind == "producer" else g.consumer
        for r in report.results if report is not None else ():
            names.setdefault(r.name, None)
    return list(names)


def _grade_table(grades: list[Graded], kind: str, markdown: bool) -> str:
    headers = [f"{kind} check", *(g.subject.name for g in grades)]
    rows = []
    for name in _rows(grades, kind):
        row = [f"`{name}`" if markdown else name]
        for g in grades:
            report = g.producer if kind == "producer" else g.consumer
            status = None
            if report is not None:
                status = next((r.status for r in report.results if r.name == name), None)
            cell = "—" if status is None else (_CELLS[status] if markdown else status)
            row.append(cell)
        rows.append(row)
    return table(headers, rows, markdown)


def stable(detail: str) -> str:
    """A detail without what changes between runs: a crashed child's last output
    (native stack frames), addresses, the checker's own line numbers."""
    detail = re.sub(r"; last output: .*?(?= \(while freeing| after the last probe|$)", "", detail)
    detail = re.sub(r" \(at [\w.]+\.py:\d+\)", "", detail)
    return re.sub(r"0x[0-9a-fA-F]{6,}", "0x…", detail)


def _escape(text: str) -> str:
    """Text as Markdown shows it: dunder names (``__dlpack__``) would be bold, ``<...>``
    taken for HTML, ``*`` for emphasis."""
    return text.replace("__", "\\_\\_").replace("<", "\\<").replace("*", "\\*")


def _status_of(graded: Graded | None, check: str) -> str | None:
    if graded is None:
        return None
    for report in _reports(graded):
        for r in report.results:
            if r.name == check:
                return r.status
    return None


def _known_bugs(grades: list[Graded]) -> list[str]:
    by_name = {g.subject.name: g for g in grades}
    rows = []
    for bug in KNOWN_BUGS:
        graded = by_name.get(bug.framework)
        status = _status_of(graded, bug.check)
        if graded is None:
            here = "not installed here"
        elif status == "fail":
            here = f"**fail** ({graded.version})"
        else:
            here = f"not reproduced with {graded.version}: {status or 'not checked'}"
        rows.append([bug.framework, bug.text, f"`{bug.check}`", here])
    return [
        "## Known bugs",
        "",
        "What tensorbridge's interoperability work found by hand, each a failure of the "
        "check that names it:",
        "",
        table(["framework", "bug", "check", "here"], rows, markdown=True),
    ]


def _details(graded: Graded) -> list[str]:
    s = graded.subject
    lines = [
        f"### {s.name} {graded.version}",
        "",
        f"- Producer: {s.producer_text}.",
        f"- Consumer: {s.consumer_text}.",
    ]
    for status, title in (("fail", "Failures"), ("warn", "Warnings")):
        items = [
            f"- `{r.name}`: {_escape(stable(r.detail))} ({_escape(r.clause)})"
            for report in _reports(graded)
            for r in report.results
            if r.status == status
        ]
        lines += ["", f"{title}:", ""] + (items or ["- none"])
    return lines


def page(grades: list[Graded], missing: list[str]) -> str:
    """docs/conformance.md."""
    major, minor = DLPACK_VERSION
    versions = ", ".join(f"{g.subject.name} {g.version}" for g in grades)
    lines = [
        "# DLPack conformance",
        "",
        f"Generated by `tensorbridge check --all --markdown`; do not edit by hand. "
        f"Regenerate after upgrading a framework: `{REGENERATE}`.",
        "",
        f"tensorbridge {__version__} (DLPack {major}.{minor}); {versions}",
        "",
        "Each framework's producer (the `__dlpack__`, `__dlpack_device__` and C exchange "
        "table of its arrays) and consumer (its `from_dlpack`) graded by "
        "`tensorbridge.testing.check_producer` and `check_consumer` on the CPU. "
        "**fail**: a rule the DLPack or Array API standard says *must* is broken; "
        "warn: a *should*, or something allowed that loses information; skip: the rule "
        "does not apply or the framework cannot make what it needs. Every probe runs in "
        "a child process, one per framework: a crash is a failure of the check that "
        "caused it, not the end of the run.",
    ]
    if missing:
        lines += ["", f"Not installed here, so not graded: {', '.join(missing)}."]
    lines += ["", *_known_bugs(grades)]
    lines += ["", "## Producers", "", _grade_table(grades, "producer", True)]
    lines += ["", "## Consumers", "", _grade_table(grades, "consumer", True)]
    lines += ["", "## Failures and warnings, by framework"]
    for graded in grades:
        lines += ["", *_details(graded)]
    lines += [
        "",
        "## Regenerate",
        "",
        "```sh",
        REGENERATE,
        "```",
        "",
        "`tests/testing/test_conformance_doc.py` regenerates this page and compares it, "
        "so it fails when a framework's grades change (an upgrade) or a check does.",
    ]
    return "\n".join(lines) + "\n"


def summary(grades: list[Graded]) -> str:
    """The two grade tables, as aligned text."""
    return "\n\n".join(_grade_table(grades, kind, False) for kind in ("producer", "consumer"))


def payload(grades: list[Graded], missing: list[str]) -> dict[str, Any]:
    """The grades as JSON-ready data."""
    return {
        "tensorbridge": __version__,
        "dlpack": list(DLPACK_VERSION),
        "missing": missing,
        "frameworks": {
            g.subject.name: {
                "version": g.version,
                "producer": g.producer.to_dict() if g.producer is not None else None,
                "consumer": g.consumer.to_dict() if g.consumer is not None else None,
            }
            for g in grades
        },
        "known_bugs": [
            {
                "framework": b.framework,
                "check": b.check,
                "bug": b.text,
                "status": _status_of(
                    next((g for g in grades if g.subject.name == b.framework), None), b.check
                ),
            }
            for b in KNOWN_BUGS
        ],
    }
