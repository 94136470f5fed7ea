"""The overview's charts (issue 30, item 3): a value axis with its unit, a time axis, and
each bar's and point's figure with its five minutes as a title (what a browser shows under
the cursor); drawn as SVG on the server, so the CSP needs no script for them."""

from __future__ import annotations

import re

import pytest

from jobsup.web.charts import bars, line, nice_top, progress


@pytest.mark.parametrize(
    ("value", "top"), [(0, 1), (1, 1), (3, 5), (7, 10), (12, 20), (23, 25), (240, 250), (0.3, 0.5), (1234, 2000)]
)
def test_the_axis_tops_at_a_round_figure(value: float, top: float) -> None:
    assert nice_top(value) == pytest.approx(top)


def test_bars_have_axes_units_and_a_figure_per_bar() -> None:
    drawn = str(bars([0] * 10 + [3, 4], [0] * 11 + [1], label="mail <throughput>"))
    ticks = re.findall(r'<text class="(?:tick|unit)"[^>]*>([^<]*)</text>', drawn)
    assert ticks == ["5", "2.5", "0", "jobs / 5 min", "-60 min", "-30 min", "now"]
    titles = re.findall(r"<rect [^>]*><title>([^<]*)</title>", drawn)
    assert titles == ["10-5 min ago: 3 succeeded", "the last 5 min: 4 succeeded", "the last 5 min: 1 failed"]
    assert "mail &lt;throughput&gt;: 7 succeeded, 1 failed in the last hour" in drawn  # escaped


def test_the_latency_line_says_seconds_and_each_points_mean() -> None:
    drawn = str(line([None] * 10 + [0.25, 1.5], label="mail latency"))
    assert re.findall(r'<text class="(?:tick|unit)"[^>]*>([^<]*)</text>', drawn)[:4] == ["2 s", "1 s", "0", "seconds"]
    assert re.findall(r"<circle [^>]*><title>([^<]*)</title>", drawn) == [
        "10-5 min ago: 250 ms mean",
        "the last 5 min: 1.5 s mean",
    ]
    assert "nothing finished" in str(line([None] * 12, label="idle"))


def test_a_batch_s_progress_is_a_bar_with_its_counts() -> None:
    drawn = str(progress({"succeeded": 6, "dead_lettered": 1, "running": 1, "pending": 2}, 10, label="batch 3"))
    assert re.findall(r'<rect class="(\w+)" x="[\d.]+" y="0" width="([\d.]+)"', drawn) == [
        ("rest", "320"),  # the background: pending and waiting children
        ("ok", "192.0"),
        ("bad", "32.0"),
        ("run", "32.0"),
    ]
    assert "batch 3: 7 of 10 finished (6 succeeded, 1 dead-lettered, 1 running)" in drawn
