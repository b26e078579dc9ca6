"""The ``pytest11`` plugin: adds tierlog's command-line options and markers, nothing else.

The tests live in the suite classes; this only lets a run choose the plugin under test::

    pytest --tierlog-rsm local
    pytest --tierlog-rlmm my_package.rlmm:MyRLMM --tierlog-config dir=/tmp/x
"""

from __future__ import annotations

import pytest

from tierlog.conformance._base import CONFIG_OPTION, RLMM_OPTION, RSM_OPTION


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tierlog", "tierlog conformance suite")
    group.addoption(
        "--tierlog-rsm",
        dest=RSM_OPTION,
        metavar="NAME",
        default=None,
        help="RemoteStorageManager under test: a registered name or package.module:ClassName",
    )
    group.addoption(
        "--tierlog-rlmm",
        dest=RLMM_OPTION,
        metavar="NAME",
        default=None,
        help="RemoteLogMetadataManager under test: a registered name or package.module:ClassName",
    )
    group.addoption(
        "--tierlog-config",
        dest=CONFIG_OPTION,
        metavar="KEY=VALUE",
        action="append",
        default=None,
        help="configuration passed to the plugin's configure() (repeatable); without it the "
        "plugin's conformance_config() is used",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "tierlog_conformance: a test of tierlog's RSM/RLMM conformance suite"
    )
    config.addinivalue_line(
        "markers", "tierlog_large: a conformance test that moves hundreds of MiB"
    )
    config.addinivalue_line("markers", "slow: a long-running test")
