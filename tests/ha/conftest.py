"""Fixtures: master and slave processes on free loopback ports over temporary stores, always killed at the end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ha.cluster import SMALL_BROKER, SMALL_STORE, FaultProxy, Node, Nodes


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Callable[..., Node]]:
    """make(name, role, ...) -> a started Node; `ha_port` and `master` pick the replication endpoints."""
    with Nodes() as nodes:

        def make(
            name: str,
            role: str,
            *,
            ha_port: int | None = None,
            master_ha: str | None = None,
            replication: str = "async",
            start: bool = True,
            extra_args: list[str] | None = None,
            extra_config: str = "",
            client_options: dict[str, Any] | None = None,
        ) -> Node:
            args = ["--role", role]
            if role == "master":
                args += ["--ha-port", str(ha_port or 0), "--replication", replication]  # 0: the node learns its port
            elif role == "slave":
                assert master_ha is not None
                args += ["--master-ha-address", master_ha]
            args += extra_args or []
            node = Node(tmp_path, name, args, SMALL_STORE + SMALL_BROKER + extra_config, client_options)
            return nodes.add(node, int(args[args.index("--ha-port") + 1]) if role == "master" else 0, start)

        yield make


@pytest.fixture
def proxies() -> Iterator[Callable[[int], FaultProxy]]:
    made: list[FaultProxy] = []

    def make(target_port: int) -> FaultProxy:
        proxy = FaultProxy(target_port)
        made.append(proxy)
        return proxy

    try:
        yield make
    finally:
        for proxy in made:
            proxy.close()
