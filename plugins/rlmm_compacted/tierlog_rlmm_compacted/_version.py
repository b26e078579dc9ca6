"""The version of the tierlog-rlmm-compacted distribution."""

__version__ = "0.1.0"
