"""The one error class a user can cause; the CLI maps it to exit code 2 and a single line."""


class UserError(Exception):
    """Bad input or an unusable environment that the user can fix; the message is shown as is."""


class ThreadBusy(UserError):
    """Another command holds the lease on this thread."""

    def __init__(self, thread_id: str) -> None:
        super().__init__(
            f"thread {thread_id} is busy: another command is advancing it; try again when it ends"
        )
        self.thread_id = thread_id
