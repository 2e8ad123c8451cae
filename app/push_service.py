"""PushService: delivers each push subscription's messages to its URL, as its consumer group.

A push subscription is group consumption done by the broker: the service receives for the group
(invisible for the subscription's `timeout_ms` plus ACK_SLACK_MS), POSTs each message
(app/push_delivery.py), acks it on a 2xx, and on anything else makes it invisible for RocketMQ's
backoff (the delay level 3 + reconsume times of `message_delay_level`, as RocketMQ's
consumerSendMsgBack: 10 s, 30 s, 1 min, 2 min, ... 2 h), after which the revive service puts it
into the group's retry topic with reconsume times + 1, or into `%DLQ%{group}` past the group's
`max_reconsume_times`. A message whose body is over `push_max_body_bytes` goes to `%DLQ%{group}` at
once. Every record of this is the store's (checkpoints, acks), so a restart or a failover delivers
each unacked message again: at least once.

Why a ServiceThread running its own asyncio event loop: a delivery waits on another host, so one
coroutine per delivery lets a subscription keep `max_in_flight` deliveries under way and a slow
receiver costs a socket, not a thread; the loop being its own keeps deliveries out of the queue
of the loop that serves requests. Store calls block on the store's durability, so they run on
STORE_THREADS threads of the service's own pool.

The service runs on every broker and delivers only while `may_deliver()` (a master accepting
writes): a slave promoted by a failover starts within RECONCILE_INTERVAL_MS, a deposed master stops.
The subscriptions are the store's (a state table): the service follows them, a worker per
subscription, woken by arrivals in its topic and retry topic (the store's arriving listener).

Bounds: `max_in_flight` deliveries per subscription, at most `push_max_subscriptions` of those;
connections per host and the time of each delivery in PushPoster; store calls on STORE_THREADS.
Shutdown (Broker.stop, before the store's): workers stop receiving, deliveries under way get
STOP_DRAIN_S to end (the others are cancelled: their messages come back after their invisible
time), then the connections close and the store pool finishes its calls.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from app.push_delivery import DeliveryOutcome, PushPoster, PushRequest
from app.receive_models import MAX_INVISIBLE_MS, MIN_INVISIBLE_MS
from app.settings import BrokerSettings
from core import ServiceThread
from store import AckOutcome, MessageStore, Popped, PushSubscription, decode_message, inflate_body, retry_topic

log = logging.getLogger("tidemq.app")
T = TypeVar("T")

# Threads of the service's store pool (receives, acks, invisible-time changes, dead-lettering).
STORE_THREADS = 4
# Messages one receive takes at most (RocketMQ's POP takes at most 32 per request).
MAX_RECEIVE = 32
# Invisible time past a delivery's timeout left for its ack to be stored.
ACK_SLACK_MS = 5_000
# How often the service looks at the subscriptions table without being told it changed.
RECONCILE_INTERVAL_MS = 1_000
# How long deliveries under way may take to end at shutdown before they are cancelled.
STOP_DRAIN_S = 2.0
# RocketMQ's first retry delay level (consumerSendMsgBack: 3 + reconsume times).
FIRST_RETRY_LEVEL = 3
# How long a delivered message's ack waits for others to be stored with it (one ack record per batch).
ACK_LINGER_MS = 5
# Handles one ack call carries at most (the ack endpoint's own bound).
MAX_ACK_HANDLES = 1_000


@dataclass(slots=True)
class PushCounts:
    delivered: int = 0  # 2xx replies (acked)
    failed: int = 0  # replies with another status
    errors: int = 0  # no reply: connection failures, the deadline
    too_large: int = 0  # bodies over push_max_body_bytes, dead-lettered at once
    in_flight: int = 0  # deliveries under way
    last_status: int | None = None  # the last reply's status
    last_error: str | None = None  # why the last delivery or receive got no reply (None after a reply)
    last_attempt_ms: int = 0


class _Worker:
    def __init__(self, group: str) -> None:
        self.group = group
        self.counts = PushCounts()
        self.wake = asyncio.Event()
        self.deliveries: set[asyncio.Task[None]] = set()
        self.task: asyncio.Task[None] | None = None
        self.acks: dict[str, list[str]] = {}  # topic -> handles delivered and not yet acked
        self.ack_task: asyncio.Task[None] | None = None


def backoff_ms(levels_ms: list[int], reconsume_times: int) -> int:
    """RocketMQ's retry delay after the `reconsume_times`-th failed delivery: level 3 + reconsume times, capped at the last."""
    index = min(FIRST_RETRY_LEVEL - 1 + reconsume_times, len(levels_ms) - 1)
    return min(max(levels_ms[index], MIN_INVISIBLE_MS), MAX_INVISIBLE_MS)


class PushService(ServiceThread):
    def __init__(self, store: MessageStore, settings: BrokerSettings, may_deliver: Callable[[], bool]) -> None:
        super().__init__("PushService")
        self.gc = store.group_consumption
        self.settings = settings
        self.may_deliver = may_deliver
        self.levels_ms = store.config.delay_levels_ms()
        self.body_limit = settings.push_max_body_bytes
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None
        self._workers: dict[str, _Worker] = {}
        self._watched: dict[str, tuple[str, ...]] = {}  # topic (or retry topic) -> the groups that push it
        self._pool = ThreadPoolExecutor(STORE_THREADS, thread_name_prefix="tidemq-push-store")

    # From other threads ---------------------------------------------------------------

    def wakeup(self) -> None:
        """Look at the subscriptions now (a route changed one) or, at shutdown, stop."""
        super().wakeup()
        self._call_soon(lambda: self._changed.set() if self._changed is not None else None)

    def on_arrival(self, topic: str, queue_id: int, after: int, codes: tuple[int, ...] | None) -> None:
        """The store's arriving listener (the dispatching thread): wakes the workers of the topic."""
        groups = self._watched.get(topic)
        if groups is not None:
            self._call_soon(lambda: self._wake(groups))

    def counts(self) -> dict[str, PushCounts]:
        """A copy of each subscription's counters since the start."""
        return {group: dataclasses.replace(w.counts) for group, w in list(self._workers.items())}

    def _call_soon(self, fn: Callable[[], Any]) -> None:
        loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(fn)
            except RuntimeError:
                pass  # the loop closed: the service stopped

    # The loop -------------------------------------------------------------------------

    def run(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._main(loop))
        finally:
            self._loop = None
            loop.close()
            self._pool.shutdown(wait=True)

    async def _main(self, loop: asyncio.AbstractEventLoop) -> None:
        self._changed = asyncio.Event()
        self._loop = loop
        poster = PushPoster(self.settings.push_max_connections_per_host)
        try:
            while not self.is_stopped():
                self._changed.clear()
                await self._reconcile(poster)
                try:
                    await asyncio.wait_for(self._changed.wait(), RECONCILE_INTERVAL_MS / 1000.0)
                except TimeoutError:
                    pass
        finally:
            await self._stop_workers()
            poster.close()

    async def _reconcile(self, poster: PushPoster) -> None:
        subs = self.gc.push_subscriptions()
        watched: dict[str, list[str]] = {}
        for sub in subs:
            for topic in (sub.topic, retry_topic(sub.group, sub.topic)):
                watched.setdefault(topic, []).append(sub.group)
            worker = self._workers.get(sub.group)
            if worker is None or worker.task is None or worker.task.done():
                worker = self._workers[sub.group] = worker or _Worker(sub.group)
                worker.task = asyncio.create_task(self._work(worker, poster))
            worker.wake.set()  # a changed definition (max_in_flight, url) is read at its next step
        self._watched = {topic: tuple(groups) for topic, groups in watched.items()}
        names = {sub.group for sub in subs}
        for group in [g for g, w in self._workers.items() if g not in names and (w.task is None or w.task.done())]:
            del self._workers[group]  # a deleted subscription's counters go once its deliveries ended
        poster.forget_others({sub.url for sub in subs})

    def _wake(self, groups: tuple[str, ...]) -> None:
        for group in groups:
            worker = self._workers.get(group)
            if worker is not None:
                worker.wake.set()

    async def _nap(self, worker: _Worker, ms: int) -> None:
        try:
            await asyncio.wait_for(worker.wake.wait(), ms / 1000.0)
        except TimeoutError:
            pass

    async def _store(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _stop_workers(self) -> None:
        workers = list(self._workers.values())
        tasks = [w.task for w in workers if w.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        deliveries = [d for w in workers for d in w.deliveries]
        if deliveries:
            _, late = await asyncio.wait(deliveries, timeout=STOP_DRAIN_S)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        acks = [w.ack_task for w in workers if w.ack_task is not None]
        await asyncio.gather(*acks, return_exceptions=True)  # the acks of what was delivered are stored before the store stops

    # A subscription's worker ----------------------------------------------------------

    async def _work(self, worker: _Worker, poster: PushPoster) -> None:
        idle_ms = self.settings.push_idle_poll_ms
        while not self.is_stopped():
            sub = self.gc.push_subscription(worker.group)
            if sub is None:
                break
            worker.wake.clear()  # before the receive: an arrival during it wakes the nap below
            free = sub.max_in_flight - worker.counts.in_flight
            # Receives take a batch: half the window free, or nothing in flight (a receive per freed slot costs a put each).
            if not self.may_deliver() or free <= 0 or (worker.counts.in_flight > 0 and free < max(1, sub.max_in_flight // 2)):
                await self._nap(worker, idle_ms)  # a delivery that ends wakes it
                continue
            invisible_ms = min(max(sub.timeout_ms + ACK_SLACK_MS, MIN_INVISIBLE_MS), MAX_INVISIBLE_MS)
            try:
                popped = await self._store(self.gc.receive, sub.group, sub.topic, min(free, MAX_RECEIVE), invisible_ms)
            except Exception as e:  # the store refused (shutting down, disk full): tried again after a nap
                worker.counts.last_error = f"receive failed: {type(e).__name__}: {e}"[:300]
                log.warning("push subscription %s: %s", sub.group, worker.counts.last_error)
                popped = []
            if not popped:
                await self._nap(worker, idle_ms)
                continue
            for p in popped:
                worker.counts.in_flight += 1
                task = asyncio.create_task(self._deliver(worker, sub, p, poster))
                worker.deliveries.add(task)
                task.add_done_callback(worker.deliveries.discard)
        if worker.deliveries:
            await asyncio.wait(set(worker.deliveries))
        if worker.ack_task is not None:
            await worker.ack_task

    async def _deliver(self, worker: _Worker, sub: PushSubscription, p: Popped, poster: PushPoster) -> None:
        counts = worker.counts
        try:
            counts.last_attempt_ms = int(time.time() * 1000)
            req = self._request(sub, p)
            if req is None:
                counts.too_large += 1
                await self._store(self.gc.dead_letter, sub.group, sub.topic, p)
                return
            result = await poster.post(req, counts.last_attempt_ms)
            counts.last_status, counts.last_error = result.status, result.error
            if result.outcome is DeliveryOutcome.DELIVERED:
                counts.delivered += 1
                self._ack_soon(worker, sub.topic, p.handle)
                return
            if result.outcome is DeliveryOutcome.FAILED:
                counts.failed += 1
            else:
                counts.errors += 1
            await self._store(self.gc.change_invisible, sub.group, sub.topic, p.handle, backoff_ms(self.levels_ms, p.reconsume_times))
        except Exception:  # the message comes back after its invisible time
            log.exception("push delivery for %s failed", sub.group)
        finally:
            counts.in_flight -= 1
            worker.wake.set()

    def _ack_soon(self, worker: _Worker, topic: str, handle: str) -> None:
        """Ack a delivered message together with the others delivered within ACK_LINGER_MS (one ack record per receive batch)."""
        worker.acks.setdefault(topic, []).append(handle)
        if worker.ack_task is None or worker.ack_task.done():
            worker.ack_task = asyncio.create_task(self._flush_acks(worker))

    async def _flush_acks(self, worker: _Worker) -> None:
        await asyncio.sleep(ACK_LINGER_MS / 1000.0)
        while worker.acks:
            topic = next(iter(worker.acks))
            handles = worker.acks[topic][:MAX_ACK_HANDLES]
            del worker.acks[topic][:MAX_ACK_HANDLES]
            if not worker.acks[topic]:
                del worker.acks[topic]
            try:
                outcomes: list[AckOutcome] = await self._store(self.gc.ack, worker.group, topic, handles)
            except Exception as e:  # not acked: the messages come back after their invisible time
                log.warning("push subscription %s: %d acks not stored: %s", worker.group, len(handles), e)
                continue
            refused = [o.value for o in outcomes if o is not AckOutcome.OK]
            if refused:  # an expired handle: delivered again after its invisible time (at least once)
                log.warning("push subscription %s: %d of %d acks were %s", worker.group, len(refused), len(handles), sorted(set(refused)))

    def _request(self, sub: PushSubscription, p: Popped) -> PushRequest | None:
        """The POST of one received message; None when its body is over push_max_body_bytes (or cannot be inflated)."""
        m = decode_message(p.data, 0, hosts=False)
        body, status = inflate_body(m["body"], m["sys_flag"], self.body_limit)
        if status.failed or len(body) > self.body_limit:
            return None
        return PushRequest(sub.url, body, m["msg_id"], sub.topic, m.get("tags"), m.get("keys") or [], p.reconsume_times, sub.group,
                           sub.secret, sub.timeout_ms)  # fmt: skip
