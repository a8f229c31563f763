"""The report files of a reconciliation: JSON (everything), HTML (for reading), the console summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .report import console_summary, json_report
from .report_html import html_report


def write_reports(result: dict[str, Any], out: Path) -> dict[str, Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out / "reconciliation.json",
        "html": out / "reconciliation.html",
        "text": out / "summary.txt",
    }
    paths["json"].write_text(json_report(result), encoding="utf-8")
    paths["html"].write_text(html_report(result), encoding="utf-8")
    paths["text"].write_text(console_summary(result) + "\n", encoding="utf-8")
    return paths
