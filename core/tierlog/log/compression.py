"""The compression codecs of record batches, with Kafka's exact framing.

A compressed batch compresses its whole records block (everything after ``RecordsCount``) as one
stream. What each codec's stream is, in Kafka (``org.apache.kafka.common.compress``):

- **gzip**: a standard gzip stream (``GZIPOutputStream``, deflate level 6 by default). Java's
  ``GZIPInputStream`` reads concatenated members and ignores trailing bytes that do not start
  another member; so does ``decompress``.
- **snappy**: *xerial* framing (``SnappyOutputStream``), not the official snappy framing format: a
  16-byte header (``82 'SNAPPY' 00``, version 1, compatible version 1, both int32 big-endian),
  then chunks of ``int32 big-endian length | raw snappy block`` each compressing up to 32 KiB.
  ``SnappyInputStream`` also reads a *raw* snappy block when the input does not start with that
  header (fewer than 16 bytes, or another prefix), skips a repeated header (concatenated streams)
  and stops when fewer than 4 bytes remain; ``decompress`` does the same.
- **lz4**: one standard LZ4 frame (``Lz4BlockOutputStream``): magic ``04 22 4D 18``, FLG ``60``
  (version 1, independent blocks, no block or content checksum, no content size), BD ``40``
  (64 KiB blocks), header checksum, blocks, end mark. Kafka's reader refuses linked blocks, so
  they are never written here. The header checksum is wrong on purpose only for magic 0 (Kafka
  0.8/0.9 compatibility, ``useBrokenFlagDescriptorChecksum``); magic 1 and 2 use the correct
  one, which is all this module writes. Kafka reads one frame and ignores what follows it.
- **zstd**: standard zstd frames (zstd-jni's stream, level 3 by default, without a content size);
  concatenated frames are read as one stream, as zstd-jni reads them.

Libraries, chosen for speed on this path and for being the ones the Python Kafka clients use:
``lz4`` (python-lz4: the only binding that exposes every LZ4 frame flag, so the frames written
match Kafka's byte for byte, and the fastest), ``zstandard`` (the reference binding, ~1.7x
cramjam's zstd here) and ``cramjam`` for raw snappy (python-snappy 0.7 is itself a wrapper of
cramjam); gzip is the standard library's ``zlib``. Each is imported on first use, so a missing
one only matters to batches of its codec and gives ``UnsupportedCodecError`` naming the package.

Decompression is bounded by ``max_size`` (default ``DEFAULT_MAX_DECOMPRESSED_SIZE``): a small
corrupt or hostile batch must not expand into gigabytes before the record decoder notices. gzip,
lz4 and snappy stop exactly at the limit; zstd is fed in 8 KiB steps, so it can overshoot by at
most what one step expands to.

Decompression is on the path of deep reads, so the wrappers stay thin: lz4 goes through
python-lz4's low-level ``decompress_chunk`` (``LZ4FrameDecompressor``'s bookkeeping, with a copy
of a memoryview input, cost ~20% of a 16 KiB batch), and a zstd block of one step or less is
decompressed in one call. What remains is the codecs' own work: per 16 KiB batch about 9 us for
lz4, 13 us for snappy, 20 us for zstd and 75 us for gzip (zlib's inflate) on the 2-core machine
of bench/log_format.py, against ~20 us to decode its ~100 records with the C accelerator.
"""

from __future__ import annotations

import importlib
import struct
import threading
import zlib
from enum import IntEnum
from types import ModuleType
from typing import Any, Final

from tierlog.log._varint import BytesLike
from tierlog.spi import CorruptRecordError, InvalidArgumentError, TierlogError

DEFAULT_MAX_DECOMPRESSED_SIZE: Final = 256 << 20
"""Largest records block a batch may decompress to (256 MiB) unless the caller allows more."""

XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
XERIAL_HEADER: Final = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE: Final = 32 * 1024
"""Uncompressed bytes per xerial chunk (``SnappyOutputStream.DEFAULT_BLOCK_SIZE``)."""

_GZIP_MAGIC: Final = b"\x1f\x8b"
_ZSTD_STEP: Final = 8 * 1024
_INT32: Final = struct.Struct(">i")


class CompressionType(IntEnum):
    """The codec ids of bits 0-2 of a batch's attributes (Kafka's ``CompressionType``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def kafka_name(self) -> str:
        """The name Kafka's configs use (``compression.type``): ``none``, ``gzip``, ..."""
        return self.name.lower()

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        """The codec a config names (``"zstd"``); raises ``InvalidArgumentError`` if unknown."""
        try:
            return cls[name.strip().upper()]
        except KeyError:
            names = ", ".join(c.kafka_name for c in cls)
            raise InvalidArgumentError(
                f"unknown compression type {name!r}; expected one of {names}"
            ) from None


class UnsupportedCodecError(TierlogError):
    """The library a codec needs is not installed (or the codec is not one tierlog knows).

    ``codec`` is the codec's Kafka name and ``package`` the pip package that provides it.
    """

    def __init__(self, message: str, *, codec: str, package: str | None = None):
        super().__init__(message)
        self.codec = codec
        self.package = package


_PACKAGES: Final[dict[CompressionType, tuple[str, str]]] = {
    CompressionType.SNAPPY: ("cramjam", "cramjam"),
    CompressionType.LZ4: ("lz4.frame", "lz4"),
    CompressionType.ZSTD: ("zstandard", "zstandard"),
}
_modules: dict[CompressionType, ModuleType] = {}
_local = threading.local()


def _module(codec: CompressionType, action: str) -> Any:
    """The codec's library, imported once; ``UnsupportedCodecError`` names what to install."""
    mod = _modules.get(codec)
    if mod is None:
        module_name, package = _PACKAGES[codec]
        try:
            mod = importlib.import_module(module_name)
        except ImportError as e:
            raise UnsupportedCodecError(
                f"cannot {action} {codec.kafka_name}: the Python package {package!r} is not "
                f"installed (pip install {package})",
                codec=codec.kafka_name,
                package=package,
            ) from e
        _modules[codec] = mod
    return mod


def codec_available(codec: CompressionType) -> bool:
    """Whether ``codec``'s library can be imported (``NONE`` and ``GZIP`` always can)."""
    if codec in (CompressionType.NONE, CompressionType.GZIP):
        return True
    try:
        _module(codec, "use")
    except UnsupportedCodecError:
        return False
    return True


def compress(codec: CompressionType, data: BytesLike, *, level: int | None = None) -> bytes:
    """Compress a records block as Kafka frames it for ``codec``.

    ``level`` is Kafka's ``compression.<codec>.level`` (gzip 1-9, lz4 1-17, zstd -131072..22);
    ``None`` takes Kafka's default. snappy has no levels.
    """
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        return zlib.compress(data, -1 if level is None else level, 31)
    if codec == CompressionType.SNAPPY:
        cramjam = _module(codec, "compress")
        view = memoryview(data)
        parts = [XERIAL_HEADER]
        for i in range(0, len(view), XERIAL_BLOCK_SIZE):
            block = bytes(cramjam.snappy.compress_raw(view[i : i + XERIAL_BLOCK_SIZE]))
            parts.append(_INT32.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == CompressionType.LZ4:
        frame = _module(codec, "compress")
        # Kafka's default level 9 selects lz4-java's fast compressor, which is lz4's level 0 here.
        lz4_level = 0 if level is None or level == 9 else level
        return bytes(
            frame.compress(
                data,
                compression_level=lz4_level,
                block_size=frame.BLOCKSIZE_MAX64KB,
                block_linked=False,
                content_checksum=False,
                block_checksum=False,
                store_size=False,
            )
        )
    if codec == CompressionType.ZSTD:
        zstd = _module(codec, "compress")
        # Streamed, as zstd-jni's ZstdOutputStream writes Kafka's batches: a frame without a
        # content size and with a window descriptor (header 00 58 at level 3), so a rebuilt
        # batch is byte for byte the one Kafka's cleaner writes. ``compress()`` would write a
        # single-segment frame with the size instead (decodable by both, but other bytes).
        compressor = zstd.ZstdCompressor(
            level=3 if level is None else level, write_content_size=False
        ).compressobj()
        return bytes(compressor.compress(data) + compressor.flush())
    raise UnsupportedCodecError(f"unknown compression codec {codec!r}", codec=str(codec))


def decompress(
    codec: CompressionType, data: BytesLike, *, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE
) -> bytes:
    """Decompress a records block framed as Kafka frames ``codec``.

    Raises ``CorruptRecordError`` (without a position: the caller adds the batch's) when the
    stream is malformed or truncated, or expands beyond ``max_size`` bytes.
    """
    if codec == CompressionType.NONE:
        return bytes(data)
    try:
        if codec == CompressionType.GZIP:
            return _gunzip(data, max_size)
        if codec == CompressionType.SNAPPY:
            return _unsnappy(_module(codec, "decompress"), data, max_size)
        if codec == CompressionType.LZ4:
            return _unlz4(_module(codec, "decompress"), data, max_size)
        if codec == CompressionType.ZSTD:
            return _unzstd(_module(codec, "decompress"), data, max_size)
    except (CorruptRecordError, UnsupportedCodecError):
        raise
    except Exception as e:  # each library has its own error types (zlib.error, ZstdError, ...)
        raise CorruptRecordError(
            f"{codec.kafka_name} records block does not decompress: {type(e).__name__}: {e}"
        ) from e
    raise UnsupportedCodecError(f"unknown compression codec {codec!r}", codec=str(codec))


def _too_large(codec: str, max_size: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"{codec} records block decompresses to more than {max_size} bytes (the limit given)"
    )


def _gunzip(data: BytesLike, max_size: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    rest: BytesLike = data
    while True:
        d = zlib.decompressobj(31)
        out = d.decompress(rest, max_size + 1 - total)
        total += len(out)
        parts.append(out)
        if total > max_size or d.unconsumed_tail:
            raise _too_large("gzip", max_size)
        if not d.eof:
            raise CorruptRecordError("gzip records block is truncated (no end of stream)")
        rest = d.unused_data
        if rest[:2] != _GZIP_MAGIC:
            # GZIPInputStream ignores trailing bytes that do not start another member.
            return parts[0] if len(parts) == 1 else b"".join(parts)


def _unsnappy(cramjam: Any, data: BytesLike, max_size: int) -> bytes:
    snappy = cramjam.snappy
    view = memoryview(data)
    n = len(view)
    if n < len(XERIAL_HEADER) or bytes(view[: len(XERIAL_MAGIC)]) != XERIAL_MAGIC:
        # SnappyInputStream reads a raw snappy block when the xerial header is absent.
        if snappy.decompress_raw_len(view) > max_size:
            raise _too_large("snappy", max_size)
        return bytes(snappy.decompress_raw(view))
    parts: list[bytes] = []
    total = 0
    pos = len(XERIAL_HEADER)
    while n - pos >= 4:
        if (
            view[pos] == XERIAL_MAGIC[0]  # as a chunk length, a negative number
            and n - pos >= len(XERIAL_HEADER)
            and bytes(view[pos : pos + len(XERIAL_MAGIC)]) == XERIAL_MAGIC
        ):
            pos += len(XERIAL_HEADER)  # a concatenated stream's header
            continue
        (size,) = _INT32.unpack_from(view, pos)
        pos += 4
        if size < 0 or size > n - pos:
            raise CorruptRecordError(
                f"snappy (xerial) chunk at byte {pos - 4} claims {size} bytes but {n - pos} remain"
            )
        chunk = view[pos : pos + size]
        pos += size
        total += snappy.decompress_raw_len(chunk)
        if total > max_size:
            raise _too_large("snappy", max_size)
        parts.append(bytes(snappy.decompress_raw(chunk)))
    return b"".join(parts)


def _unlz4(frame: Any, data: BytesLike, max_size: int) -> bytes:
    # python-lz4's low-level calls, without LZ4FrameDecompressor's bookkeeping (it copies a
    # memoryview input and keeps the unread tail) nor its context, which costs nothing to make.
    decompress_chunk = frame.decompress_chunk
    context = frame.create_decompression_context()
    # The output buffer is allocated at ``want`` bytes up front: ask for a few times the input
    # and grow, not for ``max_size`` (256 MiB by default) for every 16 KiB batch.
    step = max(1 << 16, 4 * len(data))
    want = min(step, max_size + 1)
    out, read, eof = decompress_chunk(context, data, max_length=want)
    if eof and len(out) <= max_size:
        # Lz4BlockInputStream stops at the end mark and ignores whatever follows the frame.
        return bytes(out)
    view = memoryview(data)[read:]
    parts = [out]
    total = len(out)
    while not eof:
        if total > max_size:
            raise _too_large("lz4", max_size)
        # Input all read and room left in the output: the frame has no more blocks to give.
        if (not view and len(out) < want) or (not read and not out):
            raise CorruptRecordError("lz4 records block is truncated (no end mark)")
        step *= 2
        want = min(step, max_size + 1 - total)
        out, read, eof = decompress_chunk(context, view, max_length=want)
        view = view[read:]
        parts.append(out)
        total += len(out)
    if total > max_size:
        raise _too_large("lz4", max_size)
    return b"".join(parts)


def _unzstd(zstd: Any, data: BytesLike, max_size: int) -> bytes:
    view = memoryview(data)
    n = len(view)
    dctx = getattr(_local, "zstd_dctx", None)
    if dctx is None:
        # A decompression context costs ~8 us to create, as much as decompressing a 16 KiB
        # batch; one per thread is reused (a context serves one stream at a time).
        dctx = _local.zstd_dctx = zstd.ZstdDecompressor()
    d = dctx.decompressobj()
    if n <= _ZSTD_STEP:
        # The common case, a batch of a few KiB that is one frame: one call, which can overshoot
        # the limit no more than one step of the loop below.
        out: bytes = d.decompress(view)
        if d.eof and not d.unused_data:
            if len(out) > max_size:
                raise _too_large("zstd", max_size)
            return out
        d = dctx.decompressobj()  # truncated, or several frames: start again, step by step
    parts: list[bytes] = []
    total = 0
    pos = 0
    while True:
        while not d.eof:
            if pos >= n:
                raise CorruptRecordError("zstd records block is truncated (incomplete frame)")
            out = d.decompress(view[pos : pos + _ZSTD_STEP])
            pos += min(_ZSTD_STEP, n - pos)
            total += len(out)
            if total > max_size:
                raise _too_large("zstd", max_size)
            parts.append(out)
        pos -= len(d.unused_data)
        if pos >= n:
            return parts[0] if len(parts) == 1 else b"".join(parts)
        d = dctx.decompressobj()
