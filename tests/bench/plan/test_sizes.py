"""bench.plan.sizes: message sizes as people write them (binary K/M/G, decimal kB/MB/GB)."""

from __future__ import annotations

import pytest

from bench.plan.sizes import format_size, geometric, parse_size

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("8", 8),
        (8, 8),
        (0, 0),
        ("8B", 8),
        ("8 B", 8),
        ("8b", 8),
        ("  16  ", 16),
        # binary, as nccl-tests -b/-e
        ("4K", 4 * KIB),
        ("4k", 4 * KIB),
        ("4Ki", 4 * KIB),
        ("4KiB", 4 * KIB),
        ("4 KiB", 4 * KIB),
        ("1M", MIB),
        ("2Mi", 2 * MIB),
        ("1MiB", MIB),
        ("1 MiB", MIB),
        ("1G", GIB),
        ("1GiB", GIB),
        ("3 GiB", 3 * GIB),
        # decimal
        ("1kB", 1000),
        ("1MB", 10**6),
        ("1 MB", 10**6),
        ("1GB", 10**9),
        ("16GB", 16 * 10**9),
        # large values stay exact integers
        ("1024G", 1 << 40),
        (1 << 40, 1 << 40),
    ],
)
def test_parse_size_accepts(text, expected):
    value = parse_size(text)
    assert value == expected
    assert type(value) is int


@pytest.mark.parametrize(
    "text",
    [
        "4 parsecs",
        "-1",
        "",
        "   ",
        "1.5K",
        "1.5",
        "K",
        "KiB",
        "1e3",
        "0x10",
        "1TB",
        "1 KiB extra",
        "4 K B",
        "1,024",
        "one",
        "+8",
        "8 bytes",
    ],
)
def test_parse_size_rejects_text(text):
    with pytest.raises(ValueError) as info:
        parse_size(text)
    message = str(info.value)
    assert repr(text) in message, "the message must show the bad value"
    assert "expected" in message, "the message must say what was expected"


@pytest.mark.parametrize("value", [-1, -4096, True, False, 1.5, 4.0, None, [8]])
def test_parse_size_rejects_other_values(value):
    with pytest.raises(ValueError):
        parse_size(value)


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (0, "0 B"),
        (1, "1 B"),
        (8, "8 B"),
        (1023, "1023 B"),
        (KIB, "1 KiB"),
        (4 * KIB, "4 KiB"),
        (1536, "1.5 KiB"),
        (MIB, "1 MiB"),
        (MIB + KIB, "1025 KiB"),
        (4 * MIB, "4 MiB"),
        (GIB, "1 GiB"),
        (3 * GIB, "3 GiB"),
        (1024 * GIB, "1024 GiB"),
    ],
)
def test_format_size(nbytes, text):
    assert format_size(nbytes) == text


@pytest.mark.parametrize("exponent", range(0, 41))
def test_format_then_parse_round_trips_powers_of_two(exponent):
    nbytes = 1 << exponent
    assert parse_size(format_size(nbytes)) == nbytes


@pytest.mark.parametrize(
    ("low", "high", "factor", "expected"),
    [
        (8, 64, 2, [8, 16, 32, 64]),
        (8, 100, 2, [8, 16, 32, 64]),
        (8, 8, 2, [8]),
        (1, 1, 2, [1]),
        (16, 8, 2, []),
        (8, 4 * MIB, 2, [8 << k for k in range(20)]),
        (1, 1000, 10, [1, 10, 100, 1000]),
        (3, 100, 3, [3, 9, 27, 81]),
        (KIB, MIB, 4, [KIB, 4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB]),
    ],
)
def test_geometric(low, high, factor, expected):
    assert geometric(low, high, factor) == expected


def test_geometric_includes_max_and_is_increasing():
    sizes = geometric(8, GIB, 2)
    assert sizes[0] == 8 and sizes[-1] == GIB
    assert all(b == 2 * a for a, b in zip(sizes, sizes[1:], strict=False))
