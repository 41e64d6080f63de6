"""The shape of the package as a checked contract: the import layers and the one door to the adapters
(`pyproject.toml`, `[tool.importlinter]`), and the settings table that `.env.example` mirrors."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from market_analyst.settings import VARIABLES, Settings
from tests.support import REPO

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` over the package under `root/src`, with `root/pyproject.toml`'s contracts."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root / "src"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_import_contracts_hold():
    result = _lint_imports(REPO)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "2 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "planted", "broken"),
    [
        # A node reaching up to the workflow: a back-edge across the layers.
        (
            "nodes/analyze.py",
            "import market_analyst.workflow",
            "market_analyst.nodes is not allowed to import",
        ),
        # The CLI opening the archive itself instead of going through the factory.
        (
            "cli/reports.py",
            "import market_analyst.persistence.archive.files",
            "Adapters (persistence)",
        ),
    ],
)
def test_a_planted_back_edge_breaks_the_contract(tmp_path: Path, module: str, planted: str, broken: str):
    shutil.copytree(
        REPO / "src", tmp_path / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__")
    )
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    with open(tmp_path / "src" / "market_analyst" / module, "a") as handle:
        handle.write(f"\n{planted}  # planted by the test\n")
    result = _lint_imports(tmp_path)
    assert result.returncode != 0
    assert "1 broken" in result.stdout and broken in result.stdout, result.stdout[-3000:]


def test_settings_read_exactly_the_variables_env_example_lists():
    aliases = {field.validation_alias for field in Settings.model_fields.values()}
    assert aliases == set(VARIABLES)
    defaults = Settings.load(environ={}, dotenv=None)
    assert defaults.durability == VARIABLES["MA_DURABILITY"] and defaults.lease_ttl_seconds == float(
        VARIABLES["MA_LEASE_TTL_SECONDS"]
    )


@pytest.mark.parametrize(
    ("name", "value", "needle"),
    [
        (
            "MA_DURABILITY",
            "sometimes",
            "MA_DURABILITY='sometimes': Input should be 'sync', 'async' or 'exit'",
        ),
        ("MA_LEASE_TTL_SECONDS", "abc", "MA_LEASE_TTL_SECONDS='abc'"),
        ("MA_REDIS_SHALLOW", "maybe", "MA_REDIS_SHALLOW='maybe'"),
        ("SOURCE_DATE_EPOCH", "soon", "is not a whole number of seconds"),
        ("MA_CHECKPOINTER", "mysql", "MA_CHECKPOINTER='mysql'"),
        ("MA_SESSION_IDLE", "0s", "MA_SESSION_IDLE='0s': must be at least one second"),
        ("MA_SESSION_MAX", "forever", "MA_SESSION_MAX='forever': 'forever' is not an age"),
        ("MA_ALLOWED_HOSTS", "ok.example,bad/name", "'bad/name' is not a host name"),
        ("MA_TRUSTED_PROXIES", "10.0.0.0/8,proxy", "'proxy' is not an IP address or network"),
        ("MA_REQUEST_TIMEOUT", "0", "MA_REQUEST_TIMEOUT='0'"),
        ("MA_WEBHOOK_SECRET", "hunter2", "MA_WEBHOOK_SECRET: must be a Standard Webhooks secret"),
        ("MA_WEBHOOK_URL", "ftp://h.example/x", "MA_WEBHOOK_URL='ftp://h.example/x': must be an http"),
        ("MA_WEBHOOK_BACKOFF", "1ms", "MA_WEBHOOK_BACKOFF='1ms': must be between 10ms and 1h"),
        ("MA_WEBHOOK_ATTEMPTS", "0", "MA_WEBHOOK_ATTEMPTS='0'"),
        ("MA_ESCALATE_TO", "dora,role:boss", "'role:boss' is neither an approver's name nor role:ROLE"),
        ("MA_SMTP_URL", "smtp://u:pa/ss@mail:25", "percent-encode"),
        ("MA_EXPIRE_AFTER", "0s", "MA_EXPIRE_AFTER='0s': must be at least one second"),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_variable(name: str, value: str, needle: str):
    from market_analyst.errors import UserError

    with pytest.raises(UserError) as error:
        Settings.load(environ={name: value}, dotenv=None)
    assert needle in str(error.value) and "\n" not in str(error.value)


def test_a_webhook_without_its_secret_is_refused_in_one_line():
    from market_analyst.errors import UserError

    with pytest.raises(UserError) as error:
        Settings.load(environ={"MA_WEBHOOK_URL": "https://hooks.example/ma"}, dotenv=None)
    assert "MA_WEBHOOK_URL needs MA_WEBHOOK_SECRET" in str(error.value) and "\n" not in str(error.value)


def test_the_environment_wins_over_dotenv(tmp_path: Path):
    dotenv = tmp_path / ".env"
    dotenv.write_text("MA_DURABILITY=exit\nMA_USER=from-dotenv\nUNRELATED=1\n")
    settings = Settings.load(environ={"MA_DURABILITY": "async"}, dotenv=dotenv)
    assert settings.durability == "async" and settings.user == "from-dotenv"


def _layout_entries() -> set[str]:
    """The paths the Layout section of docs/development.md names, one at the start of each line."""
    page = (REPO / "docs" / "development.md").read_text()
    block = page.split("## Layout\n", 1)[1].split("```\n", 2)[1]
    entries, parent = set(), ""
    for line in block.splitlines():
        if not line.strip() or line.startswith(" " * 20):  # blank, or a description carried on
            continue
        first = line.split()[0]
        if not line.startswith(" "):
            parent = first if first.endswith("/") else ""
            entries.add(first)
        else:
            entries.add(parent + first)
    return entries


def test_every_package_folder_and_test_tier_is_named_in_the_layout():
    package = REPO / "src" / "market_analyst"
    folders = {
        f"src/market_analyst/{init.parent.relative_to(package)}/"
        for init in package.rglob("__init__.py")
        if init.parent != package
    }
    tiers = {f"tests/{p.name}/" for p in (REPO / "tests").iterdir() if p.is_dir() and p.name != "__pycache__"}
    missing = sorted((folders | tiers) - _layout_entries())
    assert not missing, f"docs/development.md's Layout does not name: {missing}"
