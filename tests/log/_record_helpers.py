"""Independent references for the record-batch tests: a bitwise CRC-32C and record strategies.

The CRC here is the textbook reflected algorithm (polynomial 0x82F63B78), deliberately not the
``crc32c`` package tierlog uses, so a layout test checks tierlog against something else.
"""

from __future__ import annotations

from hypothesis import strategies as st

from tierlog.log.record import NO_TIMESTAMP, Record


def _table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _table()


def reference_crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = (crc >> 8) ^ _TABLE[(crc ^ b) & 0xFF]
    return crc ^ 0xFFFFFFFF


nullable_bytes = st.one_of(st.none(), st.binary(max_size=64), st.just(b""))
headers = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16))), max_size=3
).map(tuple)


@st.composite
def record_lists(draw: st.DrawFn, *, min_size: int = 1, max_size: int = 12) -> list[Record]:
    """Records with increasing offsets (gaps allowed) and timestamps >= 0 or NO_TIMESTAMP."""
    base_offset = draw(st.integers(0, 1 << 40))
    base_ts = draw(st.one_of(st.just(NO_TIMESTAMP), st.integers(0, 1 << 41)))
    n = draw(st.integers(min_size, max_size))
    offset = base_offset
    out = []
    for i in range(n):
        if i:
            offset += draw(st.one_of(st.just(1), st.integers(1, 70_000)))
        ts = draw(st.one_of(st.just(base_ts), st.integers(0, 1 << 41), st.just(NO_TIMESTAMP)))
        out.append(Record(offset, ts, draw(nullable_bytes), draw(nullable_bytes), draw(headers)))
    return out


def content(records: list[Record]) -> list[tuple[object, ...]]:
    """What a record means, without the deltas a freshly built record does not carry."""
    return [tuple(r[:5]) for r in records]
