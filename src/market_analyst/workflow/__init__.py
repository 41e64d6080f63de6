"""What the commands do, over the graph and the stores; the CLI renders what these return."""

from market_analyst.workflow.revise import revise_thread
from market_analyst.workflow.runs import (
    approve_thread,
    reject_thread,
    resume_thread,
    start_analysis,
    thread_status,
)
from market_analyst.workflow.threads import list_threads
from market_analyst.workflow.views import ThreadStatus, ThreadView

__all__ = [
    "ThreadStatus",
    "ThreadView",
    "approve_thread",
    "list_threads",
    "reject_thread",
    "resume_thread",
    "revise_thread",
    "start_analysis",
    "thread_status",
]
