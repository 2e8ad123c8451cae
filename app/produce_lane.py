"""ProduceLane: a produce served from the connection's read, without a scope, a coroutine or a response object.

The produce route's common case on the wire is one request in one read: `POST /v1/topics/{topic}/messages` with a
JSON or an application/octet-stream body. Served the direct way (app.direct_requests) it still builds an ASGI scope,
matches the route, steps HotRoutes' answer coroutine, reads the headers again, makes a Starlette response and joins
its head: at 64 producers that Python work was most of the event loop's time per request, more than the store's put
and the socket's write together. So the server's protocol offers such a read here first (`serve`): app._http's
`produce_request` takes it only in that one form (HTTP/1.1, no header but Host, Content-Length, Content-Type,
Connection, User-Agent, Accept, Accept-Encoding and one Authorization, a topic of `[A-Za-z0-9_-]`), and the lane
packs its body as the direct way's packed produce does (Producer.serve: a JSON body without a query by
`packed_json`, a raw body with a query app.raw_query takes by `packed_raw`), stores it the same way (the store's put
lane, `put_packed`, without a batch or result object; when that declines, `put_answer`) and writes the same 201
(`render_produce_reply`, the head `DirectRequests` writes). Its put answers the pulls held at its first message's
offset with its messages before its dispatch pass (`_deliver`).

Anything the lane does not serve exactly as the direct way would, it declines before anything is stored, and the
request goes that way (so does a read that does not spell its media type in lower case: the protocol looks for it
before offering a read here, so that other requests are not read twice): the lane off (a cluster forwarder judges
requests, the hot routes off, the access log on, the store loading), a body past its limit, a JSON body with a query
or one `packed_json` leaves to the parser, a raw query app.raw_query leaves, a slave, a cluster that refuses writes
now, a topic missing, not writable or whose name the produce refuses, a queue the topic does not have, a produce the
ACL gate would not let through unaudited (`AccessGate.admit_produce`, asked last) and a put the store refuses
(nothing stored: the direct way judges it, puts it again and answers; the rate-limit token the gate took is given
back first).

Under SYNC_FLUSH (or on a SYNC_MASTER) the reply is held (`LaneReply`) until the loop turn's durability group ends
(app.durable_turns), then written: the 201, or the problem the direct way answers (Producer.durability_problem). The
replies held in one group are one member of it (`LaneBatch`), whose confirmed 201s are written in one loop. A
held reply is the connection's cycle meanwhile, so a pipelined request waits in uvicorn's pipeline, and it is in
the server's task set, so graceful shutdown waits for it and, at its deadline, closes the connection unanswered.

Runs on the event loop only.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from app._http import produce_request
from app.broker import Broker, topic_name_problem
from app.dispatch_barrier import BARRIER_KEY
from app.hot_routes import PRODUCE_ROUTE
from app.http_requests import ROUTE_KEY, Tally
from app.raw_query import raw_query
from app.responses import JSON
from app.routes_produce import RESERVED_NAMES, host_hex_bytes
from store import (
    BrokerRole,
    EncodedItems,
    PackedProduce,
    PackedPut,
    PutBatch,
    PutMessageResult,
    PutMessageStatus,
    packed_json,
    packed_raw,
    render_produce_reply,
)

if TYPE_CHECKING:
    from app.connections import BoundedHttpProtocol
    from app.direct_requests import DirectRequests
    from app.durable_turns import DurableTurns
    from app.routes_produce import Producer

# Topic names the lane has found writable by name (`topic_name_problem` None); cleared past this many.
MAX_LANE_TOPICS = 1024
_CREATED = STATUS_LINE[201]


class _NoReader:
    """A held reply's `message_event` as uvicorn's connection_lost sets it: nothing reads a lane request's body."""

    __slots__ = ()

    def set(self) -> None:
        """Nothing to wake."""


_NO_READER = _NoReader()


class ProduceLane:
    """The server's: which produces its connections serve from their reads, and serving them."""

    def __init__(self, requests: DirectRequests, producer: Producer, broker: Broker, max_body_bytes: int, max_json_bytes: int) -> None:
        self.requests = requests
        self.hot = requests.hot
        self.stats = self.hot.stats  # the request figures (in flight, per status)
        self.producer = producer
        self.broker = broker
        self.store = broker.store
        self.held_pulls = broker.held  # the held pulls a single put wakes with its message (`_deliver`)
        # The largest bodies taken here: a raw one within the request body limit and the message size limit, a JSON
        # one within the JSON body limit (past them, the direct way answers 413).
        self.max_raw_bytes = min(max_body_bytes, producer.limits.max_message_size_bytes)
        self.max_json_bytes = max_json_bytes
        self.max_body_bytes = max(self.max_raw_bytes, max_json_bytes)  # the largest body either form may have
        self._names: dict[bytes, str] = {}  # topic names the produce takes, by their bytes in the target
        self.served = 0  # requests served here (tests and benchmarks)
        self.held = 0  # of them, those whose reply waited for a durability group
        self._created_tally: Tally | None = None  # the request figures of the lane's 201s (`_answered`)
        self._host = b""  # the store host the 201s were last rendered for, and its hex (`_created`)
        self._host_hex = b""
        self._defaults: list[tuple[bytes, bytes]] | None = None  # uvicorn's default headers the 201s last had, and their
        self._defaults_head = b""  # head lines (`_created`)
        self._turns: DurableTurns | None = None  # the producer's durability groups, once a reply was held
        self._batch: LaneBatch | None = None  # the held replies of the latest durability group (`_hold`)

    def serve(self, protocol: BoundedHttpProtocol, data: bytes, max_head: int) -> bool:
        """Serve `data`, a connection's read at a request's start, when it is one produce the lane takes;
        False, with nothing stored and nothing written, when it is not (the caller serves it its own way)."""
        found = produce_request(data, max_head, self.max_body_bytes)
        if found is None:
            return False
        hot, broker = self.hot, self.broker
        gate = hot.gate
        if (hot.guard is not gate) or not hot.serve_hot or hot.log_requests or broker.loading:
            return False  # the lane is off (the module's docstring says when)
        start_ns = time.perf_counter_ns()
        topic_bytes, query, body, keep_alive, is_json, authorization = found
        topic = self._names.get(topic_bytes) or self._writable_name(topic_bytes)
        if topic is None:
            return False
        config = self.store.topic_config(topic)
        if config is None or "w" not in config.perm:
            return False
        if (broker.cluster is not None or broker.config.broker_role is BrokerRole.SLAVE) and not self._may_write(broker):
            return False
        if is_json or query:
            packed = self._packed(body, query, is_json)
        else:  # the common raw produce: no queue, no properties (`_packed`'s first case, without its call)
            packed = packed_raw(body, -1, self.max_raw_bytes)
        queues = config.write_queue_nums
        if packed is None or packed.queue_id >= queues:
            return False  # the direct way parses it (and answers its problem: QUEUE_NOT_FOUND past the queues)
        account = None
        if gate is not None:  # judged last: a token of its rate limit is taken
            account = gate.admit_produce(topic, authorization)
            if account is None:
                return False  # the direct way judges it and answers
        queue_id = broker.next_round_robin(topic, queues) if packed.queue_id < 0 else packed.queue_id
        barrier = protocol.dispatch_barrier  # a durability wait, when owed, is the loop turn's group's (`_hold`)
        put = self.store.put_packed(topic, queue_id, packed, protocol.born_host, barrier is not None)
        if put is not None:
            if barrier is not None and self.held_pulls.waits_on((topic, queue_id)):
                self._deliver(topic, put[0])
        else:
            put = self._put_batch(topic, queue_id, packed, protocol.born_host, barrier is not None)
        if barrier is not None:
            barrier.owe()  # also when refused: the pass finds nothing to dispatch
        if put is None:
            if account is not None and gate is not None:
                gate.limiter.give_back(account)
            return False  # nothing stored: the direct way judges it, puts it again and answers
        self.served += 1
        items, end, owed = put
        reply, sent = self._created(protocol, packed, items, keep_alive)
        if owed:
            self._hold(protocol, topic, items, end, reply, sent, keep_alive, start_ns)
            return True
        protocol.replies.write_yielding(reply)
        if not keep_alive:
            protocol.transport.close()
        self._answered(protocol, 201, start_ns, sent)
        return True

    def _deliver(self, topic: str, items: EncodedItems) -> None:
        """Wake the pulls held at the offset of the first message the put lane has just stored, with its messages
        (app.long_poll `deliver`), before its dispatch pass is owed: their continuations come first in the loop's
        queue, then the pass, then this produce's reply."""
        self.held_pulls.deliver((topic, items.queue_id), items.first_queue_offset, items.spans())

    def _put_batch(self, topic: str, queue_id: int, packed: PackedProduce, born_host: bytes, defer_dispatch: bool) -> PackedPut | None:
        """The put the store's lane (`put_packed`) declined, made the general way (the hooks, the write-through of a
        large body): as `put_packed` answers; None when the store refused it (nothing stored)."""
        batch = PutBatch.of_packed(topic, queue_id, packed, born_host, dedup=True)
        batch.defer_durability = True
        batch.defer_dispatch = defer_dispatch
        result = self.store.put_answer(batch)[0]
        if result.status is not PutMessageStatus.PUT_OK:
            return None
        items = result.items
        assert isinstance(items, EncodedItems), "a packed put's items"
        return items, result.end_offset, result.durability_owed

    def _packed(self, body: bytes, query: bytes, is_json: bool) -> PackedProduce | None:
        """The body packed as the direct way packs it (Producer.serve): a JSON body without a query by `packed_json`, a
        raw one with the query app.raw_query takes by `packed_raw`; None for one the direct way parses itself."""
        if is_json:
            if query or len(body) > self.max_json_bytes:
                return None
            limits = self.producer.limits
            return packed_json(body, limits.max_batch_messages, limits.max_message_size_bytes, RESERVED_NAMES)
        if not query:  # no queue, no properties
            return packed_raw(body, -1, self.max_raw_bytes)
        fields = raw_query(query)
        if fields is None or len(body) > self.max_raw_bytes:
            return None
        return packed_raw(body, fields.queue_id, self.max_raw_bytes, fields.properties)

    def _writable_name(self, topic_bytes: bytes) -> str | None:
        """The topic a target names when a produce may write to that name (`topic_name_problem`), else None; kept for
        the next request to the name (`serve` looks there first)."""
        names = self._names
        topic = names.get(topic_bytes)
        if topic is None:
            topic = topic_bytes.decode("ascii")  # [A-Za-z0-9_-] only (produce_request)
            config = self.broker.config
            if topic_name_problem(topic, config.max_topic_length_bytes, config.broker_cluster_name, True) is not None:
                return None
            if len(names) >= MAX_LANE_TOPICS:
                names.clear()
            names[topic_bytes] = topic
        return topic

    @staticmethod
    def _may_write(broker: Broker) -> bool:
        """Broker.check_master's verdict without its problem: a master, and in a cluster one that may take writes now."""
        if broker.config.broker_role is BrokerRole.SLAVE:
            return False
        return broker.cluster is None or broker.cluster.write_refusal() is None

    def _created(self, protocol: BoundedHttpProtocol, packed: PackedProduce, items: EncodedItems, keep_alive: bool) -> tuple[bytes, int]:
        """The whole 201 (status line, head, blank line, body) as DirectRequests writes the direct way's, and its body's
        length."""
        store_host = items.store_host
        if store_host is not self._host:  # the store's one value: its hex worked out once
            self._host, self._host_hex = store_host, host_hex_bytes(store_host)
        body = render_produce_reply(
            packed.head, packed.first, self._host_hex, items.queue_id, items.first_queue_offset, items.store_timestamp,
            items.offsets, packed.is_batch,
        )  # fmt: skip
        headers = protocol.server_state.default_headers
        defaults = self._defaults_head if headers is self._defaults else self._default_head(headers)
        ending = b"\r\n" if keep_alive else b"connection: close\r\n\r\n"
        return b"%s%scontent-length: %d\r\ncontent-type: %s\r\n%s%s" % (_CREATED, defaults, len(body), JSON, ending, body), len(body)

    def _default_head(self, headers: list[tuple[bytes, bytes]]) -> bytes:
        """uvicorn's default headers as head lines (DirectRequests.default_head), kept while the list is the same (it
        changes once a second, with the date it carries)."""
        self._defaults, self._defaults_head = headers, self.requests.default_head(headers)
        return self._defaults_head

    def _hold(
        self, protocol: BoundedHttpProtocol, topic: str, items: EncodedItems, end: int, reply: bytes, sent: int, keep_alive: bool,
        start_ns: int,
    ) -> None:  # fmt: skip
        held = LaneReply(self, protocol, topic, items, reply, sent, keep_alive, start_ns)
        self.held += 1
        self.stats.in_flight += 1
        protocol.cycle = held  # type: ignore[assignment]  # read by uvicorn's protocol as a cycle
        protocol.tasks.add(held)  # type: ignore[arg-type]  # uvicorn's task set: graceful shutdown waits for it
        batch = self._batch  # the held replies of this loop turn's durability group, settled together
        if batch is None or not batch.turns.reach(end, batch.group):
            turns = self._turns
            if turns is None:
                turns = self._turns = self.producer.durable_turns()
            batch = self._batch = LaneBatch(self, turns)
            batch.group = turns.hold(end, batch)
        batch.replies.append(held)

    def _answered(self, protocol: BoundedHttpProtocol, status: int, start_ns: int, sent: int) -> None:
        """Count the request as HotRoutes counts a produce, and let uvicorn start what follows."""
        if status == 201:  # the lane's common answer: its series looked up once (`_created_count`)
            (self._created_tally or self._created_count()).add(time.perf_counter_ns() - start_ns, sent)
        else:
            self.hot.stats.add(PRODUCE_ROUTE, "POST", status, time.perf_counter_ns() - start_ns, sent)
        protocol.on_response_complete()

    def _created_count(self) -> Tally:
        """The request figures of the lane's 201s, made at the first (as RequestStats.add makes a series)."""
        created = self._created_tally = self.hot.stats.tally(PRODUCE_ROUTE, "POST", 201)
        return created

    @staticmethod
    def _let_go(protocol: BoundedHttpProtocol, held: LaneReply) -> None:
        """A held reply done with: no longer the connection's cycle (it refers to the protocol, so the two would be
        left to the cyclic collector when the connection goes)."""
        cycle: object = protocol.cycle  # uvicorn types it as its own cycle; the lane puts a LaneReply there
        if cycle is held:
            protocol.cycle = None  # type: ignore[assignment]  # uvicorn starts a connection with None, typed as a cycle

    def batch_settled(self, batch: LaneBatch) -> None:
        """`batch`'s group ended: a later held reply starts a batch of its own."""
        if self._batch is batch:
            self._batch = None

    def release_all(self, replies: list[LaneReply]) -> None:
        """Write the 201 of each of a durability group's held replies (its wait ended confirmed) not settled or
        cancelled yet, in one loop: one clock reading for their figures, the count in flight changed once."""
        created = self._created_tally or self._created_count()
        now_ns = time.perf_counter_ns()
        released = 0
        for held in replies:
            if held.settled:
                continue  # cancelled by the server's stop
            held.settled = True
            released += 1
            protocol = held.protocol
            protocol.tasks.discard(held)
            held.response_complete = True
            if not held.disconnected:
                protocol.replies.write_now(held.reply)
                if not held.keep_alive:
                    protocol.transport.close()
            cycle: object = protocol.cycle  # `_let_go`, written out
            if cycle is held:
                protocol.cycle = None  # type: ignore[assignment]  # uvicorn starts a connection with None, typed as a cycle
            created.add(now_ns - held.start_ns, held.sent)
            protocol.on_response_complete()
        self.stats.in_flight -= released

    def refuse(self, held: LaneReply, problem: BaseException) -> None:
        """Write, instead of a held reply's 201, the reply `problem` (its durability wait's) maps to."""
        protocol = held.protocol
        protocol.tasks.discard(held)
        self.hot.stats.in_flight -= 1
        held.response_complete = True
        response = self.hot.error_reply(lane_scope(protocol, held.topic), problem)
        status, body, keep_alive = response.status_code, bytes(response.body), held.keep_alive
        head = self.requests.default_head(protocol.server_state.default_headers)
        for name, value in response.raw_headers:  # as DirectRequests writes a problem's head
            if name == b"connection" and b"close" in value.lower():
                keep_alive = False
            head += name + b": " + value + b"\r\n"
        if not held.disconnected:
            ending = b"\r\n" if keep_alive else b"connection: close\r\n\r\n"
            protocol.replies.write_now(b"".join((STATUS_LINE[status], head, ending, body)))
            if not keep_alive:
                protocol.transport.close()
        self._let_go(protocol, held)
        self._answered(protocol, status, held.start_ns, len(body))

    def cancelled(self, held: LaneReply) -> None:
        """A held reply cut by the server's stop at its deadline: the connection closes unanswered (as a suspended
        request's does), counted as the direct way counts it."""
        protocol = held.protocol
        protocol.tasks.discard(held)
        self.hot.stats.in_flight -= 1
        held.response_complete = True
        self.hot.stats.add(PRODUCE_ROUTE, "POST", 500, time.perf_counter_ns() - held.start_ns, 0)
        self._let_go(protocol, held)
        protocol.transport.close()


def lane_scope(protocol: BoundedHttpProtocol, topic: str) -> dict[str, Any]:
    """A scope for the problem reply of a held request (the error mapping names the request's path): built only then."""
    path = f"/v1/topics/{topic}/messages"
    return {
        "type": "http", "http_version": "1.1", "method": "POST", "scheme": protocol.scheme, "server": protocol.server,
        "client": protocol.client, "root_path": protocol.root_path, "path": protocol.root_path + path,
        "raw_path": path.encode(), "query_string": b"", "headers": [], "path_params": {"topic": topic}, ROUTE_KEY: PRODUCE_ROUTE,
        BARRIER_KEY: protocol.dispatch_barrier,
    }  # fmt: skip


class LaneBatch:
    """The lane's held replies of one durability group (app.durable_turns holds the batch as one member): settled
    together, the 201s written in one loop when the wait confirmed them, each reply's own way otherwise."""

    __slots__ = ("lane", "turns", "group", "replies")

    def __init__(self, lane: ProduceLane, turns: DurableTurns) -> None:
        self.lane = lane
        self.turns = turns
        self.group: object = None  # the group joined (DurableTurns.hold's token; `reach` adds the later puts)
        self.replies: list[LaneReply] = []

    def settle(self, status: PutMessageStatus | None, exc: BaseException | None) -> None:
        """The group ended (app.durable_turns): every reply written as its outcome answers."""
        self.lane.batch_settled(self)
        # The group holds the batch and the batch its group: let go of it (and of the replies once written), so that
        # neither waits for the cyclic collector.
        self.group, replies, self.replies = None, self.replies, []
        if status is PutMessageStatus.PUT_OK and exc is None:
            self.lane.release_all(replies)
            return
        for held in replies:
            held.settle(status, exc)


class LaneReply:
    """A lane request's 201 held until its durability group ends; the connection's cycle meanwhile (the fields
    uvicorn's protocol reads of one) and a member of the server's task set (`cancel`)."""

    __slots__ = (
        "lane", "protocol", "topic", "items", "reply", "sent", "keep_alive", "start_ns", "response_complete", "disconnected",
        "more_body", "message_event", "settled",
    )  # fmt: skip

    def __init__(
        self, lane: ProduceLane, protocol: BoundedHttpProtocol, topic: str, items: EncodedItems, reply: bytes, sent: int,
        keep_alive: bool, start_ns: int,
    ) -> None:  # fmt: skip
        self.lane = lane
        self.protocol = protocol
        self.topic = topic
        self.items = items  # the put's (a problem's reply names them)
        self.reply = reply  # the whole 201: status line, head, blank line, body
        self.sent = sent  # its body's length
        self.keep_alive = keep_alive  # False: closed after the reply (`Connection: close`, the server's stop)
        self.start_ns = start_ns
        self.response_complete = False
        self.disconnected = False  # set by uvicorn's connection_lost
        self.more_body = False
        self.message_event = _NO_READER
        self.settled = False  # released or cancelled

    def settle(self, status: PutMessageStatus | None, exc: BaseException | None) -> None:
        """The durability group ended (app.durable_turns): write the reply its outcome answers, once."""
        if self.settled:
            return
        lane = self.lane
        if status is PutMessageStatus.PUT_OK and exc is None:  # confirmed: the 201 (durability_problem's None)
            lane.release_all([self])
            return
        self.settled = True
        problem = lane.producer.durability_problem(PutMessageResult(PutMessageStatus.PUT_OK, items=self.items), status, exc)
        assert problem is not None, "a wait that did not end PUT_OK has its problem"
        lane.refuse(self, problem)

    def cancel(self, msg: Any = None) -> bool:
        """The server's stop passed its deadline (uvicorn cancels its task set, iterating it): close unanswered, in
        the next callback."""
        if self.settled:
            return False
        self.settled = True
        self.protocol.loop.call_soon(self.lane.cancelled, self)
        return True
