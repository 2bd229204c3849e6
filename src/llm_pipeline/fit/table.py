"""The fit check's table: place, machine, memory, estimate, headroom, then what each is."""

from __future__ import annotations

from llm_pipeline.fit.memory import GIB
from llm_pipeline.fit.rows import FitReport

HEADER = ("place", "machine", "memory", "estimate", "headroom")


def format_table(report: FitReport) -> str:
    """The report as text: a table, the parts of each estimate, and the notes."""
    lines = []
    if report.rows:
        cells = [HEADER]
        for row in report.rows:
            verdict = "" if row.problem is None else "  DOES NOT FIT"
            cells.append(
                (
                    row.place,
                    row.machine,
                    f"{row.memory} {row.capacity_gib:.4g} GiB",
                    f"~{row.estimate.total / GIB:.1f} GiB",
                    f"{row.headroom_gib:.1f} GiB ({row.headroom_gib / row.capacity_gib:.0%})"
                    + verdict,
                )
            )
        widths = [max(len(line[i]) for line in cells) for i in range(len(HEADER))]
        for index, line in enumerate(cells):
            lines.append(
                "  ".join(
                    cell.ljust(width) for cell, width in zip(line, widths, strict=True)
                ).rstrip()
            )
            if index == 0:
                lines.append("  ".join("-" * width for width in widths))
        lines.append("")
        lines.append("estimates (GiB):")
        for row in report.rows:
            lines.append(f"  {row.place} {row.memory}: {row.estimate.describe()} ({row.settings})")
    for note in [*report.notes, *report.skipped]:
        lines.append(f"note: {note}")
    return "\n".join(lines)
