"""The version of the tierlog-rlmm-topic distribution."""

__version__ = "0.1.0"
