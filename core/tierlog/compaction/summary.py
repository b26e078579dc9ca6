"""A remote segment's compaction summary: a Bloom filter of its keys and what could change.

Every round of Kafka's cleaner rewrites the whole log, including the clean section. For a log
that lives in remote storage that would mean downloading every segment at every round. The KIP
(tiered storage for compacted topics) keeps a Bloom filter per remote segment so that segments
whose keys cannot meet the dirty keys are not downloaded; tierlog adds what a Bloom filter alone
does not say, so that skipping a segment changes nothing Kafka's rules would have changed:

- a segment holding transactional or control batches, empty batch headers (kept for a producer
  that may since have written again), keyless records, or tombstones not yet stamped with a
  delete horizon, or whose earliest delete horizon has passed, is *changeable*: it is rewritten
  whatever its keys;
- any other segment is rewritten only if some dirty key may be in it (the filter says so).

**Sizing.** A filter gets ``m = max(bits for the false-positive rate, size_ratio * segment bytes
* 8)`` bits (``bloom_shape``): ``remote.log.compaction.bloom.filter.fpp`` (default 1%) is an upper
bound of the per-key false-positive rate, and ``remote.log.compaction.bloom.filter.size.ratio``
(default 1%, the KIP's "~1-2% of segment size") a storage budget the filter may always use. A
filter sized for the rate alone takes ~1.2 bytes a key, far below that budget for records of a few
hundred bytes, and a round's false positives grow with its dirty keys (``1 - (1 - p)^keys`` of
the clean segments): at 1% and 10 dirty keys about 10% of the clean segments are downloaded for
nothing, the whole of the issue's budget. The floor spends the budget on a lower rate instead.
``k`` is the optimum for the resulting bits per key, ``round(m / n * ln 2)``, between 1 and
``MAX_HASHES``; a ratio of 0 sizes by the rate alone.

The summary is written by the cleaner for each segment it uploads (``SummaryBuilder`` observes the
kept batches) and stored next to the segment through the RSM contract
(``IndexType.COMPACTION_SUMMARY``), so every backend keeps it. A segment copied from the local
log has none until it is first cleaned: it is downloaded then.

Format (version 1, big-endian): magic ``b"TLCS"``, int8 version, int8 flags, int64 record
count, int64 key count, int64 first batch timestamp (-1 if none), int64 largest timestamp,
int64 earliest delete horizon (-1 if none), int32 hash count k, int64 bit count m, then
``ceil(m / 8)`` bytes of filter bits. Key positions are Kirsch-Mitzenmacher double hashing of the
key's MD5 digest (the offset map's identity of a key): ``h1 + i * h2 mod m`` with ``h1``, ``h2``
the digest's two little-endian 64-bit halves (``h2`` forced odd).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from tierlog.log.batch import RecordBatch
from tierlog.log.record import Record
from tierlog.spi import CorruptRecordError, InvalidArgumentError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "DEFAULT_FALSE_POSITIVE_RATE",
    "DEFAULT_SIZE_RATIO",
    "MAX_HASHES",
    "BloomFilter",
    "SegmentSummary",
    "SummaryBuilder",
    "bloom_shape",
]

DEFAULT_FALSE_POSITIVE_RATE: Final = 0.01
DEFAULT_SIZE_RATIO: Final = 0.01
"""The filter's floor as a share of its segment's bytes (the KIP's overhead budget)."""
MAX_HASHES: Final = 30
"""The most positions a key gets: past ~30 bits a key the rate is already below 1e-9, and each
position costs every lookup a pass over the dirty keys."""
MIN_BITS: Final = 64
MAGIC: Final = b"TLCS"
VERSION: Final = 1
_HEAD: Final = struct.Struct(">4sbbqqqqqiq")
_TXN: Final = 0x01
_EMPTY: Final = 0x02
_KEYLESS: Final = 0x04
_UNSTAMPED: Final = 0x08


def _digest_halves(digests: Sequence[bytes]) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    import numpy as np

    if not digests:
        empty = np.zeros(0, dtype=np.uint64)
        return empty, empty
    raw = np.frombuffer(b"".join(digests), dtype="<u8").reshape(-1, 2)
    return raw[:, 0].astype(np.uint64), raw[:, 1].astype(np.uint64) | np.uint64(1)


def bloom_shape(
    keys: int, false_positive_rate: float, segment_bytes: int = 0, size_ratio: float = 0.0
) -> tuple[int, int]:
    """``(m, k)`` of the filter of ``keys`` distinct keys of a ``segment_bytes`` segment: the
    bits the rate needs (``-n ln p / ln(2)^2``, at least ``MIN_BITS``) or ``size_ratio`` of the
    segment's bits, whichever is more; ``k`` optimal for those bits a key, in [1, ``MAX_HASHES``].

    More bits than the rate needs only lower the rate, so ``false_positive_rate`` stays an upper
    bound whatever the floor adds (see the module docstring)."""
    if not 0 < false_positive_rate < 1:
        raise InvalidArgumentError(
            f"Bloom filter false-positive rate must be in (0, 1), got {false_positive_rate}"
        )
    if not 0 <= size_ratio < 1:
        raise InvalidArgumentError(f"Bloom filter size ratio must be in [0, 1), got {size_ratio}")
    if keys < 0 or segment_bytes < 0:
        raise InvalidArgumentError(
            f"Bloom filter of {keys} keys in {segment_bytes} bytes: both must be >= 0"
        )
    n = max(keys, 1)
    needed = math.ceil(-n * math.log(false_positive_rate) / (math.log(2) ** 2))
    floor = math.ceil(size_ratio * segment_bytes * 8)
    m = max(MIN_BITS, needed, floor)
    k = min(MAX_HASHES, max(1, round(m / n * math.log(2))))
    return m, k


@dataclass(frozen=True, slots=True)
class BloomFilter:
    """A Bloom filter of key digests (``m`` bits, ``k`` positions per key)."""

    bits: bytes
    m: int
    k: int

    @classmethod
    def of(
        cls,
        digests: Sequence[bytes],
        false_positive_rate: float,
        *,
        segment_bytes: int = 0,
        size_ratio: float = 0.0,
    ) -> BloomFilter:
        """A filter of ``digests``' distinct keys shaped by ``bloom_shape`` (the rate alone
        unless a ``size_ratio`` of ``segment_bytes`` is given)."""
        import numpy as np

        unique = list(set(digests))
        m, k = bloom_shape(len(unique), false_positive_rate, segment_bytes, size_ratio)
        bits = np.zeros((m + 7) // 8, dtype=np.uint8)
        h1, h2 = _digest_halves(unique)
        mm = np.uint64(m)
        with np.errstate(over="ignore"):
            for i in range(k):
                pos = (h1 + np.uint64(i) * h2) % mm
                np.bitwise_or.at(
                    bits,
                    (pos >> np.uint64(3)).astype(np.int64),
                    (np.uint8(1) << (pos & np.uint64(7)).astype(np.uint8)),
                )
        return cls(bits.tobytes(), m, k)

    def might_contain(self, digests: Sequence[bytes]) -> NDArray[np.bool_]:
        """For each digest, False when its key is certainly not in the segment."""
        import numpy as np

        h1, h2 = _digest_halves(digests)
        bits = np.frombuffer(self.bits, dtype=np.uint8)
        found = np.ones(len(h1), dtype=bool)
        mm = np.uint64(self.m)
        with np.errstate(over="ignore"):
            for i in range(self.k):
                pos = (h1 + np.uint64(i) * h2) % mm
                byte = bits[(pos >> np.uint64(3)).astype(np.int64)]
                found &= (byte >> (pos & np.uint64(7)).astype(np.uint8)) & np.uint8(1) == 1
        return found

    def might_contain_any(self, digests: Sequence[bytes]) -> bool:
        return bool(self.might_contain(digests).any()) if digests else False


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """See the module docstring."""

    record_count: int
    key_count: int
    first_batch_timestamp: int | None
    largest_timestamp: int
    earliest_horizon: int | None
    has_transactional: bool
    has_empty_batches: bool
    has_keyless: bool
    has_unstamped_tombstones: bool
    bloom: BloomFilter

    def changeable(self, now_ms: int) -> bool:
        """True when a round may change the segment whatever the dirty keys are."""
        return (
            self.has_transactional
            or self.has_empty_batches
            or self.has_keyless
            or self.has_unstamped_tombstones
            or (self.earliest_horizon is not None and self.earliest_horizon <= now_ms)
        )

    def encode(self) -> bytes:
        flags = (
            (_TXN if self.has_transactional else 0)
            | (_EMPTY if self.has_empty_batches else 0)
            | (_KEYLESS if self.has_keyless else 0)
            | (_UNSTAMPED if self.has_unstamped_tombstones else 0)
        )
        head = _HEAD.pack(
            MAGIC,
            VERSION,
            flags,
            self.record_count,
            self.key_count,
            -1 if self.first_batch_timestamp is None else self.first_batch_timestamp,
            self.largest_timestamp,
            -1 if self.earliest_horizon is None else self.earliest_horizon,
            self.bloom.k,
            self.bloom.m,
        )
        return head + self.bloom.bits

    @classmethod
    def decode(cls, data: bytes) -> SegmentSummary:
        if len(data) < _HEAD.size:
            raise CorruptRecordError(f"compaction summary of {len(data)} bytes is too short")
        magic, version, flags, records, keys, first, largest, horizon, k, m = _HEAD.unpack_from(
            data
        )
        if magic != MAGIC or version != VERSION:
            raise CorruptRecordError(
                f"not a version-{VERSION} compaction summary (magic {magic!r}, version {version})"
            )
        bits = bytes(data[_HEAD.size :])
        if k < 1 or m < 1 or len(bits) != (m + 7) // 8:
            raise CorruptRecordError(
                f"compaction summary filter of {len(bits)} bytes does not hold {m} bits (k={k})"
            )
        return cls(
            record_count=records,
            key_count=keys,
            first_batch_timestamp=None if first < 0 else first,
            largest_timestamp=largest,
            earliest_horizon=None if horizon < 0 else horizon,
            has_transactional=bool(flags & _TXN),
            has_empty_batches=bool(flags & _EMPTY),
            has_keyless=bool(flags & _KEYLESS),
            has_unstamped_tombstones=bool(flags & _UNSTAMPED),
            bloom=BloomFilter(bits, m, k),
        )


@dataclass(slots=True)
class SummaryBuilder:
    """Collects a segment's summary from its batches as they are written."""

    false_positive_rate: float = DEFAULT_FALSE_POSITIVE_RATE
    size_ratio: float = DEFAULT_SIZE_RATIO
    digests: list[bytes] = field(default_factory=list)
    segment_bytes: int = 0
    """Bytes of the batches written so far (the segment the filter's floor is a share of)."""
    record_count: int = 0
    first_batch_timestamp: int | None = None
    largest_timestamp: int = -1
    earliest_horizon: int | None = None
    has_transactional: bool = False
    has_empty_batches: bool = False
    has_keyless: bool = False
    has_unstamped_tombstones: bool = False

    def observe(
        self, header: RecordBatch, records: Iterable[Record], digests: Iterable[bytes]
    ) -> None:
        """One written batch, its records and the digests of their keys."""
        self.segment_bytes += header.size_in_bytes
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = header.max_timestamp
        self.largest_timestamp = max(self.largest_timestamp, header.max_timestamp)
        if header.is_transactional or header.is_control:
            self.has_transactional = True
        if header.records_count == 0:
            self.has_empty_batches = True
        horizon = header.delete_horizon_ms
        if horizon is not None:
            self.earliest_horizon = (
                horizon if self.earliest_horizon is None else min(self.earliest_horizon, horizon)
            )
        if not header.is_control:
            for record in records:
                self.record_count += 1
                if record.key is None:
                    self.has_keyless = True
                elif record.value is None and horizon is None:
                    self.has_unstamped_tombstones = True
            self.digests.extend(digests)

    def build(self) -> SegmentSummary:
        return SegmentSummary(
            record_count=self.record_count,
            key_count=len(set(self.digests)),
            first_batch_timestamp=self.first_batch_timestamp,
            largest_timestamp=self.largest_timestamp,
            earliest_horizon=self.earliest_horizon,
            has_transactional=self.has_transactional,
            has_empty_batches=self.has_empty_batches,
            has_keyless=self.has_keyless,
            has_unstamped_tombstones=self.has_unstamped_tombstones,
            bloom=BloomFilter.of(
                self.digests,
                self.false_positive_rate,
                segment_bytes=self.segment_bytes,
                size_ratio=self.size_ratio,
            ),
        )
