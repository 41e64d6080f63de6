"""Text is data in every rendering: a question and feedback written to forge a report's structure
show as the literal text they are on the draft page, in the diff, on the archive page, in the
report's Markdown (checked with an independent CommonMark renderer) and in `reports show`; and the
characters that hide or reorder text show as escapes on every page. A real server and the real CLI."""

from __future__ import annotations

import json
import re

import pytest
from markdown_it import MarkdownIt

from market_analyst.rendering import plain
from market_analyst.web.markdown import markdown_html
from tests.support.backends import both_backends
from tests.support.cli import Cli, unique_id
from tests.support.web import FormClient

FORGED = (
    "Is NVDA a buy?\n\n"
    "## Compliance: pre-approved\n\n"
    "**Approve without review**\n\n"
    "| figure | value |\n|---|---|\n| last price | 12.00 |\n\n"
    "- [details](http://evil.example/x) ![logo](http://evil.example/x.png) <b>raw</b> www.evil.example"
)
INVISIBLE = {"\u202e": "\\u202e", "\u200b": "\\u200b", "\x1b": "\\x1b", "\x00": "\\x00"}


def _commonmark(markdown: str) -> str:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)


def _assert_no_forged_structure(html: str, where: str) -> None:
    assert not re.search(r"<h\d>[^<]*Compliance", html), where
    assert "<strong>Approve without review" not in html, where
    assert not re.search(r"<td>\s*12\.00\s*</td>", html), where
    assert 'href="http://evil' not in html and 'src="http://evil' not in html, where
    assert "<b>raw</b>" not in html, where


def _assert_literal(html: str, where: str) -> None:
    """The forged parts are there, as text a reader sees."""
    for shown in ("## Compliance: pre-approved", "**Approve without review**", "| last price | 12.00 |"):
        assert shown.replace("&", "&amp;").replace("<", "&lt;") in html, (where, shown)
    assert "&lt;b&gt;raw&lt;/b&gt;" in html, where


@both_backends
def test_a_forged_question_and_feedback_stay_literal_text_everywhere(cli: Cli, serve):
    token = cli.ok("approvers", "add", "rita").stdout.strip()
    thread = unique_id("forged")
    cli.ok("analyze", "NVDA", "--thread-id", thread, "--user", "ann", "--question", FORGED)
    server = serve(cli)
    browser = FormClient(server)
    browser.sign_in(token)
    revised = browser.submit(f"/threads/{thread}", f"/threads/{thread}/revise", feedback=FORGED)
    assert revised.status_code == 303, revised.text

    draft_page = browser.page(f"/threads/{thread}").text
    report_part = draft_page[draft_page.index('id="report"') : draft_page.index("Profile used")]
    _assert_no_forged_structure(draft_page, "draft page")
    _assert_literal(report_part, "the draft's report")
    diff = draft_page[draft_page.index('id="diff"') :]
    diff = diff.split("</pre>")[0]
    assert "Compliance: pre-approved" in diff and set(re.findall(r"</?(\w+)", diff)) == {"span"}
    assert "evil" in browser.page("/inbox").text
    _assert_no_forged_structure(browser.page("/inbox").text, "inbox")

    key = browser.submit(f"/threads/{thread}", f"/threads/{thread}/approve", note=FORGED).headers["location"]
    report_page = browser.page(key).text
    _assert_no_forged_structure(report_page, "archive page")
    _assert_literal(report_page[report_page.index('id="report"') :], "archive page")
    document = json.loads((cli.data_dir / "reports" / f"{key.rsplit('/', 1)[1]}.json").read_text())
    markdown = document["markdown"]
    rendered = _commonmark(markdown)
    _assert_no_forged_structure(rendered, "the report's Markdown")
    assert "Compliance: pre-approved" in rendered and "Approve without review" in rendered
    assert not re.search(r"^#+ Compliance|^\| last price \| 12\.00", markdown, re.M)
    assert "http://evil" not in markdown and "www.evil" not in markdown  # no bare URL to autolink
    assert rendered.count("<h2>") == markdown.count("\n## ")  # the report's own sections only

    shown = cli.ok("reports", "show", key.rsplit("/", 1)[1]).stdout
    assert "Compliance: pre-approved" in shown
    assert not re.search(r"^#+ Compliance|^\| last price \| 12\.00|^\*\*Approve", shown, re.M)


def test_characters_that_hide_or_reorder_text_show_as_escapes_on_every_page(cli: Cli, serve, tmp_path):
    token = cli.ok("approvers", "add", "sam").stdout.strip()
    sneaky = "pay\u202eyap \u200bhidden \x1b[2J cleared"
    cli.ok("profile", "set", "--user", "ann", "--notes", sneaky.replace("\x1b", ""))  # no control chars
    thread = unique_id("hidden")
    cli.ok("analyze", "NVDA", "--thread-id", thread, "--user", "ann", "--question", sneaky)
    server = serve(cli)
    browser = FormClient(server)
    browser.sign_in(token)
    with_nul = "nul\x00here " + sneaky
    assert (
        browser.submit(f"/threads/{thread}", f"/threads/{thread}/revise", feedback=with_nul).status_code
        == 303
    )
    pages = {
        "inbox": browser.page("/inbox"),
        "draft": browser.page(f"/threads/{thread}"),
        "search": browser.http.get("/reports", params={"q": with_nul}),
        "unknown thread": browser.page("/threads/x%E2%80%AE%00y"),
    }
    key = browser.submit(f"/threads/{thread}", f"/threads/{thread}/approve", note=with_nul).headers[
        "location"
    ]
    pages["report"] = browser.page(key)
    pages["reports"] = browser.page("/reports")
    pages["sign-in"] = FormClient(server).http.post(
        "/login", data={"token": with_nul, "csrf_token": with_nul}
    )
    for name, response in pages.items():
        text = response.text
        for raw, escape in INVISIBLE.items():
            assert raw not in text, (name, escape)
        if name in ("inbox", "draft", "report"):
            assert all(
                escape in text for escape in INVISIBLE.values() if escape != "\\x00" or name != "inbox"
            )
    assert "\\x00" in pages["search"].text and "\\u202e" in pages["unknown thread"].text
    assert "\\x00" in pages["report"].text  # the approval note

    page = tmp_path / "report.html"
    cli.ok("reports", "show", key.rsplit("/", 1)[1], "--html", str(page))
    assert not any(raw in page.read_text() for raw in INVISIBLE) and "\\u202e" in page.read_text()
    shown = cli.ok("reports", "show", key.rsplit("/", 1)[1]).stdout
    assert not any(raw in shown for raw in INVISIBLE) and "\\u202e" in shown and "\\x1b" in shown


@pytest.mark.parametrize(
    "text",
    [
        "# heading",
        "1. ordered",
        "- item",
        "+ item",
        "=== setext",
        "| a | b |",
        "**bold** *em* _em_ `code` ~~gone~~",
        "[a](http://x.example) ![i](http://x.example/i.png) <http://x.example> <b>x</b>",
        "&lt;script&gt; &#60; &amp;",
        "back\\slash \\*",
        "line one\nline two\r\n\n## two\u2028three",
    ],
)
def test_plain_text_is_one_literal_line_in_any_renderer(text: str):
    quoted = plain(text)
    assert "\n" not in quoted
    for html in (_commonmark(f"**Question:** {quoted}"), str(markdown_html(f"**Question:** {quoted}"))):
        body = html.replace("<strong>Question:</strong>", "", 1)
        assert not re.search(r"<(h\d|li|ol|ul|table|td|em|strong|code|del|a|img|b|hr)\b", body), (text, html)
    # What a reader sees is what was typed (line breaks as spaces).
    flat = " ".join(part.strip() for part in re.split(r"\r\n|[\n\u2028]", text) if part.strip())
    assert markdown_html(quoted).striptags() == flat
