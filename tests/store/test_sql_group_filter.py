"""A group's SQL92 filter is group state: in its settings record (what slaves and a recovering store
apply), in its snapshot rows and in subscriptionGroup.json, in a shape RocketMQ still reads; a bad
filter is refused before anything is recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core import ConfigInvalid
from store import FilterInvalid, SubscriptionGroup
from store.pop.subscription_group_manager import FILE_NAME, SubscriptionGroupManager


def test_the_filter_travels_in_the_record_the_snapshot_and_the_file(tmp_path: Path) -> None:
    groups = SubscriptionGroupManager(str(tmp_path))
    assert groups.put(SubscriptionGroup("eu", 5, False, filter_sql="region = 'eu' AND amount > 100.0"))
    assert groups.put(SubscriptionGroup("plain", 3))
    groups.persist()
    doc = json.loads((tmp_path / FILE_NAME).read_text())["subscriptionGroupTable"]
    assert doc["eu"]["expressionType"] == "SQL92" and doc["eu"]["expression"] == "region = 'eu' AND amount > 100.0"
    assert "expression" not in doc["plain"] and "expressionType" not in doc["plain"]  # as before for groups without one
    assert doc["eu"]["retryMaxTimes"] == 5 and doc["eu"]["groupName"] == "eu"  # RocketMQ's fields as they were

    reloaded = SubscriptionGroupManager(str(tmp_path))
    reloaded.load()
    assert reloaded.get("eu") == SubscriptionGroup("eu", 5, False, filter_sql="region = 'eu' AND amount > 100.0")
    assert reloaded.get("plain") == SubscriptionGroup("plain", 3)
    eu = reloaded.get("eu")
    assert eu is not None and eu.sql_filter is not None and eu.sql_filter.matches({"region": "eu", "amount": "150"})

    # What a slave applies: the put record and the snapshot rows.
    with groups._lock:
        rows = groups.rows_locked()
    slave = SubscriptionGroupManager(str(tmp_path / "slave"))
    with slave._lock:
        slave.apply_locked({"put": SubscriptionGroup("eu", 5, False, filter_sql="TAGS = 'x'").to_rocketmq()})
        assert slave.get("eu") == SubscriptionGroup("eu", 5, False, filter_sql="TAGS = 'x'")
        slave.restore_locked(rows)
    assert slave.get("eu") == reloaded.get("eu") and slave.get("plain") == reloaded.get("plain")


def test_a_bad_filter_is_refused_before_anything_is_recorded(tmp_path: Path) -> None:
    groups = SubscriptionGroupManager(str(tmp_path))
    groups.put(SubscriptionGroup("g", 4, False, filter_sql="a = 1"))
    with pytest.raises(FilterInvalid) as caught:
        groups.put(SubscriptionGroup("g", 9, True, filter_sql="a = = 1"))
    assert caught.value.position == 4
    assert groups.get("g") == SubscriptionGroup("g", 4, False, filter_sql="a = 1")


@pytest.mark.parametrize(
    "fields",
    [{"expressionType": "SQL92", "expression": "a = "}, {"expressionType": "TAG", "expression": "a"}, {"expressionType": "SQL92"},
     {"expression": "a = 1"}, {"expressionType": "SQL92", "expression": 5}],
)  # fmt: skip
def test_a_file_with_a_bad_filter_is_refused_at_load(tmp_path: Path, fields: dict[str, Any]) -> None:
    doc = {**SubscriptionGroup("g").to_rocketmq(), **fields}
    (tmp_path / FILE_NAME).write_text(json.dumps({"subscriptionGroupTable": {"g": doc}}))
    with pytest.raises(ConfigInvalid):
        SubscriptionGroupManager(str(tmp_path)).load()
