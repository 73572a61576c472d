"""autotune report: what a study found, read from its Optuna storage (no torch, no GPU).

The data is computed first (`collect`: a typed `Report`, a `Row` a trial), then rendered: Rich
tables, JSON, Markdown, or HTML with plots.
"""

from autotune.report._collect import collect
from autotune.report._data import Report, Row
from autotune.report._html import pareto_front, write_html
from autotune.report._render import to_json, to_markdown
from autotune.report._table import fmt, rich_table, row_of
from autotune.report._terminal import render_rich
from autotune.study.load import load_study

__all__ = [
    "Report",
    "Row",
    "collect",
    "load_study",
    "pareto_front",
    "render_rich",
    "rich_table",
    "row_of",
    "fmt",
    "to_json",
    "to_markdown",
    "write_html",
]
