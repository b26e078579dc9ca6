"""Kafka's on-disk log format: record batches v2, indexes, checkpoints, segments, the local log."""
