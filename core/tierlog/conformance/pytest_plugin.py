"""The ``pytest11`` plugin: tierlog's command-line options and markers, and the suite guard.

The tests live in the suite classes; this lets a run choose the plugin under test::

    pytest --tierlog-rsm local
    pytest --tierlog-rlmm my_package.rlmm:MyRLMM --tierlog-config dir=/tmp/x

and refuses to collect a suite subclass whose standard tests do not resolve to the suite's own
(``shadowed_standard_tests``): the class statement already refuses that, but a test can still be
replaced afterwards (``TestMine.test_x = ...``), and what counts is the class pytest collects.
"""

from __future__ import annotations

from typing import Any

import pytest

from tierlog.conformance._base import (
    CONFIG_OPTION,
    RLMM_OPTION,
    RSM_OPTION,
    SuiteBase,
    shadowed_standard_tests,
)


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
        help="configuration passed to the plugin's configure() (repeatable), on top of the "
        "plugin's conformance_config() (or the test class's `config`)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "tierlog_conformance: a test of tierlog's RSM/RLMM conformance suite"
    )
    config.addinivalue_line(
        "markers", "tierlog_large: a conformance test that moves hundreds of MiB"
    )
    config.addinivalue_line("markers", "slow: a long-running test")


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: Any) -> None:
    """Fail the collection of a module holding a suite subclass with a shadowed standard test.

    Returns ``None`` so that pytest's own implementation still builds the item.
    """
    if isinstance(obj, type) and issubclass(obj, SuiteBase):
        problems = shadowed_standard_tests(obj)
        if problems:
            raise collector.CollectError("\n".join(problems))
