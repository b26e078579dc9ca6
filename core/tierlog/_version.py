"""The version of the tierlog core distribution."""

__version__ = "0.1.0"
