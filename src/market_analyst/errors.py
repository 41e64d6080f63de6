"""The errors a command can end with, each with its own exit code (the CLI prints one line).

- `UserError` (exit 2): bad input or an unusable environment the user can fix; the message says how.
- `ServiceUnavailable` (exit 69, sysexits' EX_UNAVAILABLE): a service the command needs (the
  database, Redis, a Qdrant server, the model server) did not answer; nothing that finished was lost,
  and the message says how to carry on.
- anything else is a bug (exit 1).
"""

USER_ERROR_EXIT = 2
UNAVAILABLE_EXIT = 69


class UserError(Exception):
    """Bad input or an unusable environment that the user can fix; the message is shown as is."""

    exit_code = USER_ERROR_EXIT


class ServiceUnavailable(Exception):
    """A service the command needs did not answer; what finished before is kept."""

    exit_code = UNAVAILABLE_EXIT


class ThreadBusy(UserError):
    """Another command holds the lease on this thread."""

    def __init__(self, thread_id: str) -> None:
        super().__init__(
            f"thread {thread_id} is busy: another command is advancing it; try again when it ends"
        )
        self.thread_id = thread_id


class SealedValueUnreadable(UserError):
    """A checkpoint value sealed under a data key this process cannot find: erased, or kept by
    another records store. Reads of the thread refuse; listings go on."""


class StaleDraft(UserError):
    """The draft is older than MA_MAX_DRAFT_AGE allows for an approval."""


class RunStopped(Exception):
    """A run that exists stopped on an error: says where the thread stands and how to go on.

    The exit code is the cause's (2 for bad input, 69 for a service that is unavailable, 1 for a bug)."""

    def __init__(self, thread_id: str, status: str, cause: BaseException, how_to_continue: str) -> None:
        self.thread_id = thread_id
        self.status = status
        self.cause = cause
        self.exit_code = getattr(cause, "exit_code", 1)
        reason = (
            str(cause)
            if isinstance(cause, UserError | ServiceUnavailable)
            else (f"internal error: {type(cause).__name__}: {cause}")
        )
        # What was written comes first: an approval that stands, though its report is not out yet.
        first = (
            "approval recorded; publishing did not finish: " if status == "approved_pending_publish" else ""
        )
        super().__init__(
            f"{first}{reason}; thread {thread_id} is {status.replace('_', ' ')}: {how_to_continue}"
        )


def outage_in(exc: BaseException, errors: tuple[type[BaseException], ...]) -> bool:
    """Whether `exc` is one of `errors` or was raised while handling one: a library that wraps a lost
    connection in an error of its own (redisvl's `RedisSearchError` around Redis's `ConnectionError`)
    still means that the server went away, not that the thread is unknown."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, errors):
            return True
        seen.add(id(current))
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return False
