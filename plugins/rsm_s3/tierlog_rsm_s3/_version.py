"""The version of the tierlog-rsm-s3 distribution."""

__version__ = "0.1.0"
