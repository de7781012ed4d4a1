"""bash's memory stays bounded however much a command prints (SPEC B-2; bench/workspace_bash.py)."""

from __future__ import annotations

from bench.workspace_bash import bench_bash_memory

MIB = 1024 * 1024


def test_b2_reading_forty_megabytes_does_not_grow_our_rss():
    report = bench_bash_memory(40_000_000)
    assert report["command_output_bytes"] == 40_000_000
    assert report["captured_bytes"] == 100 * 1024
    # Holding the output would add >= 40 MB; the bounded capture adds (almost) nothing.
    assert report["rss_growth_bytes"] < 16 * MIB, report
