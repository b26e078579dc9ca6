"""tierlog: Kafka tiered storage (KIP-405) in Python.

Plugin authors need ``tierlog.hookimpl`` and the contracts in ``tierlog.spi``. Operators and
applications use ``tierlog.Node`` (a node that owns partitions and tiers them) and
``tierlog.NodeConfig``; both are imported on first use, so ``import tierlog`` stays light for a
plugin that only needs the contracts.
"""

from typing import TYPE_CHECKING, Any

from tierlog._version import __version__
from tierlog.spi.hookspecs import hookimpl

if TYPE_CHECKING:
    from tierlog.node import Node, NodeConfig

__all__ = ["Node", "NodeConfig", "__version__", "hookimpl"]


def __getattr__(name: str) -> Any:
    if name in ("Node", "NodeConfig"):
        import tierlog.node

        return getattr(tierlog.node, name)
    raise AttributeError(f"module 'tierlog' has no attribute {name!r}")
