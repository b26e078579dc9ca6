"""``tierlog quickstart --rlmm topic`` and ``tierlog serve --rlmm topic --bootstrap-servers``
against a real Apache Kafka broker: the node's metadata goes to a Kafka topic through the
``rlmm_topic`` plugin, and every record the quickstart wrote is read back through it."""

from __future__ import annotations

import io
import signal
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from services._common import Service
from test_serve import Served, write_config

from tierlog.cli._quickstart import MetadataChoice, run_quickstart
from tierlog.cli._serve import shorthand_overrides
from tierlog.properties import load_properties
from tierlog.spi import InvalidArgumentError

BOOTSTRAP_KEY = "rlmm.config.remote.log.metadata.common.client.bootstrap.servers"


def test_shorthands_name_the_rlmm_and_its_cluster_under_the_configured_prefix() -> None:
    assert shorthand_overrides({}, "topic", "h:1") == {
        "remote.log.metadata.manager.class.name": "topic",
        BOOTSTRAP_KEY: "h:1",
    }
    custom = {"remote.log.metadata.manager.impl.prefix": "meta."}
    assert shorthand_overrides(custom, None, "h:1") == {
        "meta.remote.log.metadata.common.client.bootstrap.servers": "h:1"
    }
    assert shorthand_overrides({}, None, None) == {}


def test_quickstart_metadata_choice_is_checked_up_front() -> None:
    with pytest.raises(InvalidArgumentError, match="--bootstrap-servers"):
        MetadataChoice("topic")
    with pytest.raises(InvalidArgumentError, match="apply to --rlmm topic only"):
        MetadataChoice("embedded", "h:1")
    with pytest.raises(InvalidArgumentError, match="embedded or topic"):
        MetadataChoice("zookeeper", "h:1")
    props = MetadataChoice(
        "topic", "h:1", (("remote.log.metadata.topic.replication.factor", "3"),)
    ).props()
    assert props["remote.log.metadata.manager.class.name"] == "topic"
    assert props[BOOTSTRAP_KEY] == "h:1"
    # A user's value wins over the quickstart's single-broker default.
    assert props["rlmm.config.remote.log.metadata.topic.replication.factor"] == "3"
    assert props["rlmm.config.remote.log.metadata.topic.min.isr"] == 1


def _topics(bootstrap: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return set(admin.list_topics(timeout=30).topics)


@pytest.mark.slow
def test_quickstart_on_the_topic_rlmm_reads_every_record_back(
    tmp_path: Path, kafka_broker: Service
) -> None:
    name = f"__tierlog_qs_{uuid.uuid4().hex[:8]}"
    err = io.StringIO()
    result = run_quickstart(
        tmp_path / "qs",
        size_mib=8,
        err=err,
        metadata=MetadataChoice(
            "topic",
            kafka_broker.url,
            (
                ("remote.log.metadata.topic.name", name),
                ("remote.log.metadata.topic.num.partitions", "3"),
            ),
        ),
    )
    assert result.problems == [], err.getvalue()
    assert result.ok and result.exit_code == 0
    assert f"topic RLMM on the Kafka cluster at {kafka_broker.url}" in result.config_text
    props = load_properties(result.config_path)
    assert props[BOOTSTRAP_KEY] == kafka_broker.url
    assert props["remote.log.metadata.manager.class.name"] == "topic"
    assert name in _topics(kafka_broker.url)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_serve_shorthands_put_the_metadata_on_the_kafka_cluster(
    tmp_path: Path, kafka_broker: Service
) -> None:
    name = f"__tierlog_serve_{uuid.uuid4().hex[:8]}"
    config = write_config(
        tmp_path,
        **{
            "rlmm.config.remote.log.metadata.topic.name": name,
            "rlmm.config.remote.log.metadata.topic.num.partitions": "2",
            "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
            "rlmm.config.remote.log.metadata.topic.min.isr": "1",
        },
    )
    served = Served(
        tmp_path, config, "serve", "--rlmm", "topic", "--bootstrap-servers", kafka_broker.url
    )
    try:
        # The topic RLMM creates its metadata topic when it starts: the flags reached it.
        assert name in _topics(kafka_broker.url)
    finally:
        assert served.stop(signal.SIGTERM) == 0, served.stderr()
