"""The compaction summary in the RSM contract's model: ``IndexType.COMPACTION_SUMMARY`` and
``LogSegmentData.compaction_summary`` (a tierlog extension, optional, keyword-compatible)."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest

from tierlog.spi import IndexType, InvalidArgumentError, LogSegmentData


def data(**changes: object) -> LogSegmentData:
    fields: dict[str, object] = {
        "log_segment": Path("00000000000000000000.log"),
        "offset_index": Path("00000000000000000000.index"),
        "time_index": Path("00000000000000000000.timeindex"),
        "transaction_index": None,
        "producer_snapshot_index": Path("00000000000000000000.snapshot"),
        "leader_epoch_index": b"0\n1\n0 0\n",
    }
    fields.update(changes)
    return LogSegmentData(**fields)  # type: ignore[arg-type]


def test_kafka_index_types_keep_their_values_and_the_summary_is_last() -> None:
    """Kafka's five keep their names and values; the extension is added after them (the
    object-store RSM orders indexes the same way, and ordinals must not move)."""
    assert [t.value for t in IndexType] == [
        "offset",
        "timestamp",
        "producer_snapshot",
        "transaction",
        "leader_epoch",
        "compaction_summary",
    ]
    assert str(IndexType.COMPACTION_SUMMARY) == "COMPACTION_SUMMARY"
    assert "Kafka" in (IndexType.__doc__ or "") and "extension" in (IndexType.__doc__ or "")


def test_existing_constructor_calls_still_work_and_mean_no_summary() -> None:
    positional = LogSegmentData(
        Path("a.log"), Path("a.index"), Path("a.timeindex"), None, Path("a.snapshot"), b"0\n0\n"
    )
    assert positional.compaction_summary is None
    assert data().compaction_summary is None


@pytest.mark.parametrize(
    "given", [b"TLCS\x01", bytearray(b"TLCS\x01"), memoryview(b"TLCS\x01")], ids=type
)
def test_a_summary_is_kept_as_bytes(given: bytes | bytearray | memoryview) -> None:
    """Like ``leader_epoch_index``: any bytes-like value, frozen as ``bytes`` so a caller that
    reuses its buffer cannot change what a copy stores."""
    made = data(compaction_summary=given)
    assert made.compaction_summary == b"TLCS\x01"
    assert type(made.compaction_summary) is bytes
    if isinstance(given, bytearray):
        given[0] = 0
        assert made.compaction_summary == b"TLCS\x01"


def test_an_empty_summary_is_not_none() -> None:
    assert data(compaction_summary=b"").compaction_summary == b""


@pytest.mark.parametrize("bad", ["TLCS", 7, [1, 2], Path("summary")], ids=repr)
def test_a_summary_that_is_not_bytes_is_refused_by_name(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match=r"LogSegmentData\.compaction_summary"):
        data(compaction_summary=bad)


def test_the_summary_stays_out_of_repr_and_survives_replace_and_pickle() -> None:
    made = data(compaction_summary=b"\x00" * 4096)
    assert "compaction_summary" not in repr(made)
    assert dataclasses.replace(made, compaction_summary=None).compaction_summary is None
    assert dataclasses.replace(made, time_index=Path("b")).compaction_summary == b"\x00" * 4096
    assert pickle.loads(pickle.dumps(made)) == made
