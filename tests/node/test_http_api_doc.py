"""``docs/http-api.md`` documents every endpoint ``tierlog.node.http_api`` serves, and no other.

The endpoints come from the API's own routing table (``http_api.endpoints``), not from a list
written here, so an endpoint added to the code without its section fails this test.
"""

from __future__ import annotations

import re
from pathlib import Path

from tierlog.node.http_api import endpoints

DOC = Path(__file__).resolve().parents[2] / "docs" / "http-api.md"
_SECTION = re.compile(r"^#{3,4} `(GET|HEAD|POST|PUT|PATCH|DELETE) (/\S*)`$", re.MULTILINE)
_SUMMARY_ROW = re.compile(r"^\| (GET|HEAD|POST|PUT|PATCH|DELETE) \| `(/\S*)` \|", re.MULTILINE)


def test_every_endpoint_of_the_code_has_a_section_in_the_doc() -> None:
    served = set(endpoints())
    documented = set(_SECTION.findall(DOC.read_text(encoding="utf-8")))
    missing = sorted(served - documented)
    assert not missing, f"endpoints with no '#### `METHOD /path`' section in {DOC}: {missing}"
    stale = sorted(documented - served)
    assert not stale, f"sections in {DOC} for endpoints the API does not serve: {stale}"


def test_the_summary_table_lists_every_endpoint_once() -> None:
    rows = _SUMMARY_ROW.findall(DOC.read_text(encoding="utf-8"))
    assert sorted(rows) == sorted(endpoints())


def test_the_doc_says_at_the_top_that_it_is_not_kafkas_protocol() -> None:
    opening = DOC.read_text(encoding="utf-8")[:600]
    assert "not Kafka's wire protocol" in opening
    assert "cannot connect" in opening


def test_endpoints_are_read_from_the_routing_table() -> None:
    served = endpoints()
    assert len(served) == len(set(served))
    assert ("GET", "/topics/{topic}/partitions/{partition}/records") in served
    assert ("PATCH", "/topics/{topic}/configs") in served
    assert all(path.startswith("/") and "(?P" not in path for _, path in served)
