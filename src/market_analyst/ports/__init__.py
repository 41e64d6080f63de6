"""The ports: what the graph's nodes and the workflow depend on, as protocols, with the value types
each one passes, one module per concern. Every name is re-exported here, so `from market_analyst.ports
import X` names a port without naming its module.

Nothing here opens a store or imports a client library: `deps.py` builds the real adapters and
opens the checkpointer; the nodes see only these shapes, through `Deps` (`market_analyst.context`).
"""

from market_analyst.ports.analysis import (
    Analyst,
    ChatModel,
    MarketDataProvider,
    ProfileReader,
    profile_in_use,
)
from market_analyst.ports.approvals import Approver, Approvers, SessionRecord, Sessions, SignInFailures
from market_analyst.ports.archive import (
    ArchiveWriter,
    Listing,
    PublishRequest,
    PublishResult,
    ReportStore,
    ReportSummary,
)
from market_analyst.ports.audit import AuditEvent, AuditRecords, AuditWriter, Verification
from market_analyst.ports.checkpoints import CheckpointBackend, ThreadIndex, ThreadQuery, ThreadRow
from market_analyst.ports.memory import Embedder, MemoryStore
from market_analyst.ports.notifications import Event, EventOutbox, event_id_for

__all__ = [
    "Analyst",
    "Approver",
    "Approvers",
    "ArchiveWriter",
    "AuditEvent",
    "AuditRecords",
    "AuditWriter",
    "ChatModel",
    "CheckpointBackend",
    "Embedder",
    "Event",
    "EventOutbox",
    "Listing",
    "MarketDataProvider",
    "MemoryStore",
    "ProfileReader",
    "PublishRequest",
    "PublishResult",
    "ReportStore",
    "ReportSummary",
    "SessionRecord",
    "Sessions",
    "SignInFailures",
    "ThreadIndex",
    "ThreadQuery",
    "ThreadRow",
    "Verification",
    "event_id_for",
    "profile_in_use",
]
