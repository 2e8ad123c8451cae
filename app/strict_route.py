"""StrictRoute: the route class of every API router, whose requests read their query from the one
parse (app.query) and refuse JSON bodies whose objects repeat a name (app.strict_json)."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from app.query import query_of
from app.strict_json import DuplicateName, reject_duplicates


class StrictRequest(Request):
    """A request whose query parameters are the scope's one parse, and whose JSON body is refused (as a
    JSON decode error: 400 BODY_INVALID) when a name repeats."""

    @property
    def query_params(self) -> QueryParams:
        # Starlette would parse scope["query_string"] again, keeping the last of repeated names.
        return QueryParams(query_of(self.scope))

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = json.loads(body, object_pairs_hook=reject_duplicates)
            except DuplicateName as e:
                raise json.JSONDecodeError(str(e), body.decode("utf-8", "replace"), 0) from None
        return self._json


class StrictRoute(APIRoute):
    """An APIRoute whose handler gets a StrictRequest."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictRequest(request.scope, request.receive))

        return strict_handler
