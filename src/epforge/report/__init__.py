"""Render what epforge recorded on the hosts into a Markdown and an HTML report: a fleet overview from the
provisioning facts (epforge_preflight, _cuda_toolkit, _ml_env, _cuda_extensions, _deepep, _flashinfer,
_sglang, _steps), the final env's arch coverage as a host x component matrix (epforge_final_env), and
benchmark, sweep and probe tables with PNG plots (epforge_bench, _sweep, _collective).

Input: {host: {fact_name: fact}} where fact_name is the local fact's name without the `epforge_` prefix
(bench, sweep, collective, preflight, ...), as `epforge report` collects it from ansible_local or reads it
from a directory of saved facts (DIR/HOST/epforge_NAME.fact).

This package is the public entry `epforge report` calls; each module has one job:
read (the recorded facts in and out), tables (benchmark, sweep and probe tables), overview (fleet overview
and coverage matrix), to_markdown and to_html (the two output formats), plots (PNGs) and page (assemble and
write report.md and report.html).
"""

from __future__ import annotations

from epforge.report.overview import (
    COMPONENT_ORDER,
    MATRIX_TEXT,
    MATRIX_TITLE,
    OVERVIEW_COLUMNS,
    coverage_matrix,
    overview_rows,
)
from epforge.report.page import NO_FACTS_TEXT, render
from epforge.report.plots import plot_history, plot_latency, plot_probe, plot_throughput
from epforge.report.read import from_ansible_local, load_fact_dir, save_fact_dir
from epforge.report.tables import (
    LATENCIES,
    config_table,
    configuration_rows,
    fmt,
    history_table,
    probe_tables,
)
from epforge.report.to_html import CSS, html_table, matrix_html
from epforge.report.to_markdown import matrix_md, md_table, md_text

__all__ = [
    "COMPONENT_ORDER",
    "CSS",
    "LATENCIES",
    "MATRIX_TEXT",
    "MATRIX_TITLE",
    "NO_FACTS_TEXT",
    "OVERVIEW_COLUMNS",
    "config_table",
    "configuration_rows",
    "coverage_matrix",
    "fmt",
    "from_ansible_local",
    "history_table",
    "html_table",
    "load_fact_dir",
    "matrix_html",
    "matrix_md",
    "md_table",
    "md_text",
    "overview_rows",
    "plot_history",
    "plot_latency",
    "plot_probe",
    "plot_throughput",
    "probe_tables",
    "render",
    "save_fact_dir",
]
