"""benchmarks/call_sequence.py: telling why two runs' allocator calls differ."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
from call_sequence import canonical, explain, read  # noqa: E402

MB = 1 << 20


def run(base, seg2, pick):
    """A tiny run: two 2 MiB segments (the second at base+seg2), two allocs,
    both freed, then a third alloc that lands on block `pick` (0 or 1)."""
    a, b = base, base + seg2
    return [("segment_alloc", 2 * MB, a), ("alloc", 2 * MB, a),
            ("segment_alloc", 2 * MB, b), ("alloc", 2 * MB, b),
            ("free_requested", 2 * MB, a), ("free_completed", 2 * MB, a),
            ("free_requested", 2 * MB, b), ("free_completed", 2 * MB, b),
            ("alloc", 2 * MB, (a, b)[pick])]


def test_addresses_are_compared_by_first_appearance():
    assert canonical(run(0x1000000, 4 * MB, 0)) == canonical(run(0x7000000, 4 * MB, 0))
    assert canonical(run(0x1000000, 4 * MB, 0)) != canonical(run(0x1000000, 4 * MB, 1))


def test_same_calls_same_choices():
    assert explain(run(0x1000000, 4 * MB, 0), run(0x9000000, 4 * MB, 0)).verdict == "same"


def test_different_choice_on_the_same_placement_is_the_allocators():
    e = explain(run(0x1000000, 4 * MB, 0), run(0x9000000, 4 * MB, 1))
    assert (e.verdict, e.index) == ("allocator", 8)


def test_different_choice_after_a_different_placement_is_the_drivers():
    # The second segment below the first in one run: best fit's address
    # tie-break then rightly picks the other block.
    e = explain(run(0x1000000, 4 * MB, 0), run(0x9000000, -4 * MB, 1))
    assert (e.verdict, e.index) == ("placement", 8)


def test_different_requests_are_the_programs():
    a = run(0x1000000, 4 * MB, 0)
    b = a[:-1] + [("alloc", 1 * MB, 0x1000000)]
    assert explain(a, b).verdict == "requests"
    assert explain(a, a[:-1]).verdict == "requests"


def test_read_rejects_malformed_lines(tmp_path):
    p = tmp_path / "seq.txt"
    p.write_text("alloc 512 4096\nalloc 512\n")
    with pytest.raises(ValueError, match="seq.txt:2"):
        read(p)
