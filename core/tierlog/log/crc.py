"""CRC-32C (Castagnoli), the checksum of record batches v2 and of producer snapshots.

Why the ``crc32c`` package (ICRAR) and not ``google-crc32c``, measured on this project's
machines (1 MiB ... 64 MiB buffers):

- it runs at ~8 GB/s (SSE4.2 ``crc32`` instruction, three interleaved streams) against ~4 GB/s
  for ``google-crc32c``; the shallow scan of a segment is bounded by this function and the read;
- it accepts any buffer, in particular a ``memoryview`` slice of the reusable ``bytearray`` the
  segment reader fills with ``readinto``. ``google_crc32c.value`` only takes read-only ``bytes``,
  which would cost a copy of every batch;
- it releases the GIL on large inputs and computes incrementally (``crc32c(data, crc)``), which
  the reader uses for a batch larger than its buffer.

It falls back to a software table on CPUs without the instruction (``HARDWARE_ACCELERATED`` says
which one is in use). Its license is LGPL-2.1-or-later; tierlog only imports it (no copy of its
code), which the LGPL allows for an Apache-2.0 project.
"""

from __future__ import annotations

from typing import Final

from crc32c import crc32c
from crc32c import hardware_based as _hardware_based

HARDWARE_ACCELERATED: Final[bool] = bool(_hardware_based)
"""True when the CPU instruction is used (about 20x the software table)."""

__all__ = ["HARDWARE_ACCELERATED", "crc32c"]
# ``crc32c(data, value=0) -> int``: CRC-32C of any buffer as an unsigned 32-bit int; pass
# ``value`` to continue a running CRC. Re-exported as is: a Python wrapper would add ~100 ns to
# each of the millions of per-batch calls of a segment scan.
