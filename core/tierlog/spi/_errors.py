"""The exceptions tierlog raises.

Kafka's four remote-storage exceptions keep their names and their hierarchy, because plugin
authors port code and docs from Kafka; everything else tierlog raises derives from
``TierlogError`` so a caller can catch the project's errors in one clause. Errors that are about a
bad argument also derive from ``ValueError`` (Kafka's ``IllegalArgumentException``), and errors
about the wrong lifecycle state from ``RuntimeError`` (``IllegalStateException``).
"""

from __future__ import annotations


class TierlogError(Exception):
    """Base class of every error tierlog raises on purpose."""


class RemoteStorageException(TierlogError):
    """A remote storage or remote metadata operation failed (Kafka's ``RemoteStorageException``)."""


class RetriableRemoteStorageException(RemoteStorageException):
    """A transient failure: the same call may succeed if retried."""


class RemoteResourceNotFoundException(RemoteStorageException):
    """The segment, index, partition or metadata asked for does not exist in remote storage."""


class RemoteStorageNotReadyException(RetriableRemoteStorageException):
    """The remote storage (or the metadata of a partition) is not ready to serve yet."""


class InvalidArgumentError(TierlogError, ValueError):
    """An argument breaks a documented precondition (Kafka's ``IllegalArgumentException``)."""


class IllegalStateError(TierlogError, RuntimeError):
    """The object is not in a state that allows the call (not configured, closed, not assigned)."""


class ConfigError(TierlogError, ValueError):
    """A configuration value is missing, malformed or unknown (Kafka's ``ConfigException``)."""


class PluginError(TierlogError):
    """A plugin could not be found, imported, registered or instantiated."""


class MetadataRecordError(TierlogError, ValueError):
    """A ``__remote_log_metadata`` record could not be decoded or encoded.

    The message names what was wrong: the frame version, the apiKey, the field that was cut
    short, or the number of trailing bytes.
    """


class CorruptRecordError(TierlogError):
    """Persisted bytes are corrupt: a record batch, an index, a checkpoint or a local log.

    The message names the file (when there is one) and the byte position, and what was wrong
    (bad CRC, bad magic, impossible length, truncation). ``path`` and ``position`` carry the same
    facts for programs.
    """

    def __init__(self, message: str, *, path: str | None = None, position: int | None = None):
        super().__init__(message)
        self.path = path
        self.position = position
