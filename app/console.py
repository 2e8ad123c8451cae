"""The web console at /console and Swagger UI at /docs, both served from installed package files.

Invariants:
- The console is static files of this package (`app/console_static`, package data), found through
  the package, not the source tree, so a wheel install serves them; it reads everything through
  the HTTP API in the browser, with the caller's bearer token when an ACL is on.
- Swagger UI's JavaScript and CSS come from the installed `swagger_ui` package (swagger-ui-py,
  which ships Swagger UI 5, the first to read OpenAPI 3.1): no page of the broker loads anything
  from another host.
- The console page and its assets hold no data, so the access gate lets them through without a
  token (app/access_rules.py); the API calls they make are checked as any other.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.util import find_spec
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.staticfiles import StaticFiles

CONSOLE_PATH = "/console"
DOCS_PATH = "/docs"
DOCS_ASSETS_PATH = "/docs/assets"
# The console loads scripts, styles and data only from the broker itself.
CONSOLE_CSP = "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"


def console_dir() -> Path:
    """The console's files, located through the installed `app` package."""
    return Path(str(files("app") / "console_static"))


def swagger_ui_dir() -> Path:
    """Swagger UI's files, from the installed swagger_ui package (located, not imported: its web-framework glue is not needed)."""
    spec = find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the swagger-ui-py package is not installed (a dependency of tidemq)")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def install(app: FastAPI) -> None:
    """Add /console (page and assets) and /docs (Swagger UI with local assets) to the app."""
    console = console_dir()

    @app.get(CONSOLE_PATH, include_in_schema=False)
    @app.get(CONSOLE_PATH + "/", include_in_schema=False)
    async def console_page() -> Response:
        return FileResponse(console / "index.html", headers={"Content-Security-Policy": CONSOLE_CSP, "Cache-Control": "no-cache"})

    @app.get(DOCS_PATH, include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title="tidemq API",
            swagger_js_url=f"{DOCS_ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS_PATH}/favicon-32x32.png",
        )

    app.mount(CONSOLE_PATH, StaticFiles(directory=console), name="console")
    app.mount(DOCS_ASSETS_PATH, StaticFiles(directory=swagger_ui_dir()), name="swagger-ui")
