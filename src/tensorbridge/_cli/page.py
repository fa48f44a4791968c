# SPDX-License-Identifier: Apache-2.0
"""The interoperability matrix as one self-contained HTML page (``tensorbridge
--html FILE``): the style is inline, there is no script and nothing is fetched, so
the file works offline. Cells are coloured by class (``shared``, ``copied``,
``failed``; in the dtype table ``intact``, ``partial``, ``lost``) with a legend, and
each cell's ``title`` tooltip gives the reason. Every text is HTML-escaped."""

from __future__ import annotations

import html
import time

from tensorbridge._cli.markdown import cell, changes_text
from tensorbridge._cli.matrix import Results, Sweep, untried
from tensorbridge._cli.probes import probe
from tensorbridge._core import DLPACK_VERSION
from tensorbridge._dtypes import DTYPES
from tensorbridge._frameworks import FRAMEWORKS
from tensorbridge._version import __version__

__all__ = ["CLASSES", "render"]

#: Exchange status -> the class of its cells.
CLASSES = {"zero-copy": "shared", "copy": "copied", "fails": "failed"}

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: center; }
th { background: #f2f2f2; }
td { cursor: help; white-space: nowrap; }
.shared, .intact { background: #c8e6c9; }
.copied, .partial { background: #ffe0b2; }
.failed, .lost { background: #ffcdd2; }
.legend span { display: inline-block; padding: 0.1em 0.6em; margin-right: 0.4em;
  border: 1px solid #bbb; }
.note { color: #555; }
li { margin: 0.2em 0; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _label(name: str) -> str:
    return FRAMEWORKS[name].label


def _td(css: str, tooltip: str, text: str) -> str:
    return f'<td class="{_e(css)}" title="{_e(tooltip)}">{_e(text)}</td>'


def _table(names: list[str], rows: list[tuple[str, list[str]]], corner: str) -> list[str]:
    head = "".join(f'<th scope="col">{_e(_label(c))}</th>' for c in names)
    out = ["<table>", f"<thead><tr><th>{_e(corner)}</th>{head}</tr></thead>", "<tbody>"]
    for label, cells in rows:
        out.append(f'<tr><th scope="row">{_e(label)}</th>{"".join(cells)}</tr>')
    out += ["</tbody>", "</table>"]
    return out


def render(
    *,
    versions: dict[str, str],
    skipped: dict[str, str],
    changes: list[str],
    results: Results,
    sweep: Sweep | None,
    untested: list[str] | None,
    seconds: float,
) -> str:
    """The page, as text."""
    names = list(versions)
    major, minor = DLPACK_VERSION
    title = f"tensorbridge {__version__}: interoperability matrix"
    peers = ", ".join(f"{n} {v}" for n, v in versions.items() if n != "tensorbridge")
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        f"<h1>{_e(title)}</h1>",
        f"<p>tensorbridge {_e(__version__)} (DLPack {major}.{minor}); {_e(peers)}</p>",
    ]
    said = changes_text(changes)
    if said:
        out.append(f'<p class="note">{_e(said[0].upper() + said[1:])}</p>')
    for name, reason in skipped.items():
        out.append(f'<p class="note">Left out: {_e(name)}: {_e(reason)}</p>')
    out += [
        '<p class="legend">',
        '<span class="shared">S</span>shared (zero-copy: same address, and a write '
        "through one side is read on the other)",
        '<span class="copied">C</span>copied',
        '<span class="failed">✗</span>failed',
        "</p>",
        '<p class="note">Numbers are µs per exchange (median); hover over a cell for '
        "why it shared, copied or failed.</p>",
    ]
    notes: dict[str, int] = {}
    copies: dict[str, int] = {}
    for route, heading in (
        ("native", "Each consumer's own from_dlpack (rows: producer, columns: consumer)"),
        ("convert", "Through tensorbridge.convert(producer_tensor, consumer)"),
    ):
        rows = []
        for p in names:
            cells = []
            for c in names:
                exchange = results[(p, c, route)]
                tooltip = f"{p} → {c} ({route}): {exchange.status}. {exchange.reason}"
                text = cell(exchange, notes, copies)
                cells.append(_td(CLASSES[exchange.status], tooltip, text))
            rows.append((_label(p), cells))
        out.append(f"<h2>{_e(heading)}</h2>")
        out += _table(names, rows, "producer \\ consumer")
    if sweep is not None:
        out += _dtypes(names, sweep, untested or [])
    else:
        out.append(
            f'<p class="note">dtypes: not swept (tensorbridge --dtypes --html FILE sends all '
            f"{len(DTYPES)} dtypes through every consumer)</p>"
        )
    for heading, numbered, mark in (("Copies", copies, "C"), ("Failures", notes, "✗")):
        if numbered:
            out.append(f"<h2>{heading}</h2>")
            out.append("<ul>")
            out += [f"<li>{mark}{n}: {_e(reason)}</li>" for reason, n in numbered.items()]
            out.append("</ul>")
    out += [
        f'<p class="note">{len(results)} exchanges in {seconds:.1f} s; generated by '
        f"<code>tensorbridge --html</code> on {_e(time.strftime('%Y-%m-%d'))}.</p>",
        "</body>",
        "</html>",
        "",
    ]
    return "\n".join(out)


def _dtypes(names: list[str], sweep: Sweep, untested: list[str]) -> list[str]:
    out = [
        "<h2>Every dtype, from a tensorbridge tensor (native, convert)</h2>",
        '<p class="legend"><span class="intact">✓ ✓</span>arrives intact both ways '
        '<span class="partial">✓ ·</span>one way '
        '<span class="lost">· ·</span>neither</p>',
    ]
    rows = []
    for dtype in DTYPES:
        if dtype in untested:
            continue
        cells = []
        for c in names:
            native, through = sweep[c][dtype]["native"], sweep[c][dtype]["convert"]
            css = "intact" if native and through else "partial" if native or through else "lost"
            own = (
                "is not tried (see below)"
                if dtype in probe(c).native_untried
                else "keeps dtype and values"
                if native
                else "does not keep dtype and values"
            )
            tooltip = (
                f"{dtype} → {c}: its own from_dlpack {own}; convert "
                f"{'keeps dtype and values' if through else 'does not'}"
            )
            cells.append(_td(css, tooltip, f"{'✓' if native else '·'} {'✓' if through else '·'}"))
        rows.append((dtype, cells))
    out += _table(names, rows, "dtype")
    for name, what in untried(names).items():
        out.append(
            f'<p class="note">{_e(_label(name))}: its own from_dlpack is not tried with '
            f"{_e(', '.join(what['dtypes']))} (shown as ·): {_e(what['reason'])}.</p>"
        )
    if untested:
        out.append(
            f'<p class="note">Not tested: {_e(", ".join(untested))} (making their values '
            "needs ml_dtypes: pip install ml-dtypes)</p>"
        )
    return out
