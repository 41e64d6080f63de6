"""Settings read once, at the edge, from the environment and an optional `.env` file.

`Settings.load()` is the one place a value is read and checked: a bad value becomes one `UserError`
line that names the variable. Nothing else in the package reads the environment.
"""

from __future__ import annotations

import base64
import ipaddress
import re
from collections.abc import Mapping
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_core import PydanticUseDefault
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    NoDecode,
    SettingsConfigDict,
)
from pydantic_settings.sources.utils import parse_env_vars

from market_analyst.choices import (
    ROLES,
    AnalystKind,
    CheckpointerKind,
    Durability,
    EmbedderKind,
    MarketDataKind,
    ProfileStoreKind,
    RecordsKind,
)
from market_analyst.errors import UserError
from market_analyst.redaction import SECRET_VARIABLES, URL_VARIABLES, redact_url

# Every variable the application reads, with its default; `.env.example` mirrors this table and a
# test keeps the two in step (and keeps the Settings fields in step with it).
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
    "MA_PROFILE_STORE": "edge",
    "MA_RECORDS": "files",
    "MA_MASTER_KEY": "",
    "MA_USER": "",
    "MA_APPROVERS": "",
    "MA_REQUIRED_APPROVALS": "1",
    "MA_ALLOW_SELF_APPROVAL": "false",
    "MA_LEASE_TTL_SECONDS": "30",
    "SOURCE_DATE_EPOCH": "",
    "MA_ANALYST": "auto",
    "OPENAI_API_KEY": "",
    "OPENAI_BASE_URL": "",
    "MA_OPENAI_MODEL": "gpt-4o-mini",
    "MA_EMBEDDER": "wordllama",
    "MA_OPENAI_EMBEDDING_MODEL": "text-embedding-3-small",
    "MA_LLM_TIMEOUT": "60",
    "MA_LLM_ATTEMPTS": "3",
    "MA_LLM_MAX_STEPS": "6",
    "MA_DEBUG": "false",
    "MA_MAX_DRAFT_AGE": "7d",
    "MA_SESSION_IDLE": "30m",
    "MA_SESSION_MAX": "12h",
    "MA_ALLOWED_HOSTS": "",
    "MA_TRUSTED_PROXIES": "",
    "MA_REQUEST_TIMEOUT": "10",
    "MA_CLOCK_SKEW": "30s",
    "MA_PUBLISH_RETRY": "30s",
    "MA_PUBLIC_URL": "http://127.0.0.1:8000",
    "MA_WEBHOOK_URL": "",
    "MA_WEBHOOK_SECRET": "",
    "MA_WEBHOOK_ATTEMPTS": "8",
    "MA_WEBHOOK_BACKOFF": "10s",
    "MA_SMTP_URL": "",
    "MA_MAIL_FROM": "market-analyst@localhost",
    "MA_DECISION_DUE": "",
    "MA_REMIND_EVERY": "",
    "MA_MAX_REMINDERS": "3",
    "MA_ESCALATE_TO": "",
    "MA_EXPIRE_AFTER": "",
}
# The latest moment SOURCE_DATE_EPOCH may name: the last second of the year 9999.
MAX_EPOCH = 253_402_300_799
# A Redis lease lives between one second and one day without renewal.
LEASE_TTL_BOUNDS = (1.0, 86_400.0)

_HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]")
_DURATION = re.compile(r"^(\d+)\s*(ms|[smhdw])$")
_UNITS = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str, what: str) -> timedelta:
    """`90d`, `12h`, `30m`, `45s` or `2w` as a duration; `UserError` naming `what` otherwise."""
    match = _DURATION.fullmatch(text.strip().lower())
    if not match:
        raise UserError(
            f"{what} {text!r} is not an age: use a whole number and a unit, such as 90d, 12h or 30m"
        )
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


# What `load()` reads: the environment (None: the process's own) and the `.env` file (None: none).
_SOURCES: ContextVar[tuple[Mapping[str, str] | None, Path | None]] = ContextVar(
    "market_analyst_settings_sources", default=(None, Path(".env"))
)


class _MappingEnvironment(EnvSettingsSource):
    """The environment source, reading a given mapping instead of `os.environ`."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(
            self._environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str
        )


def _var(name: str) -> Any:
    """A field read from variable `name`, defaulting to its entry in `VARIABLES`."""
    default = VARIABLES[name]
    return Field(default=default or None, validation_alias=name)


class Settings(BaseSettings):
    """Where the stores live and how runs behave. Build it with `Settings.load()`."""

    model_config = SettingsConfigDict(
        env_ignore_empty=True,  # `NAME=` in .env or the environment means "the default"
        extra="ignore",
        frozen=True,
        populate_by_name=True,
    )

    data_dir: Path = _var("MA_DATA_DIR")
    checkpointer: CheckpointerKind = _var("MA_CHECKPOINTER")
    postgres_url: str | None = Field(default=None, validation_alias="POSTGRES_URL", repr=False)
    redis_url: str | None = Field(default=None, validation_alias="REDIS_URL", repr=False)
    redis_shallow: bool = _var("MA_REDIS_SHALLOW")
    durability: Durability = _var("MA_DURABILITY")
    market_data: MarketDataKind = _var("MA_MARKET_DATA")
    csv_dir: Path | None = _var("MA_CSV_DIR")
    archive_dir_override: Path | None = _var("MA_ARCHIVE_DIR")
    qdrant_url: str | None = Field(default=None, validation_alias="QDRANT_URL", repr=False)
    qdrant_api_key: SecretStr | None = _var("QDRANT_API_KEY")
    profile_store: ProfileStoreKind = _var("MA_PROFILE_STORE")
    records: RecordsKind = _var("MA_RECORDS")
    master_key: SecretStr | None = _var("MA_MASTER_KEY")
    user: str | None = _var("MA_USER")
    approvers: Annotated[frozenset[str], NoDecode] = Field(
        default=frozenset(), validation_alias="MA_APPROVERS"
    )
    required_approvals: int = Field(default=1, ge=1, le=20, validation_alias="MA_REQUIRED_APPROVALS")
    allow_self_approval: bool = _var("MA_ALLOW_SELF_APPROVAL")
    lease_ttl_seconds: float = Field(
        default=30.0,
        ge=LEASE_TTL_BOUNDS[0],
        le=LEASE_TTL_BOUNDS[1],
        allow_inf_nan=False,
        validation_alias="MA_LEASE_TTL_SECONDS",
    )
    fixed_now: datetime | None = _var("SOURCE_DATE_EPOCH")
    analyst: AnalystKind = _var("MA_ANALYST")
    openai_api_key: SecretStr | None = _var("OPENAI_API_KEY")
    openai_base_url: str | None = _var("OPENAI_BASE_URL")
    openai_model: str = _var("MA_OPENAI_MODEL")
    embedder: EmbedderKind = _var("MA_EMBEDDER")
    openai_embedding_model: str = _var("MA_OPENAI_EMBEDDING_MODEL")
    llm_timeout: float = Field(
        default=60.0, gt=0, le=3600, allow_inf_nan=False, validation_alias="MA_LLM_TIMEOUT"
    )
    llm_attempts: int = Field(default=3, ge=1, le=10, validation_alias="MA_LLM_ATTEMPTS")
    llm_max_steps: int = Field(default=6, ge=1, le=30, validation_alias="MA_LLM_MAX_STEPS")
    debug: bool = _var("MA_DEBUG")
    max_draft_age: timedelta = Field(default=timedelta(days=7), validation_alias="MA_MAX_DRAFT_AGE")
    session_idle: timedelta = Field(default=timedelta(minutes=30), validation_alias="MA_SESSION_IDLE")
    session_max: timedelta = Field(default=timedelta(hours=12), validation_alias="MA_SESSION_MAX")
    allowed_hosts: Annotated[frozenset[str], NoDecode] = Field(
        default=frozenset(), validation_alias="MA_ALLOWED_HOSTS"
    )
    trusted_proxies: Annotated[frozenset[str], NoDecode] = Field(
        default=frozenset(), validation_alias="MA_TRUSTED_PROXIES"
    )
    request_timeout: float = Field(
        default=10.0, gt=0, le=600, allow_inf_nan=False, validation_alias="MA_REQUEST_TIMEOUT"
    )
    clock_skew: timedelta = Field(default=timedelta(seconds=30), validation_alias="MA_CLOCK_SKEW")
    publish_retry: timedelta = Field(default=timedelta(seconds=30), validation_alias="MA_PUBLISH_RETRY")
    public_url: str = _var("MA_PUBLIC_URL")
    webhook_url: str | None = Field(default=None, validation_alias="MA_WEBHOOK_URL", repr=False)
    webhook_secret: SecretStr | None = _var("MA_WEBHOOK_SECRET")
    webhook_attempts: int = Field(default=8, ge=1, le=30, validation_alias="MA_WEBHOOK_ATTEMPTS")
    webhook_backoff: timedelta = Field(default=timedelta(seconds=10), validation_alias="MA_WEBHOOK_BACKOFF")
    smtp_url: str | None = Field(default=None, validation_alias="MA_SMTP_URL", repr=False)
    mail_from: str = _var("MA_MAIL_FROM")
    decision_due: timedelta | None = _var("MA_DECISION_DUE")
    remind_every: timedelta | None = _var("MA_REMIND_EVERY")
    max_reminders: int = Field(default=3, ge=0, le=100, validation_alias="MA_MAX_REMINDERS")
    escalate_to: Annotated[frozenset[str], NoDecode] = Field(
        default=frozenset(), validation_alias="MA_ESCALATE_TO"
    )
    expire_after: timedelta | None = _var("MA_EXPIRE_AFTER")

    @field_validator(
        "checkpointer",
        "durability",
        "market_data",
        "analyst",
        "profile_store",
        "records",
        "embedder",
        mode="before",
    )
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("data_dir", "csv_dir", "archive_dir_override", mode="after")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        return value.expanduser().absolute() if value is not None else None

    @field_validator("approvers", "allowed_hosts", "trusted_proxies", "escalate_to", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return frozenset(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("fixed_now", mode="before")
    @classmethod
    def _epoch(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                seconds = int(value.strip())
            except ValueError:
                raise ValueError(f"{value.strip()!r} is not a whole number of seconds") from None
            if not 0 <= seconds <= MAX_EPOCH:
                raise ValueError(f"must be between 0 and {MAX_EPOCH} (the end of the year 9999)")
            return datetime.fromtimestamp(seconds, UTC)
        return value

    @field_validator("allowed_hosts", mode="after")
    @classmethod
    def _host_names(cls, value: frozenset[str]) -> frozenset[str]:
        for name in value:
            if not _HOST_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a host name (letters, digits, dots and dashes)")
        return frozenset(name.lower() for name in value)

    @field_validator("trusted_proxies", mode="after")
    @classmethod
    def _addresses(cls, value: frozenset[str]) -> frozenset[str]:
        for address in value:
            try:
                ipaddress.ip_network(address, strict=False)
            except ValueError:
                raise ValueError(f"{address!r} is not an IP address or network such as 10.0.0.0/8") from None
        return value

    @field_validator(
        "max_draft_age",
        "session_idle",
        "session_max",
        "clock_skew",
        "publish_retry",
        "webhook_backoff",
        "decision_due",
        "remind_every",
        "expire_after",
        mode="before",
    )
    @classmethod
    def _age(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return parse_duration(value, "age")
            except UserError as exc:
                raise ValueError(str(exc).removeprefix("age ")) from None
        return value

    @field_validator("session_idle", "session_max", mode="after")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value.total_seconds() < 1:
            raise ValueError("must be at least one second (a session that ends at once signs no one in)")
        return value

    @field_validator("publish_retry", mode="after")
    @classmethod
    def _retry(cls, value: timedelta) -> timedelta:
        if not timedelta(seconds=1) <= value <= timedelta(days=1):
            raise ValueError("must be between 1s and 1d")
        return value

    @field_validator("clock_skew", mode="after")
    @classmethod
    def _skew(cls, value: timedelta) -> timedelta:
        if value > timedelta(hours=1):
            raise ValueError("must be at most 1h (clocks further apart than that need fixing, not allowing)")
        return value

    @field_validator("qdrant_url", "webhook_url", "public_url", mode="after")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        scheme, _, rest = value.partition("://")
        if scheme.lower() not in ("http", "https") or not rest.strip("/"):
            raise ValueError("must be an http:// or https:// URL such as http://localhost:6333")
        return value.rstrip("/")

    @field_validator("escalate_to", mode="after")
    @classmethod
    def _escalate_to(cls, value: frozenset[str]) -> frozenset[str]:
        from market_analyst.state import USER_ID_PATTERN

        for entry in value:
            role = entry.removeprefix("role:") if entry.startswith("role:") else None
            if (role is not None and role not in ROLES) or (
                role is None and not USER_ID_PATTERN.fullmatch(entry)
            ):
                raise ValueError(
                    f"{entry!r} is neither an approver's name nor role:ROLE (role:{', role:'.join(ROLES)})"
                )
        return value

    @field_validator("decision_due", "remind_every", "expire_after", mode="after")
    @classmethod
    def _deadline(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value.total_seconds() < 1:
            raise ValueError("must be at least one second")
        return value

    @field_validator("smtp_url", mode="after")
    @classmethod
    def _smtp_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        scheme, _, rest = value.partition("://")
        problem = scheme.lower() not in ("smtp", "smtps", "smtp+starttls") or not rest.strip("/")
        try:
            parts = urlsplit(value)
            problem = problem or not parts.hostname or parts.port == 0
        except ValueError:  # a port that is not one (or a password with an unescaped '/', '#', '?')
            problem = True
        if problem:
            raise ValueError(
                "must be an smtp://, smtp+starttls:// or smtps:// URL such as smtp://localhost:25 "
                "(percent-encode '/', '#', '?' and '@' in a password)"
            )
        return value

    @field_validator("webhook_backoff", mode="after")
    @classmethod
    def _backoff(cls, value: timedelta) -> timedelta:
        if not timedelta(milliseconds=10) <= value <= timedelta(hours=1):
            raise ValueError("must be between 10ms and 1h")
        return value

    @field_validator("webhook_secret", mode="after")
    @classmethod
    def _webhook_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return value
        text = value.get_secret_value()
        try:
            key = base64.b64decode(text.removeprefix("whsec_"), validate=True)
        except ValueError:
            key = b""
        if not text.startswith("whsec_") or len(key) < 24:
            raise ValueError(
                "must be a Standard Webhooks secret: 'whsec_' and at least 24 random bytes in base64 "
                "(make one with: echo whsec_$(head -c 32 /dev/urandom | base64))"
            )
        return value

    @model_validator(mode="after")
    def _webhook_pair(self) -> Settings:
        if self.webhook_url and self.webhook_secret is None:
            raise ValueError("MA_WEBHOOK_URL needs MA_WEBHOOK_SECRET, the key its requests are signed with")
        return self

    # Defined last, so it runs before every other "before" validator: a value's surrounding spaces
    # never count, and one that is only spaces means the default, as an empty one does.
    @field_validator("*", mode="before")
    @classmethod
    def _stripped(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.strip()
            if not value:
                raise PydanticUseDefault()
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: Any,
        env_settings: Any,
        dotenv_settings: Any,
        file_secret_settings: Any,
    ) -> tuple[Any, ...]:
        environ, dotenv = _SOURCES.get()
        if environ is not None:
            env_settings = _MappingEnvironment(settings_cls, environ)
        readable = dotenv is not None and dotenv.is_file()
        return (
            init_settings,
            env_settings,
            DotEnvSettingsSource(settings_cls, env_file=dotenv if readable else None),
        )

    # -- derived values ----------------------------------------------------------------------------

    @property
    def uses_llm(self) -> bool:
        """The LLM analyst runs when chosen, or by default when `OPENAI_API_KEY` is set."""
        return self.analyst == "llm" or (self.analyst == "auto" and self.openai_api_key is not None)

    @property
    def archive_dir(self) -> Path:
        """The report archive: `MA_ARCHIVE_DIR`, or `reports/` under the data directory."""
        return self.archive_dir_override or self.data_dir / "reports"

    @property
    def profiles_dir(self) -> Path:
        """The embedded profile store (Qdrant Edge, or local mode) used when no `QDRANT_URL` is set."""
        return self.data_dir / "profiles"

    @property
    def postgres_dir(self) -> Path:
        """The embedded PostgreSQL data directory used when no `POSTGRES_URL` is set."""
        return self.data_dir / "postgres"

    def now(self) -> datetime:
        """The current UTC time, or the fixed time `SOURCE_DATE_EPOCH` names (reproducible runs)."""
        return self.fixed_now or datetime.now(UTC)

    @property
    def notifies(self) -> bool:
        """Whether events are written and a worker runs: a webhook or mail to tell, or due times to keep."""
        return self.webhook_url is not None or self.smtp_url is not None or self.keeps_deadlines

    @property
    def keeps_deadlines(self) -> bool:
        """Whether decisions have due times, reminders or an expiry."""
        return any(d is not None for d in (self.decision_due, self.remind_every, self.expire_after))

    def secret(
        self, name: Literal["openai_api_key", "qdrant_api_key", "master_key", "webhook_secret"]
    ) -> str | None:
        """The plain value of a secret setting, for the one adapter that sends it."""
        value: SecretStr | None = getattr(self, name)
        return value.get_secret_value() if value is not None else None

    def with_overrides(self, **changes: Any) -> Settings:
        """A copy with command-line options applied; `None` values leave a setting as it is.

        The options are typed with the same `Literal`s as the fields, so the CLI has checked them."""
        return self.model_copy(update={k: v for k, v in changes.items() if v is not None})

    def with_checked(self, **changes: Any) -> Settings:
        """A copy with `changes` checked as the variables are: for options whose values are not
        typed by the CLI (host names, proxy addresses). A bad one is one `UserError` line."""
        try:
            return type(self).model_validate(self.model_dump() | changes)
        except ValidationError as exc:
            raise UserError(_one_line(exc)) from None

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None, dotenv: Path | None = Path(".env")) -> Settings:
        """Read settings from `environ` (default: the process environment) over an optional `.env`."""
        token = _SOURCES.set((environ, dotenv))
        try:
            return cls()
        except ValidationError as exc:
            raise UserError(_one_line(exc)) from None
        finally:
            _SOURCES.reset(token)


def _one_line(exc: ValidationError) -> str:
    """The first problem, naming the variable and its value (an address without its password, a
    secret not at all)."""
    first = exc.errors(include_url=False)[0]
    name = ".".join(str(part) for part in first["loc"]) or "settings"
    message = str(first["msg"]).removeprefix("Value error, ")
    value = first.get("input")
    if name in SECRET_VARIABLES or not isinstance(value, str):
        return f"{name}: {message}"
    shown = redact_url(value) if name in URL_VARIABLES else value
    return f"{name}={shown[:60]!r}: {message}"
