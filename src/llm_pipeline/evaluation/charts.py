"""The reports' inline SVG charts, built here only: the evaluation page's length histogram,
the classifier page's confusion matrix and the run page's loss curve.

Inline SVG needs no script and no external asset, so a page stays one file that opens
anywhere; each chart is one `<svg role="img">` with a label for screen readers and a
`<title>` tooltip on every mark.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "confusion_matrix_chart",
    "escape",
    "heat_colour",
    "length_histogram",
    "loss_chart",
    "svg_open",
]

#: The loss curve's series: the training log's key, its name on the chart, its colour.
_SERIES = (("loss", "train loss", "#0969da"), ("eval_loss", "eval loss", "#fb8f44"))


def escape(text: object) -> str:
    """`text` safe to put in the page's markup, attributes included."""
    return html.escape(str(text), quote=True)


def svg_open(width: float, height: float, label: str, svg_id: str = "") -> str:
    """The opening tag of one of the report's inline SVG charts (`label`: what it shows, for
    screen readers)."""
    ident = f' id="{escape(svg_id)}"' if svg_id else ""
    return (
        f'<svg{ident} xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
        f'height="{height:.0f}" role="img" aria-label="{escape(label)}">'
    )


#: The confusion matrix's shading: white for no rows, this blue for the most.
_HEAT = (9, 105, 218)
#: Characters of a label name shown on the matrix's axes (the whole name is its tooltip).
_AXIS_LABEL_CHARS = 18


def heat_colour(share: float) -> str:
    """The fill of a cell holding `share` (0..1) of the largest count: darker for more."""
    share = min(max(share, 0.0), 1.0)
    r, g, b = (round(255 + (c - 255) * share) for c in _HEAT)
    return f"#{r:02x}{g:02x}{b:02x}"


def confusion_matrix_chart(
    matrix: np.ndarray | Sequence[Sequence[int]],
    rows: Sequence[str],
    columns: Sequence[str],
    *,
    row_title: str = "reference",
    column_title: str = "predicted",
    svg_id: str = "confusion-matrix",
) -> str:
    """Counts as a labelled grid of cells, inline SVG: each cell shaded by its count (the
    largest the darkest) with the count written in it; `rows` and `columns` name the
    labels along each axis."""
    counts = np.asarray(matrix, dtype=np.int64)
    n_rows, n_cols = counts.shape
    peak = int(counts.max(initial=0)) or 1
    cell = max(30.0, min(64.0, 640.0 / max(n_rows, n_cols)))
    # Room for the row names, and for the column names slanted at 45°; ~6.5 px a character.
    left = 16 + 6.5 * max((len(_short(name)) for name in rows), default=1)
    top = 24 + 4.6 * max((len(_short(name)) for name in columns), default=1)
    width, height = left + cell * n_cols + 90, top + cell * n_rows + 28
    parts = [svg_open(width, height, f"confusion matrix: {row_title} by {column_title}", svg_id)]
    for j, name in enumerate(columns):
        x, y = left + (j + 0.5) * cell, top - 8
        parts.append(
            f'<text x="{x:.1f}" y="{y:.1f}" transform="rotate(-45 {x:.1f} {y:.1f})">'
            f"<title>{escape(name)}</title>{escape(_short(name))}</text>"
        )
    for i, name in enumerate(rows):
        y = top + (i + 0.5) * cell + 4
        parts.append(
            f'<text x="{left - 8}" y="{y:.1f}" text-anchor="end">'
            f"<title>{escape(name)}</title>{escape(_short(name))}</text>"
        )
        for j, count in enumerate(counts[i]):
            share = int(count) / peak
            x, y0 = left + j * cell, top + i * cell
            ink = "#ffffff" if share > 0.55 else "#1f2328"
            tip = f"{rows[i]} → {columns[j]}: {int(count)}"
            parts.append(
                f'<g class="cell" data-count="{int(count)}"><rect x="{x:.1f}" y="{y0:.1f}" '
                f'width="{cell:.1f}" height="{cell:.1f}" fill="{heat_colour(share)}" '
                f'stroke="#d0d7de"><title>{escape(tip)}</title></rect>'
                f'<text x="{x + cell / 2:.1f}" y="{y0 + cell / 2 + 4:.1f}" text-anchor="middle" '
                f'style="fill:{ink}">{int(count)}</text></g>'
            )
    parts.append(
        f'<text x="{left + cell * n_cols / 2:.1f}" y="{height - 6:.1f}" text-anchor="middle">'
        f"{escape(column_title)} (columns); {escape(row_title)} (rows)</text></svg>"
    )
    return "".join(parts)


def _short(name: str) -> str:
    return name if len(name) <= _AXIS_LABEL_CHARS else name[: _AXIS_LABEL_CHARS - 1] + "…"


def length_histogram(
    predictions: Sequence[str], references: Sequence[str], output: str = "summary"
) -> str:
    """Side-by-side bars of generated and reference lengths in words, as inline SVG."""
    generated = np.array([len(t.split()) for t in predictions])
    wanted = np.array([len(t.split()) for t in references])
    top = max(int(generated.max(initial=0)), int(wanted.max(initial=0)), 1)
    step = math.ceil((top + 1) / 20)  # at most 20 bins, each a whole number of words
    bins = math.ceil((top + 1) / step)
    edges = np.arange(0, step * bins + 1, step)
    series = [
        ("generated", "#0969da", np.histogram(generated, edges)[0]),
        ("reference", "#fb8f44", np.histogram(wanted, edges)[0]),
    ]
    peak = max(int(counts.max()) for _, _, counts in series) or 1
    width, height, left, bottom, top_pad = 760, 260, 44, 36, 24
    plot_w, plot_h = width - left - 12, height - bottom - top_pad
    slot = plot_w / bins
    bar = slot * 0.4
    parts = [
        svg_open(width, height, f"histogram of generated and reference {output} lengths"),
        f'<line x1="{left}" y1="{top_pad + plot_h}" x2="{left + plot_w}" '
        f'y2="{top_pad + plot_h}" stroke="#57606a"/>',
        f'<text x="{left - 6}" y="{top_pad + 4}" text-anchor="end">{peak}</text>',
        f'<text x="{left - 6}" y="{top_pad + plot_h}" text-anchor="end">0</text>',
    ]
    for s, (name, colour, counts) in enumerate(series):
        for b, count in enumerate(counts):
            h = plot_h * int(count) / peak
            x = left + b * slot + slot * 0.1 + s * bar
            label = f"{name}: {count} with {edges[b]}–{edges[b + 1] - 1} words"
            parts.append(
                f'<rect x="{x:.1f}" y="{top_pad + plot_h - h:.1f}" width="{bar:.1f}" '
                f'height="{h:.1f}" fill="{colour}"><title>{escape(label)}</title></rect>'
            )
        parts.append(
            f'<rect x="{left + plot_w - 170 + s * 90}" y="4" width="10" height="10" '
            f'fill="{colour}"/><text x="{left + plot_w - 156 + s * 90}" y="13">{name}</text>'
        )
    for b in range(0, bins + 1, max(1, bins // 10)):
        parts.append(
            f'<text x="{left + b * slot:.1f}" y="{top_pad + plot_h + 14}" '
            f'text-anchor="middle">{edges[b]}</text>'
        )
    parts.append(
        f'<text x="{left + plot_w / 2:.0f}" y="{height - 4}" text-anchor="middle">'
        f"words per {escape(output)}</text></svg>"
    )
    return "".join(parts)


def loss_chart(history: Sequence[dict[str, Any]]) -> str:
    """Train and eval loss against the step, as an inline SVG line chart."""
    series = []
    for key, name, colour in _SERIES:
        points = [
            (float(entry["step"]), float(entry[key]))
            for entry in history
            if key in entry and "step" in entry
        ]
        if points:
            series.append((name, colour, points))
    if not series:
        return "<p>No loss was logged (fewer steps than train.logging_steps).</p>"
    steps = [x for _, _, points in series for x, _ in points]
    losses = [y for _, _, points in series for _, y in points]
    # One logged step (a short run) is drawn from step 0, not in a 1-step-wide window.
    x_low, x_high = min(steps), max(steps)
    x_low = 0.0 if x_low == x_high else x_low
    y_low, y_high = min(0.0, min(losses)), max(losses) * 1.05 or 1.0
    width, height, left, bottom, top = 760, 280, 48, 36, 24
    plot_w, plot_h = width - left - 16, height - bottom - top

    def x(step: float) -> float:
        return left + plot_w * (step - x_low) / (x_high - x_low)

    def y(loss: float) -> float:
        return top + plot_h * (1 - (loss - y_low) / (y_high - y_low))

    parts = [
        svg_open(width, height, "training and evaluation loss by step", "loss-curve"),
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        'stroke="#57606a"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#57606a"/>',
    ]
    for value in (y_low, (y_low + y_high) / 2, y_high):
        parts.append(
            f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{value:.2f}</text>'
        )
    # Steps are whole numbers: a tick at a half step would show as its neighbour's twin.
    for value in sorted({round(v) for v in (x_low, (x_low + x_high) / 2, x_high)}):
        parts.append(
            f'<text class="x-tick" x="{x(value):.1f}" y="{top + plot_h + 14}" '
            f'text-anchor="middle">{value}</text>'
        )
    for i, (name, colour, points) in enumerate(series):
        path = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in points)
        parts.append(
            f'<polyline class="series" data-name="{escape(name)}" points="{path}" fill="none" '
            f'stroke="{colour}" stroke-width="2"/>'
        )
        for s, v in points:
            parts.append(
                f'<circle cx="{x(s):.1f}" cy="{y(v):.1f}" r="2.5" fill="{colour}">'
                f"<title>{escape(name)} {v:.3f} at step {s:.0f}</title></circle>"
            )
        parts.append(
            f'<rect x="{left + plot_w - 190 + i * 95}" y="4" width="10" height="10" '
            f'fill="{colour}"/><text x="{left + plot_w - 176 + i * 95}" y="13">'
            f"{escape(name)}</text>"
        )
    parts.append(
        f'<text x="{left + plot_w / 2:.0f}" y="{height - 4}" text-anchor="middle">step</text></svg>'
    )
    return "".join(parts)
