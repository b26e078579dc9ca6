"""The version of the tierlog-rsm-azure distribution."""

__version__ = "0.1.0"
