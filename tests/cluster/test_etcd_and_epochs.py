"""The etcd client against a real etcd, the epoch file and its cut, and the cluster settings' checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cluster.epoch_file import Epoch, EpochFile, truncation_offset
from cluster.etcd_client import EtcdClient, EtcdUnavailable
from cluster.settings import ClusterSettings
from core import ConfigInvalid
from tests.cluster.etcd import EtcdServer
from tests.loopback import free_port


def test_put_range_transactions_and_leases_on_a_real_etcd(etcd: EtcdServer) -> None:
    client = EtcdClient([f"http://127.0.0.1:{free_port()}", etcd.url], 2_000)  # the first endpoint answers nothing
    try:
        client.put("/t/a", {"n": 1})
        client.put("/t/b", [1, 2])
        client.put("/u", "outside")
        assert [(kv.key, kv.value) for kv in client.prefix("/t/")] == [("/t/a", {"n": 1}), ("/t/b", [1, 2])]
        # A compare on absence: only the first of two candidates wins.
        lease = client.grant(5)
        first = client.put_if([("/t/leader", "create", 0)], [("/t/leader", {"who": 1}, lease)])
        assert first > 0 and client.put_if([("/t/leader", "create", 0)], [("/t/leader", {"who": 2}, 0)]) == 0
        leader = client.get("/t/leader")
        assert leader is not None and leader.value == {"who": 1} and leader.create_revision == first and leader.lease == lease
        assert client.keepalive(lease) == 5
        client.revoke(lease)
        assert client.get("/t/leader") is None, "the key went with its lease"
        assert client.keepalive(lease) == 0
        client.revoke(lease)  # a lease already gone is no error
    finally:
        client.close()


def test_no_endpoint_answering_is_etcd_unavailable() -> None:
    client = EtcdClient([f"http://127.0.0.1:{free_port()}"], 500)
    try:
        with pytest.raises(EtcdUnavailable):
            client.get("/x")
    finally:
        client.close()


def test_the_epoch_file_survives_a_reopen_and_names_the_cut(tmp_path: Path) -> None:
    epochs = EpochFile(str(tmp_path))
    assert epochs.last() is None
    epochs.append(1, 0)
    epochs.append(3, 5_000)
    epochs.append(2, 9_000)  # older than the last: ignored
    assert EpochFile(str(tmp_path)).entries == [Epoch(1, 0), Epoch(3, 5_000)]
    group = [Epoch(1, 0), Epoch(3, 5_000), Epoch(4, 7_000), Epoch(5, 8_000)]
    assert truncation_offset(Epoch(3, 5_000), group) == 7_000, "cut where the first newer epoch began"
    assert truncation_offset(Epoch(5, 8_000), group) is None
    assert truncation_offset(None, group) is None


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"broker_name": ""}, "needs --broker-name"),
        ({"broker_name": "a/b"}, "needs --broker-name"),
        ({"cluster_name": "x y"}, "cluster_name"),
        ({"cluster_etcd": "127.0.0.1:2379"}, "http:// or https://"),
        ({"lease_ttl_s": 2, "lease_renew_interval_ms": 900}, "below lease_ttl_s"),
        ({"lease_ttl_s": 1}, "lease_ttl_s"),
        ({"advertised_ha_address": "nope"}, "host:port"),
    ],
)
def test_cluster_settings_are_checked(values: dict[str, Any], message: str) -> None:
    settings = ClusterSettings(**{"cluster_etcd": "http://127.0.0.1:2379", "broker_name": "b1", **values})
    with pytest.raises(ConfigInvalid, match=message):
        settings.validate()
    assert ClusterSettings().validate().enabled is False
