"""Sizes on the command line and in tables."""

import pytest

from iris.examples.harness.units import format_bytes, parse_size


@pytest.mark.parametrize(
    "text, nbytes",
    [("4096", 4096), ("64K", 64 << 10), ("64k", 64 << 10), ("1M", 1 << 20), ("1G", 1 << 30), ("16KiB", 16 << 10),
     ("2MB", 2 << 20), (512, 512)],
)  # fmt: skip
def test_parse_size_reads_binary_units(text, nbytes):
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("text", ["", "M", "1.5M", "12Q", "-4K", "0", "1 M B", "0x10"])
def test_parse_size_rejects_what_it_cannot_read(text):
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


@pytest.mark.parametrize("nbytes, text", [(100, "100 B"), (1536, "1.5 KiB"), (1 << 20, "1 MiB"), (3 << 30, "3 GiB")])
def test_format_bytes(nbytes, text):
    assert format_bytes(nbytes) == text
