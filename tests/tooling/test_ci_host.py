"""dev/ci_host.py: the host's speed and where the CPU went, which .ci/run prints after its time table."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "dev" / "ci_host.py"
sys.path.insert(0, str(REPO / "dev"))

import ci_host  # noqa: E402

pytestmark = pytest.mark.line_independent


@pytest.mark.parametrize(
    ("cmdline", "expected"),
    [
        ("/v/bin/python\0/v/bin/airflow\0scheduler\0", "airflow scheduler"),
        ("airflow dag-processor", "airflow dag-processor"),
        ("/v/bin/python /v/bin/airflow db migrate", "airflow db migrate"),
        ("/v/bin/python /v/bin/airflow celery worker --concurrency 2", "airflow celery worker"),
        ("/v/bin/python -B -c from multiprocessing.spawn import spawn_main", "python (multiprocessing spawn)"),
        ("/v/bin/python -m pytest tests/aip122", "pytest"),
        ("/v/bin/python -m pip install -q x.whl", "pip"),
        ("postgres: 15/main: postgres db 127.0.0.1(5555) idle", "postgres"),
        ("/usr/bin/some-tool --flag", "some-tool"),
        ("", "kernel or exited"),
    ],
)
def test_a_command_line_is_named_by_its_kind(cmdline: str, expected: str) -> None:
    assert ci_host.kind(cmdline) == expected


def test_shares_of_busy_steal_and_idle_between_two_readings() -> None:
    before = ci_host.cpu_counters("cpu  100 0 50 800 10 0 0 40 0 0\ncpu0 1 2 3\n")
    after = ci_host.cpu_counters("cpu  400 0 150 1100 30 0 0 100 0 0\n")
    # delta: user 300, system 100, idle 300, iowait 20, steal 60 -> 780 ticks
    shares = ci_host.shares(before, after)
    assert shares["busy"] == pytest.approx(400 / 780)
    assert shares["steal"] == pytest.approx(60 / 780)
    assert shares["iowait"] == pytest.approx(20 / 780)
    assert shares["idle"] == pytest.approx(300 / 780)


def test_counters_refuse_a_text_that_is_not_proc_stat() -> None:
    with pytest.raises(ValueError, match="not a /proc/stat text"):
        ci_host.cpu_counters("intr 1 2 3\n")


def _fake_proc(root: Path, pid: int, start: int, utime: int, stime: int, cmdline: str) -> None:
    entry = root / str(pid)
    entry.mkdir(parents=True, exist_ok=True)
    # comm may hold spaces and parentheses: the fields are counted after the last ")".
    fields = ["S", *["0"] * 10, str(utime), str(stime), *["0"] * 6, str(start)]
    (entry / "stat").write_text(f"{pid} (python (x) y) {' '.join(fields)} 0 0\n")
    (entry / "cmdline").write_text(cmdline)


def test_cpu_per_kind_counts_only_what_was_used_between_the_samples(tmp_path: Path) -> None:
    hz = ci_host._HZ
    _fake_proc(tmp_path, 10, 5, 2 * hz, 1 * hz, "airflow\0scheduler\0")
    (tmp_path / "self").mkdir()  # not a pid: ignored
    first: dict = {}
    ci_host.sample(first, tmp_path)
    seen = dict(first)
    _fake_proc(tmp_path, 10, 5, 5 * hz, 2 * hz, "airflow\0scheduler\0")  # +4 s
    _fake_proc(tmp_path, 11, 9, 3 * hz, 0, "/v/bin/python -m pytest tests\0")  # new: 3 s
    ci_host.sample(seen, tmp_path)
    # pid 11 exits and its number is reused by another process: a new key, not pid 11's CPU again.
    _fake_proc(tmp_path, 11, 20, 1 * hz, 0, "postgres: idle\0")
    ci_host.sample(seen, tmp_path)
    assert dict(ci_host.per_kind(first, seen)) == {"airflow scheduler": 4.0, "pytest": 3.0, "postgres": 1.0}


def test_start_watch_end_print_the_host_figures_and_the_kinds(tmp_path: Path) -> None:
    state, cpu = tmp_path / "host.json", tmp_path / "cpu.json"
    start = subprocess.run([sys.executable, str(SCRIPT), "start", str(state)], capture_output=True, text=True, check=True)
    assert start.stdout.startswith("host: pure-Python loop of 10,000,000 iterations: ")
    assert json.loads(state.read_text())["loop"] > 0
    watcher = subprocess.Popen([sys.executable, str(SCRIPT), "watch", str(cpu), "--bucket", "1"])
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 2.5: pass"])
    busy.wait(timeout=60)
    time.sleep(1.5)
    watcher.send_signal(signal.SIGTERM)
    assert watcher.wait(timeout=30) == 0
    watched = json.loads(cpu.read_text())
    kinds = watched["kinds"]
    # The busy loop ran between the watcher's samples: its CPU is there, under its executable's name.
    assert kinds[Path(sys.executable).name] >= 1.0
    # One busy share per second of the watch; the loop kept one core busy for 2.5 s of it.
    busy = watched["busy_per_bucket"]
    assert len(busy) >= 3 and all(0 <= share <= 1 for share in busy)
    assert max(busy) >= 0.4, busy
    end = subprocess.run(
        [sys.executable, str(SCRIPT), "end", str(state), "--watch", str(cpu)], capture_output=True, text=True, check=True
    )
    lines = end.stdout.splitlines()
    assert lines[0].startswith("host: pure-Python loop of 10,000,000 iterations: ")
    assert " at the start, " in lines[0]
    assert "cores were" in lines[1] and "stolen" in lines[1]
    assert lines[2] == "host: busy share of both cores in each 1 s of the run (%):"
    assert [int(cell) for cell in lines[3].split()] == [round(share * 100) for share in busy[:20]]
    kinds_at = next(i for i, line in enumerate(lines) if line.startswith("CPU seconds per kind of process"))
    assert any(line.split()[-1] == Path(sys.executable).name for line in lines[kinds_at + 1 :])
