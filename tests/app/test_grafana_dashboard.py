"""examples/grafana-dashboard.json stays true to /metrics: every series it queries is in a real scrape.

The scrape comes from a broker that served produce, pull, receive, ack and an offset commit, so
every family the dashboard uses has samples; with promtool installed, every expression is also
parsed by Prometheus's own PromQL parser (as a recording rule of a rules file).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.app.conftest import ROOT, MakeBroker
from tests.app.scrape import samples, serve_hot_routes

pytestmark = pytest.mark.timeout(90)
DASHBOARD = ROOT / "examples" / "grafana-dashboard.json"
NAME = re.compile(r"\b(tidemq_[a-zA-Z0-9_]+)\b")
# Grafana's variables, replaced by what they stand for so Prometheus can parse the expressions.
VARIABLES = {"$__rate_interval": "1m", "$instance": ".*", "$topic": ".*", "$group": ".*"}


def dashboard() -> dict[str, Any]:
    dash: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dash


def panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dash["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def expressions(dash: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in panels(dash) for t in p.get("targets", [])]
    for variable in dash["templating"]["list"]:
        if variable["type"] == "query":
            exprs.append(re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", variable["definition"]))
    return exprs


def test_every_panel_is_labelled_and_queries_prometheus() -> None:
    dash = dashboard()
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids))
    for panel in panels(dash):
        assert panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["description"] and panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
        if panel["type"] == "timeseries":
            assert panel["options"]["legend"]["showLegend"], panel["title"]
            assert all(t["legendFormat"] for t in panel["targets"]), panel["title"]


def test_every_series_the_dashboard_queries_is_exported(make_broker: MakeBroker) -> None:
    client = make_broker().client
    assert client is not None
    topic, group = "t-" + uuid.uuid4().hex[:8], "g-" + uuid.uuid4().hex[:8]
    serve_hot_routes(client, topic, group)
    assert client.put(f"/v1/groups/{group}-pull/offsets", json={"topic": topic, "queue_id": 0, "offset": 1}).status_code == 200
    # One problem reply, so the problem counter has a sample whether or not a readiness poll saw a 503.
    assert client.get("/v1/topics/bad%20name/queues/0/messages", params={"offset": 0}).status_code == 400
    exported = set(samples(client.get("/metrics").text))
    used = {name for expr in expressions(dashboard()) for name in NAME.findall(expr)}
    assert len(used) > 20
    assert sorted(used - exported) == []


def test_every_expression_parses_as_promql(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    rules = []
    for i, expr in enumerate(expressions(dashboard())):
        for variable, value in VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, expr  # a variable the test does not know
        rules.append({"record": f"dashboard:expr_{i}", "expr": expr})
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))  # JSON is YAML
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
