"""The draft's Markdown as HTML, for exactly the subset `rendering.render_markdown` writes: headings,
paragraphs, bold, bullet lists and tables, and backslash escapes. Every piece of text is escaped
first; the only markup in the result is the tags made here, so model, data and reviewer text can
never become markup, and text quoted with `rendering.plain` (its punctuation escaped) shows exactly
as it was typed: an escaped `**` or `|` is a character, never bold or a table cell."""

from __future__ import annotations

import string

from markupsafe import Markup, escape

_PUNCTUATION = frozenset(string.punctuation)


def _tokens(text: str) -> list[tuple[str, str]]:
    """("text", a character) for each literal character (an escaped one included) and ("bold", "**")
    for each unescaped double asterisk."""
    tokens: list[tuple[str, str]] = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in _PUNCTUATION:
            tokens.append(("text", text[i + 1]))
            i += 2
        elif text.startswith("**", i):
            tokens.append(("bold", "**"))
            i += 2
        else:
            tokens.append(("text", text[i]))
            i += 1
    return tokens


def _inline(text: str) -> str:
    tokens = _tokens(text)
    marks = [n for n, (kind, _) in enumerate(tokens) if kind == "bold"]
    if len(marks) % 2:  # an unpaired ** is two asterisks
        tokens[marks[-1]] = ("text", "**")
    out: list[str] = []
    opened = False
    for kind, value in tokens:
        if kind == "bold":
            out.append("</strong>" if opened else "<strong>")
            opened = not opened
        else:
            out.append(str(escape(value)))
    return "".join(out)


def _cells(line: str) -> list[str]:
    """A table row's cells, split at the pipes that are not escaped."""
    line = line.strip()
    cells, current, i = [], "", 0
    while i < len(line):
        if line[i] == "\\" and i + 1 < len(line):
            current += line[i : i + 2]
            i += 2
            continue
        if line[i] == "|":
            cells.append(current)
            current = ""
        else:
            current += line[i]
        i += 1
    cells.append(current)
    if cells and not cells[0].strip():
        cells = cells[1:]
    if cells and not cells[-1].strip():
        cells = cells[:-1]
    return [cell.strip() for cell in cells]


def _table(lines: list[str]) -> str:
    head, rows = _cells(lines[0]), [_cells(line) for line in lines[2:]]
    out = ["<table><thead><tr>", *(f"<th>{_inline(c)}</th>" for c in head), "</tr></thead><tbody>"]
    for row in rows:
        out += ["<tr>", *(f"<td>{_inline(c)}</td>" for c in row), "</tr>"]
    return "".join(out + ["</tbody></table>"])


def _block(lines: list[str]) -> str:
    first = lines[0]
    if first.startswith("#"):
        level = min(len(first) - len(first.lstrip("#")) + 1, 6)  # the page's own title is the h1
        return f"<h{level}>{_inline(first.lstrip('#').strip())}</h{level}>"
    if first.startswith("|") and len(lines) > 1:
        return _table(lines)
    if first.startswith("- "):
        return "<ul>" + "".join(f"<li>{_inline(line[2:])}</li>" for line in lines) + "</ul>"
    return "<p>" + "<br>".join(_inline(line) for line in lines) + "</p>"


def markdown_html(text: str) -> Markup:
    """Safe HTML for the report's Markdown: blocks are separated by blank lines, headings stand alone."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            if current:
                blocks.append(current)
            current = [line] if line.strip() else []
            if line.startswith("#"):
                blocks.append(current)
                current = []
            continue
        current.append(line)
    if current:
        blocks.append(current)
    return Markup("\n".join(_block(block) for block in blocks))  # every text part was escaped above
