"""What the sync and the async client share: construction from the broker's URL and the limits,
and every request-reply method, each made from its `tidemq.calls` builder by `CallMethod`, so both
clients take the same arguments and document them in one place."""

from __future__ import annotations

import random
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

from tidemq import calls
from tidemq.calls import Call
from tidemq.failover import Attempt, RetryPolicy, Routes
from tidemq.options import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_IDLE_EXPIRY_S,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_RETRY_BACKOFF_MAX_S,
    DEFAULT_RETRY_BACKOFF_MIN_S,
    DEFAULT_RETRY_TOTAL_S,
    DEFAULT_TIMEOUT_S,
    DEFAULT_URL,
    base_headers,
    check_limits,
    parse_url,
)
from tidemq.pool_settings import PoolSettings

if TYPE_CHECKING:
    from tidemq.async_client import AsyncClient
    from tidemq.client import Client

P = ParamSpec("P")
T = TypeVar("T")
PoolT = TypeVar("PoolT", bound=PoolSettings)


class CallMethod(Generic[P, T]):
    """A client method that runs the `Call` its builder makes: returns the reply's value on a
    `Client`, a coroutine of it on an `AsyncClient` (each client's `_bind` decides)."""

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self.build = build
        self.__doc__ = build.__doc__

    @overload
    def __get__(self, client: None, owner: type) -> CallMethod[P, T]: ...

    @overload
    def __get__(self, client: Client, owner: type) -> Callable[P, T]: ...

    @overload
    def __get__(self, client: AsyncClient, owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...

    def __get__(self, client: ClientBase[Any] | None, owner: type) -> Any:
        return self if client is None else client._bind(self.build)


class ClientBase(Generic[PoolT]):
    _pool_type: type[PoolT]

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        verify: bool | str = True,
        retry_backoff_min_s: float = DEFAULT_RETRY_BACKOFF_MIN_S,
        retry_backoff_max_s: float = DEFAULT_RETRY_BACKOFF_MAX_S,
        retry_total_s: float = DEFAULT_RETRY_TOTAL_S,
    ) -> None:
        check_limits(timeout_s, max_connections)
        self.retry = RetryPolicy(retry_backoff_min_s, retry_backoff_max_s, retry_total_s).check()
        self.url = url
        self.timeout_s = timeout_s
        self._verify = verify
        self._limits = (max_connections, connect_timeout_s, base_headers(token))
        self._pool = self._make_pool(url)
        # Other brokers of a cluster, learned from routes (tidemq.failover), each with its own pool.
        self._pools: dict[str, PoolT] = {url: self._pool}
        self.routes = Routes(url)
        self._rng = random.Random()

    def _make_pool(self, url: str) -> PoolT:
        endpoint = parse_url(url, self._verify)
        max_connections, connect_timeout_s, headers = self._limits
        return self._pool_type(
            endpoint.host,
            endpoint.port,
            endpoint.ssl_context,
            endpoint.host_header,
            max_connections,
            connect_timeout_s,
            DEFAULT_IDLE_EXPIRY_S,
            headers,
        )

    def _pool_for(self, url: str) -> PoolT:
        pool = self._pools.get(url)
        if pool is None:
            pool = self._pools[url] = self._make_pool(url)  # a URL from a route (bounded: failover.MAX_KNOWN_BROKERS)
        return pool

    def _attempt(self, call: Call[Any]) -> Attempt:
        return Attempt(call.request, self.routes, self.retry, self._rng)

    def _bind(self, build: Callable[P, Call[T]]) -> Callable[P, Any]:
        """`build`'s arguments in, the client's way of running the call out."""
        raise NotImplementedError

    # Produce.
    produce = CallMethod(calls.produce)
    produce_batch = CallMethod(calls.produce_batch)
    produce_binary = CallMethod(calls.produce_binary)
    # Consume.
    pull = CallMethod(calls.pull)
    receive = CallMethod(calls.receive)
    ack = CallMethod(calls.ack)
    change_invisible = CallMethod(calls.change_invisible)
    # Administration and queries.
    topics = CallMethod(calls.topics)
    topic = CallMethod(calls.topic)
    create_topic = CallMethod(calls.create_topic)
    delete_topic = CallMethod(calls.delete_topic)
    groups = CallMethod(calls.groups)
    start_redrive = CallMethod(calls.start_redrive)
    redrive = CallMethod(calls.redrive)
    group = CallMethod(calls.group)
    delete_group = CallMethod(calls.delete_group)
    configure_group = CallMethod(calls.configure_group)
    resend_dead_letters = CallMethod(calls.resend_dead_letters)
    offsets = CallMethod(calls.offsets)
    commit_offset = CallMethod(calls.commit_offset)
    commit_offsets = CallMethod(calls.commit_offsets)
    offset_at = CallMethod(calls.offset_at)
    query = CallMethod(calls.query)
    message = CallMethod(calls.message)
    store_status = CallMethod(calls.store_status)
