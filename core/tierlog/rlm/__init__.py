"""The RemoteLogManager (RLM): tiering a node's partitions to remote storage, Kafka's way.

What Kafka's ``RemoteLogManager`` does inside a broker, in modules with one job each:

- ``config``: the RLM's broker-level keys (``remote.log.*``, ``rsm.config.*``, ``rlmm.config.*``)
  with Kafka's names and defaults, read from a Java-properties file;
- ``lineage``: leader-epoch lineage checks and the offsets derived from remote metadata
  (``find_highest_remote_offset``, ``find_log_start_offset``);
- ``candidates``: which sealed segments the copy task may upload (LSO bound, copy lag);
- ``retention``: which remote segments the expiration task deletes (time, size, log start);
- ``quota``: KIP-956 copy and fetch byte-rate quotas;
- ``metrics``: Kafka's metric names, exported for Prometheus;
- ``index_cache``: the on-disk ``RemoteIndexCache`` of fetched offset/time/txn indexes;
- ``remote_read``: reads below the local log start, and ListOffsets over remote segments;
- ``manager``: leadership, the copy/expiration/follower tasks and their thread pools.
"""
