"""Option types the examples share (argparse ``type=`` callables and choices)."""

from __future__ import annotations

import argparse

import torch

__all__ = ["DTYPES", "dtype_type", "positive_int"]

#: dtypes the data-moving examples accept, by torch name.
DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "int16", "int8", "uint8")


def positive_int(text: str) -> int:
    """A whole number >= 1, as an argparse type (a usage error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def dtype_type(text: str) -> torch.dtype:
    """A torch dtype by name (``float32``, ``bfloat16``, ...), as an argparse type."""
    if text not in DTYPES:
        raise argparse.ArgumentTypeError(f"unknown dtype {text!r}; choose one of {', '.join(DTYPES)}")
    return getattr(torch, text)
