"""Settings read once, at the edge, from the environment and an optional `.env` file."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from market_analyst.errors import UserError

Durability = Literal["sync", "async", "exit"]
CheckpointerKind = Literal["postgres", "redis"]
MarketDataKind = Literal["snapshot", "csv", "yfinance"]

DURABILITY_MODES: tuple[Durability, ...] = ("sync", "async", "exit")
CHECKPOINTERS: tuple[CheckpointerKind, ...] = ("postgres", "redis")
MARKET_DATA_KINDS: tuple[MarketDataKind, ...] = ("snapshot", "csv", "yfinance")
AnalystKind = Literal["auto", "rules", "llm"]
ANALYST_KINDS: tuple[AnalystKind, ...] = ("auto", "rules", "llm")

# Every variable the application reads, with its default; `.env.example` mirrors this table and a
# test keeps the two in step.
VARIABLES: dict[str, str] = {
    "MA_DATA_DIR": "./.market-analyst",
    "MA_CHECKPOINTER": "postgres",
    "POSTGRES_URL": "",
    "REDIS_URL": "",
    "MA_REDIS_SHALLOW": "false",
    "MA_DURABILITY": "sync",
    "MA_MARKET_DATA": "snapshot",
    "MA_CSV_DIR": "",
    "MA_ARCHIVE_DIR": "",
    "QDRANT_URL": "",
    "QDRANT_API_KEY": "",
    "MA_USER": "",
    "MA_APPROVERS": "",
    "MA_LEASE_TTL_SECONDS": "30",
    "SOURCE_DATE_EPOCH": "",
    "MA_ANALYST": "auto",
    "OPENAI_API_KEY": "",
    "OPENAI_BASE_URL": "",
    "MA_OPENAI_MODEL": "gpt-4o-mini",
}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    value = value.strip().lower()
    if value not in allowed:
        raise UserError(f"{name}={value!r} is not one of: {', '.join(allowed)}")
    return value


def _flag(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise UserError(f"{name}={value!r} is not a boolean (use true or false)")


@dataclass(frozen=True)
class Settings:
    """Where the stores live and how runs behave. Build it with `Settings.load()`."""

    data_dir: Path
    checkpointer: CheckpointerKind = "postgres"
    postgres_url: str | None = None
    redis_url: str | None = None
    redis_shallow: bool = False
    durability: Durability = "sync"
    market_data: MarketDataKind = "snapshot"
    csv_dir: Path | None = None
    archive_dir_override: Path | None = None
    qdrant_url: str | None = None
    qdrant_api_key: str | None = None
    user: str | None = None
    approvers: frozenset[str] = field(default_factory=frozenset)
    lease_ttl_seconds: float = 30.0
    fixed_now: datetime | None = None
    analyst: AnalystKind = "auto"
    openai_api_key: str | None = field(default=None, repr=False)
    openai_base_url: str | None = None
    openai_model: str = "gpt-4o-mini"

    @property
    def uses_llm(self) -> bool:
        """The LLM analyst runs when chosen, or by default when `OPENAI_API_KEY` is set."""
        return self.analyst == "llm" or (self.analyst == "auto" and bool(self.openai_api_key))

    @property
    def archive_dir(self) -> Path:
        """The report archive: `MA_ARCHIVE_DIR`, or `reports/` under the data directory."""
        return self.archive_dir_override or self.data_dir / "reports"

    @property
    def profiles_dir(self) -> Path:
        """The embedded Qdrant store used when no `QDRANT_URL` is set."""
        return self.data_dir / "profiles"

    @property
    def postgres_dir(self) -> Path:
        """The embedded PostgreSQL data directory used when no `POSTGRES_URL` is set."""
        return self.data_dir / "postgres"

    def now(self) -> datetime:
        """The current UTC time, or the fixed time `SOURCE_DATE_EPOCH` names (reproducible runs)."""
        return self.fixed_now or datetime.now(UTC)

    def with_overrides(self, **changes: object) -> Settings:
        """A copy with command-line options applied; `None` values leave a setting as it is."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})  # type: ignore[arg-type]

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None, dotenv: Path | None = Path(".env")) -> Settings:
        """Read settings from `environ` (default: the process environment) over an optional `.env`."""
        values: dict[str, str] = {}
        if dotenv is not None and dotenv.is_file():
            from dotenv import dotenv_values

            values.update({k: v for k, v in dotenv_values(dotenv).items() if v is not None})
        values.update(os.environ if environ is None else environ)

        def get(name: str) -> str:
            return values.get(name, VARIABLES[name]).strip()

        epoch = get("SOURCE_DATE_EPOCH")
        fixed_now = None
        if epoch:
            try:
                fixed_now = datetime.fromtimestamp(int(epoch), UTC)
            except ValueError:
                raise UserError(f"SOURCE_DATE_EPOCH={epoch!r} is not a whole number of seconds") from None
        try:
            ttl = float(get("MA_LEASE_TTL_SECONDS"))
        except ValueError:
            raise UserError(f"MA_LEASE_TTL_SECONDS={get('MA_LEASE_TTL_SECONDS')!r} is not a number") from None
        if ttl <= 0:
            raise UserError("MA_LEASE_TTL_SECONDS must be positive")
        approvers = frozenset(a.strip() for a in get("MA_APPROVERS").split(",") if a.strip())
        return cls(
            data_dir=Path(get("MA_DATA_DIR") or VARIABLES["MA_DATA_DIR"]).expanduser().absolute(),
            checkpointer=_choice("MA_CHECKPOINTER", get("MA_CHECKPOINTER"), CHECKPOINTERS),  # type: ignore[arg-type]
            postgres_url=get("POSTGRES_URL") or None,
            redis_url=get("REDIS_URL") or None,
            redis_shallow=_flag("MA_REDIS_SHALLOW", get("MA_REDIS_SHALLOW")),
            durability=_choice("MA_DURABILITY", get("MA_DURABILITY"), DURABILITY_MODES),  # type: ignore[arg-type]
            market_data=_choice("MA_MARKET_DATA", get("MA_MARKET_DATA"), MARKET_DATA_KINDS),  # type: ignore[arg-type]
            csv_dir=Path(get("MA_CSV_DIR")).expanduser().absolute() if get("MA_CSV_DIR") else None,
            archive_dir_override=Path(get("MA_ARCHIVE_DIR")).expanduser().absolute()
            if get("MA_ARCHIVE_DIR")
            else None,
            qdrant_url=get("QDRANT_URL") or None,
            qdrant_api_key=get("QDRANT_API_KEY") or None,
            user=get("MA_USER") or None,
            approvers=approvers,
            lease_ttl_seconds=ttl,
            fixed_now=fixed_now,
            analyst=_choice("MA_ANALYST", get("MA_ANALYST"), ANALYST_KINDS),  # type: ignore[arg-type]
            openai_api_key=get("OPENAI_API_KEY") or None,
            openai_base_url=get("OPENAI_BASE_URL") or None,
            openai_model=get("MA_OPENAI_MODEL") or VARIABLES["MA_OPENAI_MODEL"],
        )
