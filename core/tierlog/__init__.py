"""tierlog: Kafka tiered storage (KIP-405) in Python.

Plugin authors need ``tierlog.hookimpl`` and the contracts in ``tierlog.spi``.
"""

from tierlog._version import __version__
from tierlog.spi.hookspecs import hookimpl

__all__ = ["__version__", "hookimpl"]
