"""Codecs with Kafka's framing: gzip, xerial snappy, LZ4 frames, zstd; limits and errors."""

from __future__ import annotations

import gzip
import os
import struct
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.log import compression
from tierlog.log.compression import (
    XERIAL_HEADER,
    CompressionType,
    UnsupportedCodecError,
    codec_available,
    compress,
    decompress,
)
from tierlog.spi import CorruptRecordError, InvalidArgumentError

CODECS = list(CompressionType)
COMPRESSED = [c for c in CompressionType if c != CompressionType.NONE]
TEXT = b"".join(b"record %d of a compressible block\n" % i for i in range(5000))


@pytest.mark.parametrize("codec", CODECS)
@given(data=st.binary(max_size=3000))
@settings(max_examples=25, deadline=None)
def test_round_trip(codec: CompressionType, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", COMPRESSED)
def test_round_trip_across_blocks(codec: CompressionType) -> None:
    data = TEXT + os.urandom(200_000)  # several 32/64 KiB blocks, compressible and not
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(bytearray(packed))) == data


def test_names() -> None:
    assert [c.kafka_name for c in CompressionType] == ["none", "gzip", "snappy", "lz4", "zstd"]
    assert CompressionType.from_name(" ZSTD") == CompressionType.ZSTD
    with pytest.raises(InvalidArgumentError, match="brotli"):
        CompressionType.from_name("brotli")
    assert all(codec_available(c) for c in CompressionType)


def test_gzip_is_a_standard_stream_and_members_concatenate() -> None:
    packed = compress(CompressionType.GZIP, TEXT)
    assert packed[:3] == b"\x1f\x8b\x08"
    assert gzip.decompress(packed) == TEXT
    two = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decompress(CompressionType.GZIP, two) == b"first second"
    # GZIPInputStream ignores trailing bytes that do not start another member.
    assert decompress(CompressionType.GZIP, gzip.compress(b"x") + b"junk") == b"x"


def test_snappy_uses_xerial_framing() -> None:
    import cramjam

    packed = compress(CompressionType.SNAPPY, TEXT)
    assert packed[:16] == bytes.fromhex("82534e41505059000000000100000001") == XERIAL_HEADER
    (first,) = struct.unpack_from(">i", packed, 16)
    chunk = bytes(cramjam.snappy.decompress_raw(packed[20 : 20 + first]))
    assert chunk == TEXT[: 32 * 1024]


def test_snappy_reads_raw_blocks_and_concatenated_streams() -> None:
    import cramjam

    raw = bytes(cramjam.snappy.compress_raw(TEXT))
    assert decompress(CompressionType.SNAPPY, raw) == TEXT
    tiny = bytes(cramjam.snappy.compress_raw(b"abc"))  # shorter than the xerial header
    assert decompress(CompressionType.SNAPPY, tiny) == b"abc"
    both = compress(CompressionType.SNAPPY, b"one,") + compress(CompressionType.SNAPPY, b"two")
    assert decompress(CompressionType.SNAPPY, both) == b"one,two"
    # Like SnappyInputStream, fewer than 4 trailing bytes end the stream.
    tail = compress(CompressionType.SNAPPY, b"x") + b"\0\0"
    assert decompress(CompressionType.SNAPPY, tail) == b"x"


def test_lz4_writes_kafkas_frame_descriptor() -> None:
    packed = compress(CompressionType.LZ4, TEXT)
    # magic, FLG 0x60 (version 1, independent blocks, no checksums, no size), BD 0x40 (64 KiB)
    assert packed[:6] == bytes.fromhex("04224d186040")
    assert packed[-4:] == b"\0\0\0\0"  # end mark, no content checksum
    import lz4.frame

    info = lz4.frame.get_frame_info(packed)
    assert info["block_linked"] is False
    assert info["content_checksum"] is False
    assert info["block_size_id"] == 4
    assert lz4.frame.decompress(packed) == TEXT


def test_lz4_ignores_what_follows_the_frame() -> None:
    packed = compress(CompressionType.LZ4, b"abc") + b"trailing"
    assert decompress(CompressionType.LZ4, packed) == b"abc"


def test_zstd_reads_streamed_and_concatenated_frames() -> None:
    import zstandard

    cobj = zstandard.ZstdCompressor().compressobj()  # no content size, like zstd-jni's stream
    streamed = cobj.compress(TEXT) + cobj.flush()
    assert zstandard.frame_content_size(streamed) == -1
    assert decompress(CompressionType.ZSTD, streamed) == TEXT
    assert decompress(CompressionType.ZSTD, streamed + compress(CompressionType.ZSTD, b"!")) == (
        TEXT + b"!"
    )


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_streams_are_corrupt(codec: CompressionType) -> None:
    packed = compress(codec, TEXT)
    for cut in (1, 5, len(packed) // 2):
        try:
            out = decompress(codec, packed[:-cut])
        except CorruptRecordError:
            continue
        # xerial snappy stops quietly at a chunk boundary, as SnappyInputStream does
        assert codec == CompressionType.SNAPPY and TEXT.startswith(out)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_garbage_is_corrupt(codec: CompressionType) -> None:
    for junk in (b"", b"\x01", b"not a compressed stream at all", b"\xff" * 100):
        with pytest.raises(CorruptRecordError, match=codec.kafka_name):
            decompress(codec, junk)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_decompression_is_bounded(codec: CompressionType) -> None:
    packed = compress(codec, bytes(1 << 20))
    assert len(packed) < 64 << 10
    assert decompress(codec, packed, max_size=1 << 20) == bytes(1 << 20)
    with pytest.raises(CorruptRecordError, match="more than 100000 bytes"):
        decompress(codec, packed, max_size=100_000)


@pytest.mark.parametrize(
    ("codec", "module", "package"),
    [
        (CompressionType.SNAPPY, "cramjam", "cramjam"),
        (CompressionType.LZ4, "lz4.frame", "lz4"),
        (CompressionType.ZSTD, "zstandard", "zstandard"),
    ],
)
def test_missing_library_names_the_package(
    monkeypatch: pytest.MonkeyPatch, codec: CompressionType, module: str, package: str
) -> None:
    monkeypatch.setattr(compression, "_modules", {})
    monkeypatch.setitem(sys.modules, module, None)  # makes ``import module`` fail
    assert not codec_available(codec)
    with pytest.raises(UnsupportedCodecError, match=f"pip install {package}") as e:
        decompress(codec, b"whatever")
    assert e.value.codec == codec.kafka_name and e.value.package == package
    with pytest.raises(UnsupportedCodecError, match=codec.kafka_name):
        compress(codec, b"data")


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("size", [0, 1, 65_535, 65_536, 65_537, 300_000])
def test_limit_is_exact(codec: CompressionType, size: int) -> None:
    # Sizes around lz4's first output step (64 KiB) and past it: the limit is exact either way.
    data = (TEXT * 2)[:size]
    packed = compress(codec, data)
    assert decompress(codec, packed, max_size=size) == data
    if size:
        with pytest.raises(CorruptRecordError, match=f"more than {size - 1} bytes"):
            decompress(codec, packed, max_size=size - 1)


def test_small_zstd_frames_concatenate_and_truncate() -> None:
    # Blocks of one step or less take a one-call path; several frames or a cut one leave it.
    one, two = compress(CompressionType.ZSTD, b"one,"), compress(CompressionType.ZSTD, b"two")
    assert decompress(CompressionType.ZSTD, one + two) == b"one,two"
    with pytest.raises(CorruptRecordError, match="truncated"):
        decompress(CompressionType.ZSTD, one + two[:-2])
    with pytest.raises(CorruptRecordError, match="more than 5 bytes"):
        decompress(CompressionType.ZSTD, one + two, max_size=5)
