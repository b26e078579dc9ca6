"""The version of the tierlog-rsm-gcs distribution."""

__version__ = "0.1.0"
