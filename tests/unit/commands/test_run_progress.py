"""`dpfl run` progress: a run projected to take long says so once, after its first round."""

from __future__ import annotations

import pytest

from dpfl.commands.run import RoundProgress


def test_a_long_run_says_how_long_once(capsys: pytest.CaptureFixture[str]) -> None:
    progress = RoundProgress(100_000, "long")  # stderr is not a terminal here: one line per round
    progress(1, 100_000, {}, 2.0)  # 2 s per round → 200,000 s ≈ 2.3 days
    progress(2, 100_000, {}, 4.0)
    err = capsys.readouterr().err
    assert err.count("take about") == 1
    assert "the 100000 rounds take about 2.3 days" in err


def test_a_short_run_says_nothing_more(capsys: pytest.CaptureFixture[str]) -> None:
    progress = RoundProgress(20, "short")
    progress(1, 20, {}, 1.0)  # 20 s in all
    assert "take about" not in capsys.readouterr().err
