"""Two exception trees, each exception saying when it is raised: every exception the broker's packages
define derives from TidemqError, every one the client (tidemq/) defines from TidemqClientError (the
client imports nothing of the broker, so it has a root of its own)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import app
import cluster
import ha
import pipeline
import store
import tidemq
from core import TidemqError
from tidemq.errors import TidemqClientError

# Exceptions outside the tree, each with its reason.
OUTSIDE = {
    # Starlette's own exception, which its middleware turns into a response (app.server maps it).
    "app.body_limit.BodyTooLarge",
    "app.body_limit.BodyTimeout",
    # json.loads' object_pairs_hook may raise only ValueError for the parser to report it.
    "app.strict_json.DuplicateName",
    # Control flow inside one function of the forwarder, never seen outside it.
    "cluster.forwarding._StreamCut",
}


def defined_exceptions(packages: tuple[ModuleType, ...] = (app, cluster, ha, pipeline, store)) -> list[type[BaseException]]:
    found = []
    for package in packages:
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.startswith("pipeline.jobs") or info.name.endswith(".__main__"):
                continue  # Spark job scripts and entry points: importing them runs them
            module = importlib.import_module(info.name)
            for _, obj in inspect.getmembers(module, inspect.isclass):
                if issubclass(obj, BaseException) and obj.__module__ == info.name:
                    found.append(obj)
    return found


def test_every_exception_is_in_the_tree_and_says_when_it_is_raised() -> None:
    exceptions = defined_exceptions()
    assert len(exceptions) > 20
    for exc in exceptions:
        name = f"{exc.__module__}.{exc.__qualname__}"
        if name in OUTSIDE:
            continue
        assert issubclass(exc, TidemqError), f"{name} is outside the TidemqError tree"
        assert (exc.__doc__ or "").startswith("Raised "), f"{name}'s docstring does not say when it is raised"


def test_every_client_exception_is_under_the_client_root_and_says_when_it_is_raised() -> None:
    exceptions = defined_exceptions((tidemq,))
    names = {f"{exc.__module__}.{exc.__qualname__}" for exc in exceptions}
    # The walk found the client's own errors, those outside errors.py included.
    assert {"tidemq.batch_codec.BatchFormatError", "tidemq.http_wire.WireError", "tidemq.cli_output.UsageError"} <= names
    for exc in exceptions:
        name = f"{exc.__module__}.{exc.__qualname__}"
        assert issubclass(exc, TidemqClientError), f"{name} is outside the TidemqClientError tree"
        assert (exc.__doc__ or "").startswith("Raised "), f"{name}'s docstring does not say when it is raised"
