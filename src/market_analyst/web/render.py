"""HTML: the Jinja2 templates (autoescaped: tickers, questions, feedback, notes and model text are
data; every value shown has its control and invisible characters, such as a right-to-left override
or a zero-width space, turned into visible escapes), the filters they use, and the standalone page
`reports show KEY --html` writes."""

from __future__ import annotations

import difflib
import functools
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from market_analyst.formatting import pct, printable, signed_pct
from market_analyst.settings import Settings
from market_analyst.web.chart import chart_data_uri, chart_title
from market_analyst.web.markdown import markdown_html

HERE = Path(__file__).parent


def age(then: str | None, now: datetime) -> str:
    """How long ago an ISO time stamp was, in the largest whole unit ("3 h ago")."""
    if not then:
        return "unknown"
    seconds = max(int((now - datetime.fromisoformat(then)).total_seconds()), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return "just now"


def revision_diff(before: str, after: str) -> list[tuple[str, str]]:
    """The changed lines between two drafts' Markdown, with a line of context: ("add" | "del" |
    "same" | "gap", text)."""
    lines: list[tuple[str, str]] = []
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=1):
        if line.startswith(("---", "+++")):
            continue
        kind = {"+": "add", "-": "del", "@": "gap"}.get(line[:1], "same")
        lines.append((kind, "…" if kind == "gap" else line[1:]))
    return lines


def feedback_history(drafts: list[dict[str, Any]]) -> list[tuple[int | None, str]]:
    """Each piece of feedback, oldest first, with the revision it led to (None where the thread's
    history no longer shows which: a checkpointer that keeps only the latest checkpoint)."""
    history: list[tuple[int | None, str]] = []
    seen = 0
    for draft in drafts:
        items = list(draft.get("feedback") or [])
        new = items[seen:]
        history += [(None, text) for text in new[:-1]]
        if new:
            history.append((draft["revision"], new[-1]))
        seen = max(seen, len(items))
    return history


def visible(value: Any) -> Any:
    """What a template shows for `value`: text with its control and invisible characters escaped
    (markup made here stays markup: the escapes are plain ASCII and cannot open a tag)."""
    if isinstance(value, Markup):
        return Markup(printable(str(value)))
    if isinstance(value, str):
        return printable(value)
    return value


@functools.cache
def environment() -> Environment:
    """The templates, with autoescaping on for every one of them, and every value shown made
    visible first."""
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=visible,
    )
    env.filters.update(pct=pct, signed_pct=signed_pct, markdown=markdown_html)
    return env


def render(name: str, **context: Any) -> str:
    """One template, rendered."""
    return environment().get_template(name).render(**context)


def chart_cache_dir(settings: Settings) -> Path:
    """Where matplotlib keeps its font cache: private to this data directory."""
    return settings.data_dir / "cache" / "matplotlib"


def report_context(document: dict[str, Any]) -> dict[str, Any]:
    """What the report template needs from an archived document."""
    report = dict(document["report"], markdown=document["markdown"])
    return {"document": document, "report": report, "feedback": feedback_history([report])}


def standalone_report(document: dict[str, Any], settings: Settings) -> str:
    """The report page as one file: its style inline, its chart a `data:` URI, no links it needs."""
    context = report_context(document)
    report = context["report"]
    chart = None
    if report.get("chart"):
        chart = chart_data_uri(report["chart"], chart_title(report), chart_cache_dir(settings))
    style = (HERE / "static" / "style.css").read_text()
    return render("report.html", chart_src=chart, standalone=True, style=style, approver=None, **context)
