"""The upgrade gate: `core` reads the store and decides (with the pure rule of
`regress.detect.verdict`), `render` writes the reports from web/templates/gate_report.*.j2, and
`report` holds the rows and the report that both pass around."""

from ..evidence import control_ratio
from .core import GateConfig, compare, gate, gate_ab, gate_alternating, resolve_selector
from .render import format_table, render_html, render_junit, render_markdown, summary_lines, write_reports
from .report import GateReport, GateRow

__all__ = [
    "GateConfig",
    "GateReport",
    "GateRow",
    "compare",
    "control_ratio",
    "format_table",
    "gate",
    "gate_ab",
    "gate_alternating",
    "render_html",
    "render_junit",
    "render_markdown",
    "resolve_selector",
    "summary_lines",
    "write_reports",
]
