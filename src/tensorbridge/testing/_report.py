# SPDX-License-Identifier: Apache-2.0
"""The outcome of a conformance check: one `CheckResult` per rule, gathered in a `Report`."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["STATUSES", "CheckResult", "Report", "Status", "worst"]

Status = Literal["pass", "fail", "warn", "skip"]

#: The statuses, from best to worst.
STATUSES: tuple[Status, ...] = ("pass", "skip", "warn", "fail")


def worst(statuses: Iterable[Status]) -> Status:
    """The worst of some statuses (``pass`` for none)."""
    rank = max((STATUSES.index(s) for s in statuses), default=0)
    return STATUSES[rank]


@dataclass(frozen=True)
class CheckResult:
    """One rule checked on the library under test.

    ``status`` is ``"pass"``, ``"fail"`` (a rule the standard says *must*),
    ``"warn"`` (a rule it says *should*, or something the check could only do in part)
    or ``"skip"`` (the rule does not apply, or the library cannot make what it needs);
    ``detail`` says what was seen; ``clause`` names the part of the standard tested.
    """

    name: str
    status: Status
    detail: str
    clause: str

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"CheckResult.status must be one of {STATUSES}; got {self.status!r}")


@dataclass
class Report:
    """The results of `check_producer` or `check_consumer` on one library.

    ``ok`` is true when no check failed (warnings and skips allowed).
    """

    kind: Literal["producer", "consumer"]
    name: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "fail"]

    def counts(self) -> dict[str, int]:
        """How many results have each status."""
        return {s: sum(r.status == s for r in self.results) for s in STATUSES}

    def __getitem__(self, name: str) -> CheckResult:
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(name)

    def __str__(self) -> str:
        counts = self.counts()
        summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        lines = [f"DLPack {self.kind} conformance of {self.name}: {summary or 'no checks'}"]
        width = max((len(r.name) for r in self.results), default=0)
        for r in self.results:
            lines.append(f"  {r.status.upper():4}  {r.name:{width}}  {r.detail}")
            if r.status in ("fail", "warn"):
                lines.append(f"        {'':{width}}  ({r.clause})")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "ok": self.ok,
            "counts": self.counts(),
            "results": [asdict(r) for r in self.results],
        }

    def to_json(self, **kwargs: Any) -> str:
        """The report as JSON (``kwargs`` go to `json.dumps`, e.g. ``indent=2``)."""
        return json.dumps(self.to_dict(), **kwargs)
