"""Byte sizes on the command line and in tables: ``"64K"`` -> 65536, 65536 -> ``"64 KiB"``."""

from __future__ import annotations

import argparse
import re

__all__ = ["format_bytes", "parse_size", "size_type"]

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """Bytes from ``"4096"``, ``"64K"``, ``"1M"``, ``"1G"`` (binary units; ``KiB``/``KB`` also accepted).

    Raises ``ValueError`` naming the text for anything else, zero and negative sizes included.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = _SIZE.match(str(text))
        if m is None:
            raise ValueError(
                f"cannot read {text!r} as a size: write a whole number of bytes with an optional "
                "binary unit, like 4096, 64K, 1M or 1G"
            )
        value = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if value <= 0:
        raise ValueError(f"a size must be positive, got {text!r}")
    return value


def size_type(text: str) -> int:
    """``parse_size`` as an argparse ``type=``: bad sizes become usage errors (exit status 2)."""
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def format_bytes(n: int | float) -> str:
    """``1536`` -> ``"1.5 KiB"``, ``1 << 20`` -> ``"1 MiB"``, ``100`` -> ``"100 B"``."""
    n = float(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n:.0f} B"
