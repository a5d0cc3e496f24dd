"""bulkhead: the Python SDK for the bulkhead sandbox daemon.

    from bulkhead import Bulkhead

    client = Bulkhead()  # the local daemon's unix socket and key, or BULKHEAD_URL / BULKHEAD_API_KEY
    with client.sandboxes.create() as sandbox:
        print(sandbox.exec("echo hello").stdout)
"""

from __future__ import annotations

from .client import Bulkhead, Images, Sandboxes, Snapshots, Volumes
from .errors import (ApiError, AuthenticationError, BulkheadConnectionError, BulkheadError, BulkheadTimeoutError,
                     CommandError, ConflictError, DiskFullError, ForbiddenError, InvalidRequestError, NotFoundError,
                     PayloadTooLargeError, RateLimitError, ServerError, StreamError, UnavailableError,
                     UnsafeArchiveError)
from .files import Files
from .models import (ArchiveSummary, CommandResult, EgressEntry, Entry, EntryList, ExecEvent, ExitStatus, FileEvent,
                     Health, Image, Network, OutputEvent, PortResponse, Preview, ProcessInfo, PtySize, SandboxInfo,
                     Snapshot, Usage, Volume, VolumeMount)
from .processes import Process, Processes
from .sandbox import Sandbox
from .streams import ByteStream, EventStream
from .websocket import Attachment, WebSocket

__version__ = "0.1.0"

__all__ = [
    "Bulkhead", "Sandboxes", "Snapshots", "Volumes", "Images", "Sandbox", "Processes", "Process", "Files",
    "Attachment", "WebSocket", "ByteStream", "EventStream",
    "ArchiveSummary", "CommandResult", "EgressEntry", "Entry", "EntryList", "ExecEvent", "ExitStatus", "FileEvent",
    "Health", "Image", "Network", "OutputEvent", "PortResponse", "Preview", "ProcessInfo", "PtySize", "SandboxInfo",
    "Snapshot", "Usage", "Volume", "VolumeMount",
    "BulkheadError", "BulkheadConnectionError", "BulkheadTimeoutError", "ApiError", "InvalidRequestError",
    "AuthenticationError", "ForbiddenError", "NotFoundError", "ConflictError", "PayloadTooLargeError",
    "RateLimitError", "UnavailableError", "DiskFullError", "ServerError", "StreamError", "CommandError",
    "UnsafeArchiveError",
]
