"""What the commands that read or manage a store do: the archive, the profiles, the embedded server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from market_analyst.deps import (
    Migration,
    ReportSummary,
    embedded_server,
    open_archive,
    open_profiles,
    stop_embedded_server,
)
from market_analyst.errors import UserError
from market_analyst.ports import profile_in_use
from market_analyst.redaction import redact_url
from market_analyst.settings import Settings
from market_analyst.state import (
    DEFAULT_USER,
    Horizon,
    ProfileUsed,
    RiskTolerance,
    parse_sectors,
    validate_user_id,
)

# -- the archive -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportListing:
    """Matching report summaries, lines about documents that could not be read, and where."""

    reports: list[ReportSummary]
    problems: list[str]
    location: str  # the archive directory, or the records database
    more: int = 0


def find_reports(
    settings: Settings,
    *,
    ticker: str | None = None,
    user: str | None = None,
    text: str | None = None,
    limit: int = 50,
) -> ReportListing:
    """The newest `limit` published reports matching every filter given, and how many more match."""
    if limit < 1:
        raise UserError(f"--limit must be at least 1 (got {limit})")
    archive = open_archive(settings)
    listing = archive.search(ticker=ticker, user_id=user, text=text, limit=limit)
    return ReportListing(listing.reports, listing.problems, archive.location, listing.more)


def read_report(settings: Settings, key: str) -> dict[str, Any]:
    """The archived document under `key`, or `UserError` when there is none."""
    archive = open_archive(settings)
    document = archive.get(key)
    if document is None:
        raise UserError(
            f"no report with key {key!r} in {archive.location} (list them with: market-analyst reports list)"
        )
    return document


# -- profiles --------------------------------------------------------------------------------------


def chosen_user(settings: Settings, user: str | None) -> str:
    """The user a command acts for: `--user`, else `MA_USER`, else the default; checked. An explicit
    `--user ""` is refused as empty, not replaced by the default: only an absent option defaults."""
    return validate_user_id(user if user is not None else settings.user or DEFAULT_USER)


def set_profile(
    settings: Settings,
    user: str | None,
    *,
    risk_tolerance: RiskTolerance | None = None,
    horizon: Horizon | None = None,
    sectors: str | None = None,
    notes: str | None = None,
) -> ProfileUsed:
    """Create the user's profile or change only the fields given; returns what is stored now."""
    profile = open_profiles(settings).update(
        chosen_user(settings, user),
        risk_tolerance=risk_tolerance,
        horizon=horizon,
        preferred_sectors=None if sectors is None else parse_sectors(sectors),
        notes=notes,
    )
    return ProfileUsed(source="stored", profile=profile)


def show_profile(settings: Settings, user: str | None) -> ProfileUsed:
    """The profile a run for the user would use: the stored one, or the defaults."""
    return profile_in_use(open_profiles(settings), chosen_user(settings, user))


def delete_profile(settings: Settings, user: str | None) -> tuple[str, bool]:
    """Delete the user's profile; returns the user ID and whether there was one."""
    user_id = chosen_user(settings, user)
    return user_id, open_profiles(settings).delete(user_id)


def migrate_profiles(settings: Settings) -> Migration:
    """Move a Qdrant local-mode folder of profiles to Qdrant Edge now, instead of on first use."""
    return open_profiles(settings).migrate()


# -- the embedded PostgreSQL -----------------------------------------------------------------------


def database_status(settings: Settings) -> dict[str, Any]:
    """The checkpointer's PostgreSQL: a configured server, or the embedded one (where it lives, its
    PID and socket, whether it runs)."""
    status: dict[str, Any] = {"data_dir": str(settings.data_dir), "postgres_dir": str(settings.postgres_dir)}
    if settings.postgres_url:
        return status | {"server": "POSTGRES_URL", "url": redact_url(settings.postgres_url), "running": None}
    server = embedded_server(settings.postgres_dir)
    running = server is not None and server["alive"]
    located = settings.postgres_dir.resolve() if settings.postgres_dir.is_symlink() else settings.postgres_dir
    return status | {
        "server": "embedded",
        "files": str(located),
        "running": running,
        "pid": server["pid"] if running and server else None,
        "socket": server["socket"] if running and server else None,
    }


def stop_database(settings: Settings) -> str:
    """Stop the embedded server, saying whether one was running."""
    if stop_embedded_server(settings):
        return f"Stopped the embedded PostgreSQL in {settings.postgres_dir}."
    return f"No embedded PostgreSQL runs in {settings.postgres_dir}."
