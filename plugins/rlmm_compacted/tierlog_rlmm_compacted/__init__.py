"""``tierlog-rlmm-compacted``: the compacted remote log metadata manager (KAFKA-20033).

Installing the distribution registers the RLMM as ``compacted`` (entry point group
``tierlog``), so a node selects it with ``remote.log.metadata.manager.class.name=compacted``;
the README lists its ``rlmm.config.`` keys and the design.
"""

from __future__ import annotations

from tierlog_rlmm_compacted._version import __version__

__all__ = ["__version__"]
