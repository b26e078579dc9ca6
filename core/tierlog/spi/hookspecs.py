"""The hooks tierlog plugins implement: one registration hook per contract.

A plugin is any module or object with functions marked ``@tierlog.hookimpl``, listed under the
``tierlog`` entry-point group of its distribution::

    [project.entry-points.tierlog]
    my_rsm = "my_package.plugin"

pluggy is only the discovery mechanism; the contracts themselves are the abstract classes
``RemoteStorageManager`` and ``RemoteLogMetadataManager``.
"""

from __future__ import annotations

from collections.abc import Callable

import pluggy

from tierlog.spi._rlmm import RemoteLogMetadataManager
from tierlog.spi._rsm import RemoteStorageManager

PROJECT_NAME = "tierlog"
ENTRY_POINT_GROUP = "tierlog"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

RegisterStorageManager = Callable[[str, type[RemoteStorageManager]], None]
RegisterMetadataManager = Callable[[str, type[RemoteLogMetadataManager]], None]


@hookspec
def tierlog_register_storage_managers(register: RegisterStorageManager) -> None:
    """Register RemoteStorageManager classes under the names users type.

    Call ``register(name, cls)`` once per class, for example ``register("s3", S3RemoteStorage)``.
    The name is what ``remote.log.storage.manager.class.name`` and ``tierlog conformance --rsm``
    accept; ``cls`` is constructed with no arguments and then configured. Names are unique across
    all installed plugins; a second registration of a taken name is reported as a conflict and
    ignored. Keep the hook cheap: import heavy client libraries inside the class, not here.
    """


@hookspec
def tierlog_register_metadata_managers(register: RegisterMetadataManager) -> None:
    """Register RemoteLogMetadataManager classes under the names users type.

    Call ``register(name, cls)`` once per class, for example
    ``register("topic", TopicBasedRemoteLogMetadataManager)``. The name is what
    ``remote.log.metadata.manager.class.name`` and ``tierlog conformance --rlmm`` accept. The same
    uniqueness rule as for storage managers applies.
    """
