"""Broker: the one object the routes share (the store, its settings, the held pulls, the read pool).

Invariants:
- Loading, shutting down, reads and metadata writes run in `executor` (or the default pool for
  start/stop), with two exceptions called on the loop: puts (a memory copy into a mapped file
  under the put lock; their flush is awaited as a future) and pulls of just-written messages
  (within `inline_read_window_messages` of the queue's end, app/routes_pull.py), which are in the
  page cache and cost less than the hop to a reader thread.
- Topic names are checked with `topic_problem` before any store call, so a name such as
  `../etc` never reaches the filesystem.
- On stop, every held pull is released before the store shuts down; a stop during a background
  load waits for the load to end (it cannot be interrupted halfway), then shuts the store down.
- `loading` is True exactly while `start_in_background`'s load runs (app.startup gates requests on it).
- Replication (`ha.attach`) is wired when the broker is built, before the store loads: a
  master's HA port is bound then, so a port in use fails the start before anything is served.
- A slave refuses a produce before anything else touches the store (no topic is auto-created).
- The push service (app/push_service.py) starts after the store and stops before it (and before the
  cluster node): it receives and acks through the store until it stops.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request

from app.access_check import request_account, require_create
from app.access_revocation import Revocations
from app.consumer_registry import ConsumerRegistry
from app.durable_turns import DurableTurns
from app.http_requests import RequestStats
from app.long_poll import HeldPulls
from app.problems import ProblemError, StartRefused
from app.push_service import PushService
from app.settings import BrokerSettings
from app.startup import recovery_progress
from app.stream_registry import StreamRegistry
from app.suggestions import closest
from app.transaction_check import HttpCheckTransport
from cluster import ClusterNode, EtcdError
from ha import HANode, attach
from store import (
    INTERNAL_TOPICS,
    SYSTEM_TOPICS,
    BrokerRole,
    DefaultMessageStore,
    MessageStore,
    StateWriteFailed,
    StoreError,
    TopicConfig,
    is_rocketmq_system_topic,
    topic_kind,
    topic_problem,
)

log = logging.getLogger("tidemq.app")
audit = logging.getLogger("tidemq.audit")
T = TypeVar("T")
# Seconds between two log lines of the store's loading progress.
PROGRESS_LOG_INTERVAL_S = 5.0
# How often a FIFO group's held receives and event streams look again without an arrival (an ack or an
# invisible time ending frees a FIFO queue, and nothing announces it).
FIFO_RECHECK_MS = 100


# Topic names whose check `topic_name_problem` keeps (past it, the least recently asked are checked again).
TOPIC_NAME_CHECKS_CACHED = 4_096


@functools.lru_cache(maxsize=TOPIC_NAME_CHECKS_CACHED)
def topic_name_problem(topic: str, max_length_bytes: int, cluster_name: str, for_write: bool) -> tuple[str, str] | None:
    """(problem code, detail) when `topic` may not be served, or (`for_write`) written or configured; None when it
    may. A pure function of its arguments, asked on every request that names a topic: cached, as `topic_problem` is
    (a hit is one C call, no Python frame)."""
    problem = topic_problem(topic, max_length_bytes)
    if problem is not None:
        return "TOPIC_INVALID", f"{problem}: {topic[:200]!r}"
    if for_write and (topic in SYSTEM_TOPICS or is_rocketmq_system_topic(topic, cluster_name)):
        return "TOPIC_RESERVED", f"{topic} is a system topic and cannot be written or configured"
    if topic in INTERNAL_TOPICS:
        return "TOPIC_RESERVED", f"{topic} holds the broker's own state and is not served"
    return None


class Broker:
    def __init__(self, settings: BrokerSettings) -> None:
        self.settings = settings
        self.config = settings.store
        self.store: MessageStore = DefaultMessageStore(settings.store)
        # None for a standalone broker; raises HAStartFailed when a master cannot bind its HA port.
        # In a cluster, the node of the current role (set by the cluster node on each role change).
        self.ha: HANode | None = None if settings.cluster.enabled else attach(self.store, settings.ha)
        self.cluster: ClusterNode | None = None
        if settings.cluster.enabled:
            self.cluster = ClusterNode(settings.cluster, settings.ha, self.store, settings.store_dir)
            try:
                self.cluster.prepare()  # before the store loads: a deposed master's tail is cut by its recovery
            except EtcdError as e:
                raise StartRefused(f"the cluster's etcd cannot be read: {e}") from None
            self.cluster.on_node_change = self._set_ha
        self.held = HeldPulls(settings.max_held_pulls)
        self.streams = StreamRegistry(
            self.held,
            settings.max_streams,
            settings.max_streams_per_account,
            min(settings.max_stream_reads, settings.read_threads),
            self._recheck_ms,
        )
        # Held requests and streams by the access the gate granted them (re-judged on an ACL reload).
        self.revocations = Revocations()
        self.consumers = ConsumerRegistry()  # the groups' consumers now (receive, ack, pull with ?group=)
        self.executor = ThreadPoolExecutor(settings.read_threads, thread_name_prefix="tidemq-read")
        self.checker = HttpCheckTransport(
            settings.transaction_check_timeout_ms, settings.transaction_check_concurrency, settings.transaction_check_group_concurrency
        )
        self.store.transactions.set_check_transport(self.checker)
        self.push = PushService(self.store, settings, self.may_deliver)
        self.started = False
        self.stopping = False
        # Set by the process entry (app.server BrokerStart with its own process): once the store runs, the objects
        # made so far (modules, the app, the loaded store's tables) leave the cyclic collector's generations
        # (gc.freeze), so a full collection no longer walks them all under load (tens of ms at a time).
        self.freeze_heap_after_start = False
        # True while start_in_background's load runs; start_failure: why it failed (one line).
        self.loading = False
        self.start_failure: str | None = None
        self._loading: asyncio.Task[None] | None = None
        self.started_at = time.time()
        # Round-robin position per topic for messages with neither queue_id nor sharding_key.
        self._round_robin: dict[str, int] = {}
        self._pending_reads = 0
        self.topics_created_total = 0
        self.pulls_abandoned_total = 0
        self.send_stalls_total = 0  # connections cut because their client took nothing for send_stall_timeout_ms
        # The durable produces' groups, one a loop turn (app.durable_turns): set by the produce routes at the first.
        self.durable_turns: DurableTurns | None = None
        self.http_problems_total: dict[str, int] = {}
        self.http_requests = RequestStats()
        # Messages pulls returned, per topic (counted on the event loop; /metrics drops deleted topics).
        self.topic_pulled_total: dict[str, int] = {}

    # Lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Load, recover and start the store (off the loop); returns when it is running."""
        loop = asyncio.get_running_loop()
        self.held.bind(loop)
        await loop.run_in_executor(None, self._load_and_start)
        self.started = True
        self.started_at = time.time()
        log.info("store %s loaded and started", self.config.store_path_root_dir)
        if self.freeze_heap_after_start:
            gc.freeze()

    def start_in_background(self, on_failure: Callable[[str], None]) -> None:
        """Start the store while the server already serves (health answers, other routes 503 STARTING).

        `on_failure` gets the one-line reason when the store cannot be loaded; `start_failure` keeps it.
        """
        self.loading = True
        self._loading = asyncio.get_running_loop().create_task(self._start_logged(on_failure))

    async def _start_logged(self, on_failure: Callable[[str], None]) -> None:
        reporter = asyncio.get_running_loop().create_task(self._report_progress())
        try:
            await self.start()
        except StoreError as e:
            self.start_failure = f"the store {self.config.store_path_root_dir} cannot be loaded: {e}"
        except Exception as e:
            log.exception("loading the store failed")
            self.start_failure = f"the store {self.config.store_path_root_dir} cannot be loaded: {type(e).__name__}: {e}"
        finally:
            reporter.cancel()
            self.loading = False
        if self.start_failure is not None:
            on_failure(self.start_failure)

    async def _report_progress(self) -> None:
        while True:
            await asyncio.sleep(PROGRESS_LOG_INTERVAL_S)
            progress = recovery_progress(self.store)
            if "total_bytes" in progress:
                log.info(
                    "loading the store: %s, %d of %d bytes scanned", progress["phase"], progress["scanned_bytes"], progress["total_bytes"]
                )
            else:
                log.info("loading the store: %s", progress["phase"])

    def _load_and_start(self) -> None:
        self.store.load()
        self.store.add_message_arriving_listener(self.held.on_message_arriving)
        self.store.add_message_arriving_listener(self.push.on_arrival)
        self.store.start()
        if self.cluster is not None:
            self.cluster.start()
        self.push.start()

    def _set_ha(self, node: HANode | None) -> None:
        self.ha = node

    def release_held(self) -> None:
        """Answer every held pull now (NO_NEW_MSG), end every event stream, and hold no more; safe to call twice."""
        self.stopping = True
        self.held.close()
        self.streams.end_all("SHUTTING_DOWN", "the broker is stopping")

    def count_send_stall(self) -> None:
        self.send_stalls_total += 1

    def _recheck_ms(self, group: str) -> int:
        """How often a pool of event streams of `group` reads unprompted: a FIFO group's queues free up unannounced."""
        if self.started and self.store.group_consumption.group(group).fifo:
            return FIFO_RECHECK_MS
        return self.settings.stream_heartbeat_ms

    async def stop(self) -> None:
        self.release_held()
        self.checker.close()  # first: check-backs under way are cut, so nothing below waits on a producer
        await asyncio.sleep(0)  # let the released pulls write their replies
        if self._loading is not None and not self._loading.done():
            log.info("waiting for the store's load to finish before shutting it down")
            await asyncio.shield(self._loading)  # a load cannot be interrupted halfway; it ends and is shut down
        await asyncio.get_running_loop().run_in_executor(None, self.push.shutdown)  # it receives and acks through the store
        if self.cluster is not None and self.started:
            await asyncio.get_running_loop().run_in_executor(None, self.cluster.stop)  # before the store (cluster/node.py)
        if self.started:
            await asyncio.get_running_loop().run_in_executor(None, self.store.shutdown)
            self.started = False
        self.executor.shutdown(wait=True, cancel_futures=True)
        log.info("store shut down")

    def ready(self) -> bool:
        return self.started and not self.stopping and self.store.is_ready()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking store call in the read pool; READS_BUSY past `max_pending_reads` queued calls."""
        if self._pending_reads >= self.settings.max_pending_reads:
            raise ProblemError("READS_BUSY", f"{self._pending_reads} store calls are waiting for a reader thread")
        self._pending_reads += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)
        finally:
            self._pending_reads -= 1

    # Topics ------------------------------------------------------------------------

    def check_topic_name(self, topic: str, for_write: bool = False) -> None:
        problem = topic_name_problem(topic, self.config.max_topic_length_bytes, self.config.broker_cluster_name, for_write)
        if problem is not None:
            raise ProblemError(*problem)

    def may_create_topic(self, topic: str, explicit: bool) -> bool:
        """Whether a write may create the topic: a valid name, not a system topic; a PUT, or auto-creation on."""
        try:
            self.check_topic_name(topic, for_write=True)
        except ProblemError:
            return False
        return explicit or self.settings.auto_create_topics

    def missing_topic_detail(self, topic: str) -> str:
        """TOPIC_NOT_FOUND's detail for a produce: the closest existing name, and how to create the topic."""
        similar = closest(topic, (c.topic_name for c in self.store.topic_configs() if topic_kind(c.topic_name) == "user"))
        hint = f"did you mean {similar}? " if similar is not None else ""
        return (
            f"topic {topic} does not exist; {hint}create it with PUT /v1/topics/{topic} (or `tidemq topics create {topic}`): "
            "topics are created explicitly (auto_create_topics is off)"
        )

    def topic_config(self, topic: str) -> TopicConfig:
        """The topic's config; TOPIC_INVALID or TOPIC_NOT_FOUND problems otherwise."""
        self.check_topic_name(topic)
        config = self.store.topic_config(topic)
        if config is None:
            raise ProblemError("TOPIC_NOT_FOUND", f"topic {topic} does not exist")
        return config

    def readable_queue(self, topic: str, queue_id: int) -> TopicConfig:
        config = self.topic_config(topic)
        if "r" not in config.perm:
            raise ProblemError("TOPIC_NOT_READABLE", f"topic {topic} has perm {config.perm!r}")
        if not 0 <= queue_id < config.read_queue_nums:
            raise ProblemError("QUEUE_NOT_FOUND", f"topic {topic} has queues 0..{config.read_queue_nums - 1}; there is no queue {queue_id}")
        return config

    def writable_topic(self, topic: str) -> TopicConfig | None:
        """The config of an existing topic a put may write (the checks of `topic_for_produce`), None when it
        does not exist: the produce's common case without a coroutine of its own."""
        problem = topic_name_problem(topic, self.config.max_topic_length_bytes, self.config.broker_cluster_name, True)
        if problem is not None:  # `check_topic_name(topic, for_write=True)`, without its call (every produce asks)
            raise ProblemError(*problem)
        self.check_master()
        config = self.store.topic_config(topic)
        if config is not None and "w" not in config.perm:
            raise ProblemError("TOPIC_NOT_WRITABLE", f"topic {topic} has perm {config.perm!r}")
        return config

    async def topic_for_produce(self, topic: str, request: Request) -> TopicConfig:
        """The topic's config for a put, creating it when auto_create_topics is on and the request's account
        may create it (CREATE on the topic or admin, with an ACL)."""
        config = self.writable_topic(topic)
        if config is None:
            if not self.started:  # its topics are not loaded (or no longer served): no answer about them, as a put answers
                raise ProblemError("SHUTTING_DOWN", "the store is not running; nothing was stored")
            if not self.settings.auto_create_topics:
                raise ProblemError("TOPIC_NOT_FOUND", self.missing_topic_detail(topic))
            require_create(request, topic, "producing to a missing topic")
            config = await self.run(self._create_if_absent, topic)
            account = request_account(request)
            audit.info("created topic %s by a produce account=%s", topic, account.name if account is not None else "-")
            if "w" not in config.perm:
                raise ProblemError("TOPIC_NOT_WRITABLE", f"topic {topic} has perm {config.perm!r}")
        return config

    def _create_if_absent(self, topic: str) -> TopicConfig:
        """Create a topic with the default queue count unless it appeared meanwhile (runs in the pool).

        A creation stored but not confirmed durable (a flush or slave wait timed out) has made the
        topic: the produce goes on, and its own reply says how durable the message is."""
        config = self.store.topic_config(topic)
        if config is None:
            try:
                config = self.store.create_or_update_topic(topic, self.config.default_topic_queue_nums, "rw")
            except StateWriteFailed as exc:
                created = self.store.topic_config(topic)
                if not exc.result.stored or created is None:
                    raise
                config = created
            self.topics_created_total += 1
        return config

    def master_http_address(self) -> str | None:
        """Where producers should send (a slave's master, learned in the handshake or configured)."""
        return self.ha.master_http_address() if self.ha is not None else None

    def check_running(self, *, while_stopping: bool = False) -> None:
        """SERVICE_NOT_AVAILABLE (503) before the store has started or after it stopped; while it
        stops too, unless `while_stopping` (the status routes still describe a stopping store)."""
        if not self.started or (self.stopping and not while_stopping):
            raise ProblemError("SERVICE_NOT_AVAILABLE", "the store is not running")

    def check_master(self) -> None:
        """NOT_MASTER (403, naming the master's HTTP address) on a slave; in a cluster, 503 NO_MASTER or
        NOT_ENOUGH_REPLICAS when this master may not take writes now (ClusterNode.write_refusal); nothing otherwise."""
        if self.config.broker_role is BrokerRole.SLAVE:
            address = self.master_http_address()
            where = f"send to the master at {address}" if address else "the master's address is not known yet"
            raise ProblemError("NOT_MASTER", f"this broker is a slave and accepts no writes; {where}", {"master_http_address": address})
        if self.cluster is not None:
            refusal = self.cluster.write_refusal()  # NO_MASTER (fenced) or NOT_ENOUGH_REPLICAS, before anything is stored
            if refusal is not None:
                raise ProblemError(*refusal)

    def may_deliver(self) -> bool:
        """Whether this broker may deliver push subscriptions now: running, and a master accepting writes."""
        if not self.started or self.stopping:
            return False
        try:
            self.check_master()
        except ProblemError:
            return False
        return True

    def next_round_robin(self, topic: str, queues: int) -> int:
        position = self._round_robin.get(topic, -1) + 1
        if position >= queues:
            position = 0
        self._round_robin[topic] = position
        return position

    def give_back_round_robin(self, topic: str, position: int) -> None:
        """Undo the `next_round_robin` that answered `position`, for a request refused before it stored anything (a
        malformed batch): the next request takes that queue. Left alone when another request moved on since."""
        if self._round_robin.get(topic) == position:
            self._round_robin[topic] = position - 1  # -1 after queue 0: the next one is 0 again, as after a wrap

    def forget_topic(self, topic: str) -> None:
        self._round_robin.pop(topic, None)


def request_broker(request: Request) -> Broker:
    """The broker serving a request (set on the app by app.server.create_app)."""
    broker: Broker = request.app.state.broker
    return broker


# A route handler's parameter for the broker: the handlers live at module level, not in closures.
BrokerDep = Annotated[Broker, Depends(request_broker)]
