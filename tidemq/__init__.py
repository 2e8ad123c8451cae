"""tidemq's Python client: `Client` (sync) and `AsyncClient` (asyncio) over pooled HTTP/1.1
keep-alive connections, with the broker's problem replies raised as typed exceptions.

It does not import the broker (`app`, `store`): it needs only httptools and orjson. Its HTTP/1.1
transport (`AsyncPool`, `HttpRequest`, `HttpResponse`) is public too: the cluster's forwarding
speaks to other brokers with it.
"""

from __future__ import annotations

from tidemq.async_client import AsyncClient
from tidemq.async_transport import AsyncPool
from tidemq.batch_codec import BatchFormatError, BatchMessage, decode_batch, decode_stored, encode_batch
from tidemq.client import Client
from tidemq.errors import (
    BadRequest,
    BrokerTimeout,
    Conflict,
    ConnectFailed,
    ConnectionClosed,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    ProblemError,
    ProtocolError,
    RateLimited,
    ServiceUnavailable,
    TidemqClientError,
    Timeout,
    TransportError,
    Unauthenticated,
)
from tidemq.http_wire import Request as HttpRequest
from tidemq.http_wire import Response as HttpResponse
from tidemq.models import AckResult, BinaryBatchResult, Message, PullResult, QueueInfo, QueueLag, SendResult, TopicInfo
from tidemq.version import __version__

__all__ = [
    "AckResult",
    "AsyncClient",
    "AsyncPool",
    "BadRequest",
    "BatchFormatError",
    "BatchMessage",
    "BinaryBatchResult",
    "BrokerTimeout",
    "Client",
    "Conflict",
    "ConnectFailed",
    "ConnectionClosed",
    "Forbidden",
    "HttpRequest",
    "HttpResponse",
    "Message",
    "NotFound",
    "PayloadTooLarge",
    "ProblemError",
    "ProtocolError",
    "PullResult",
    "QueueInfo",
    "QueueLag",
    "RateLimited",
    "SendResult",
    "ServiceUnavailable",
    "TidemqClientError",
    "Timeout",
    "TopicInfo",
    "TransportError",
    "Unauthenticated",
    "__version__",
    "decode_batch",
    "decode_stored",
    "encode_batch",
]
