"""dpfl's SuperNode wrapper: Flower's loop with its waits capped, nothing else changed."""

from __future__ import annotations

import re
import sys
import time
import types

import pytest

pytest.importorskip("flwr")

from dpfl.runtime.flower import supernode  # noqa: E402


def test_the_installed_flower_keeps_the_waits_where_the_wrapper_shortens_them() -> None:
    """Flower's SuperNode loop uses the module-level name ``time`` for its 3 s and 0.5 s waits;
    if a Flower upgrade moves them, this fails before a deployment quietly gets slow again."""
    import inspect

    from flwr.supernode import start_client_internal as sci

    source = inspect.getsource(sci)
    # the module's only uses of `time` are its waits: capping them changes nothing else
    assert sorted(re.findall(r"\btime\.\w+\([^)]*\)", source)) == ["time.sleep(0.5)", "time.sleep(0.5)",
                                                                  "time.sleep(3)"]
    assert re.search(r"^import time$", source, re.M)
    saved = sci.time
    try:
        assert supernode.install(0.2, sci) is True
        assert isinstance(sci.time, supernode.ShortSleeps) and sci.time.cap == 0.2
        assert supernode.install(0.1, sci) is True  # installing again replaces the cap
        assert sci.time.cap == 0.1
    finally:
        sci.time = saved
    assert sci.time is time


def test_sleeps_are_capped_and_every_other_name_is_the_time_modules() -> None:
    slept: list[float] = []
    shim = supernode.ShortSleeps(0.05)
    real = time.sleep
    time.sleep = slept.append  # type: ignore[assignment]
    try:
        shim.sleep(3)
        shim.sleep(0.5)
        shim.sleep(0.01)
    finally:
        time.sleep = real
    assert slept == [0.05, 0.05, 0.01]
    assert shim.time is time.time and shim.monotonic is time.monotonic


@pytest.mark.parametrize("cap", [0.0, -1.0, 0.04, 3.5, float("nan")])
def test_a_pull_interval_out_of_range_is_refused_naming_it(cap: float) -> None:
    with pytest.raises(ValueError, match=rf"pull interval = {cap!r}"):
        supernode.ShortSleeps(cap)


def test_a_module_without_the_time_name_keeps_flowers_waits_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    other = types.ModuleType("flwr.supernode.start_client_internal")
    assert supernode.install(0.2, other) is False
    assert "Flower's own waits" in capsys.readouterr().err
    assert not hasattr(other, "time")


def test_the_pull_interval_is_taken_out_and_the_rest_goes_to_flower() -> None:
    args = ["--insecure", "--pull-interval", "0.5", "--superlink", "127.0.0.1:9092", "--pull-interval=0.3",
            "--isolation", "process"]
    interval, rest = supernode._split_args(args)
    assert interval == 0.3
    assert rest == ["--insecure", "--superlink", "127.0.0.1:9092", "--isolation", "process"]
    assert supernode._split_args(["--insecure"]) == (supernode.DEFAULT_PULL_SECONDS, ["--insecure"])
    with pytest.raises(SystemExit, match="'soon' is not a number"):
        supernode._split_args(["--pull-interval", "soon"])
    with pytest.raises(SystemExit, match="needs a value"):
        supernode._split_args(["--pull-interval"])


def test_main_caps_flowers_waits_and_hands_flower_its_own_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    from flwr.supernode import cli
    from flwr.supernode import start_client_internal as sci

    seen: list[tuple[list[str], object]] = []
    monkeypatch.setattr(cli, "flower_supernode", lambda: seen.append((list(sys.argv), sci.time)))
    monkeypatch.setattr(sys, "argv", ["x"])
    monkeypatch.setattr(sci, "time", time)
    supernode.main(["--insecure", "--pull-interval", "0.1", "--superlink", "127.0.0.1:9092"])
    ((argv, shim),) = seen
    assert argv == ["flower-supernode", "--insecure", "--superlink", "127.0.0.1:9092"]
    assert isinstance(shim, supernode.ShortSleeps) and shim.cap == 0.1
    with pytest.raises(SystemExit, match="pull interval = 0.01: must be between 0.05 and 3"):
        supernode.main(["--pull-interval", "0.01"])
