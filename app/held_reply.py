"""HeldReply: a durable produce's reply, held until its put's durability wait ends, without a suspended coroutine.

Under SYNC_FLUSH (or on a SYNC_MASTER) a produce is answered once its bytes are flushed (and held by a slave).
Awaited, that wait suspends the request's coroutine chain (the handler, the route, HotRoutes' answer) on a future
of its own, and its end resumes the chain again frame by frame through a loop callback: at 64 durable producers
that machinery was about a sixth of the event loop's time per request. A request the connection serves itself
(app.direct_requests) is offered another way (`HOLDS_REPLY_KEY` in its scope): its producer joins the loop turn's
durability group with a HeldReply (app.durable_turns: `hold`) and the handler goes on to build its reply as if the
put were confirmed; the connection then holds that reply (`hold`) instead of writing it, and the group's outcome
(`settle`) releases it: the reply as built when the wait ended PUT_OK, else the problem the wait's status maps to
(the same answer the awaited wait gives: Producer.durability_problem).

Invariants: released once, when both the reply and the outcome are at hand, in either order; never after
`cancel` (the server's stop at its deadline: the connection closes without a reply, as for a suspended request);
a held reply is in the server's task set while held, so graceful shutdown waits for it. Runs on the event loop only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.responses import Response

from store import PutMessageStatus

if TYPE_CHECKING:
    from app.connections import BoundedHttpProtocol
    from app.direct_requests import DirectExchange, DirectRequests

# Set in a request's scope by app.direct_requests: a durable produce may hold its reply (`HeldReply`) instead of
# awaiting its durability wait.
HOLDS_REPLY_KEY = "tidemq.holds_reply"
# Where a produce that held its reply leaves the HeldReply for the connection.
HELD_REPLY_KEY = "tidemq.held_reply"

# What a durability outcome (the status, None past the deadline; an exception when the wait could not be queued)
# answers instead of the reply as built: None when the reply stands (PUT_OK).
OutcomeProblem = Callable[["PutMessageStatus | None", "BaseException | None"], "BaseException | None"]


class HeldReply:
    __slots__ = ("_problem", "_outcome", "_settled", "_response", "_where", "_done", "audited")

    def __init__(self, problem: OutcomeProblem) -> None:
        self._problem = problem
        self._outcome: BaseException | None = None  # the problem to answer instead, once settled
        self._settled = False
        self._response: Response | None = None  # the reply as built, once held
        self._where: tuple[DirectRequests, BoundedHttpProtocol, DirectExchange] | None = None
        self._done = False  # released or cancelled
        self.audited: str | None = None  # the account an ACL gate audits the answer for (HotRoutes.answer)

    def settle(self, status: PutMessageStatus | None, exc: BaseException | None) -> None:
        """The durability wait ended (app.durable_turns): release the reply when it is held already."""
        if self._settled:
            return
        self._settled = True
        self._outcome = self._problem(status, exc)
        if self._where is not None:
            self._release()

    def hold(self, requests: DirectRequests, protocol: BoundedHttpProtocol, exchange: DirectExchange, response: Response) -> None:
        """The reply as built, to be written by `requests` once the wait's outcome is known."""
        assert self._where is None, "a reply is held once"
        self._response = response
        self._where = (requests, protocol, exchange)
        protocol.tasks.add(self)  # type: ignore[arg-type]  # uvicorn's task set: graceful shutdown waits for it
        if self._settled:
            self._release()

    def _release(self) -> None:
        where = self._where
        assert where is not None and self._response is not None
        if self._done:
            return
        self._done = True
        requests, protocol, exchange = where
        protocol.tasks.discard(self)
        requests.release(protocol, exchange, self._response, self._outcome, self.audited)

    def cancel(self, msg: Any = None) -> bool:
        """The server's stop passed its deadline (uvicorn cancels its task set): close without a reply. The
        set is being iterated, so leaving it and closing are the next callback's."""
        where = self._where
        if self._done or where is None:
            return False
        self._done = True
        where[1].loop.call_soon(self._cancelled)
        return True

    def _cancelled(self) -> None:
        where = self._where
        assert where is not None
        requests, protocol, exchange = where
        protocol.tasks.discard(self)
        requests.failed(protocol, exchange, cancelled=True)
