"""Interoperability tests against a real Apache Kafka 4.3.1 broker (Kafka's own tiered storage).

The broker is ``kafka_broker`` (``tests/conftest.py``; one per pytest worker, session scope):
Kafka's ``LocalTieredStorage`` under ``kafka_broker.extra["tiered_storage"]`` and Kafka's
``TopicBasedRemoteLogMetadataManager`` on 5 partitions of ``__remote_log_metadata``; its log
directory is ``kafka_broker.directory / "data"``. ``kafka_factory`` starts private brokers (a test
that restarts one). Kafka's own tools (``DumpLogSegments``, the
console consumer with Kafka's formatters) run from the same jars. Nothing here is skipped for
want of a broker: a missing Java or Maven fails the fixture with the reason.
"""
