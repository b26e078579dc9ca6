"""Compaction of compacted topics, local and in remote storage.

Kafka's LogCleaner semantics, computed on one process or by a Spark job.
"""
