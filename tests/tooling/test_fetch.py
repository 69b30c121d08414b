"""pstool.lock's downloads: a registry's brief failure is tried again; a lasting one is a clear error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))

from pstool import PatchsetError, lock  # noqa: E402


@pytest.fixture
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lock, "DOWNLOAD_WAITS", (0.0, 0.0))


def _command(body: str) -> list[str]:
    return [sys.executable, "-c", body]


@pytest.mark.usefixtures("no_waits")
def test_a_download_that_fails_once_is_tried_again(tmp_path: Path) -> None:
    """The first attempt fails (as a reset connection does), the second puts the file in place."""
    target, tried = tmp_path / "x.whl", tmp_path / "tried"
    script = (
        "import pathlib, sys\n"
        f"tried, target = pathlib.Path({str(tried)!r}), pathlib.Path({str(target)!r})\n"
        "if not tried.exists():\n"
        "    tried.write_text('1'); print('Connection reset by peer', file=sys.stderr); sys.exit(1)\n"
        "target.write_text('wheel')\n"
    )
    lock.download_with_retries(_command(script), target, "x.whl")
    assert target.read_text() == "wheel"


@pytest.mark.usefixtures("no_waits")
def test_a_download_that_keeps_failing_says_how_often_and_why(tmp_path: Path) -> None:
    counter = tmp_path / "count"
    script = (
        "import pathlib, sys\n"
        f"c = pathlib.Path({str(counter)!r}); c.write_text(str(int(c.read_text() or 0) + 1) if c.exists() else '1')\n"
        "print('HTTP error 503 while getting x.whl', file=sys.stderr); sys.exit(1)\n"
    )
    with pytest.raises(PatchsetError, match=r"could not download x\.whl \(3 attempts\)(.|\n)*HTTP error 503"):
        lock.download_with_retries(_command(script), tmp_path / "x.whl", "x.whl")
    assert counter.read_text() == "3"
    assert not (tmp_path / "x.whl").exists()


@pytest.mark.usefixtures("no_waits")
def test_pip_against_an_unreachable_index_fails_with_pips_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real download path (pip download of a pinned wheel, from an index that does not answer):
    what pip said, its ERROR lines, reaches the error."""
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    pinned = lock.PinnedFile(
        name="apache-airflow-core", version="3.3.2", file="apache_airflow_core-3.3.2-py3-none-any.whl",
        sha256="0" * 64, kind="wheel",
    )
    with pytest.raises(PatchsetError, match=r"(?s)could not download apache_airflow_core-3\.3\.2.*\(3 attempts\); the last one said:\n.*ERROR: "):
        lock._download(pinned, tmp_path)
    assert list(tmp_path.iterdir()) == []
