"""A broker process for the replication tests: `tidemq serve` with the replication options.

It wires ha/ into the real server exactly as app/ is to (settings applied to the store config
before the store is built, `attach()` before the store starts) and adds GET /v1/ha with the
node's status. Once `python -m app serve` takes --role itself, cluster.NODE_COMMAND switches to it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import uvicorn
from starlette.responses import JSONResponse

from app.cli import parser as app_parser
from app.cli import settings_from
from app.server import BrokerServer, create_app
from ha import add_cli_arguments, attach, from_args


def main(argv: list[str]) -> int:
    args, rest = app_parser().parse_known_args(argv)
    ha_parser = argparse.ArgumentParser(prog="node_main")
    add_cli_arguments(ha_parser)
    ha_args = ha_parser.parse_args(rest)
    settings = settings_from(args, os.environ)
    ha_settings = from_args(ha_args, os.environ)
    if ha_settings.advertised_http_address is None:
        ha_settings.advertised_http_address = f"http://{settings.host}:{settings.port}"
    ha_settings.apply_to(settings.store)
    logging.basicConfig(
        level="DEBUG" if settings.log_level == "trace" else settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    app = create_app(settings)
    node = attach(app.state.broker.store, ha_settings)

    @app.get("/v1/ha")
    async def ha_status() -> JSONResponse:
        return JSONResponse(node.status() if node is not None else {"role": "standalone"})

    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, loop="uvloop", http="httptools", lifespan="on", log_level="warning"
    )
    server = BrokerServer(config, app.state.broker)
    server.run()
    return 0 if server.started else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
