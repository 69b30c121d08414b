"""Print the wall time of each test directory per release line, and the run's total (``.ci/run``'s last table);
then, where the logs have them, the CPU seconds each directory's session used.

Reads the ``make test`` output of each line (``dev/run_tests.py`` prints one
``----- tests/<dir>: ... in <N>s (<C>s CPU)`` line per directory and ``suite took <M> min``; ``.ci/run``
appends ``make test took <S>s``, the line's whole chain: install, verify and suite)::

    python3 dev/ci_times.py --total-seconds 2210 3.3=/tmp/3.3.log 3.4=/tmp/3.4.log
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

DIRECTORY = re.compile(r"^----- tests/(?P<dir>\S+): .* in (?P<seconds>\d+)s(?: \((?P<cpu>\d+)s CPU\))?\s*$")
SUITE = re.compile(r"^suite took (?P<minutes>[\d.]+) min")
MAKE = re.compile(r"^make test took (?P<seconds>\d+)s\s*$")


def times(log: Path) -> tuple[dict[str, int], float | None]:
    """{directory: seconds} and the suite's minutes, from one line's ``make test`` output."""
    per_dir, _, suite = _parse(log)
    return per_dir, suite


def chain_seconds(log: Path) -> int | None:
    """The seconds the line's whole ``make test`` took (install, verify, suite), if ``.ci/run`` wrote them."""
    text = log.read_text(errors="replace") if log.exists() else ""
    found = [int(m["seconds"]) for line in text.splitlines() if (m := MAKE.match(line))]
    return found[-1] if found else None


def _parse(log: Path) -> tuple[dict[str, int], dict[str, int], float | None]:
    per_dir: dict[str, int] = {}
    cpu: dict[str, int] = {}
    suite = None
    text = log.read_text(errors="replace") if log.exists() else ""
    for line in text.splitlines():
        if m := DIRECTORY.match(line):
            per_dir[m["dir"]] = int(m["seconds"])
            if m["cpu"] is not None:
                cpu[m["dir"]] = int(m["cpu"])
        elif m := SUITE.match(line):
            suite = float(m["minutes"])
    return per_dir, cpu, suite


def cpu_table(lines: dict[str, Path]) -> str:
    """Each directory's CPU seconds per line, and their sum; empty when no log has them."""
    data = {line: _parse(log)[1] for line, log in lines.items()}
    directories: list[str] = []
    for cpu in data.values():
        directories += [d for d in cpu if d not in directories]
    if not directories:
        return ""
    width = max([len("all directories"), *map(len, directories)])
    rows = ["test directory CPU time (s: its session and the processes it started), per release line:"]
    rows.append(f"  {'directory':{width}}" + "".join(f"{line:>8}" for line in data))
    for directory in directories:
        rows.append(f"  {directory:{width}}" + "".join(f"{data[line].get(directory, '-')!s:>8}" for line in data))
    rows.append(f"  {'all directories':{width}}" + "".join(f"{sum(cpu.values())!s:>8}" for cpu in data.values()))
    return "\n".join(rows)


def table(lines: dict[str, Path], total_seconds: float | None) -> str:
    data = {line: times(log) for line, log in lines.items()}
    directories: list[str] = []
    for per_dir, _ in data.values():
        directories += [d for d in per_dir if d not in directories]
    width = max([len("make test (install+suite)"), *map(len, directories)])
    rows = ["test directory wall time (s), per release line:", f"  {'directory':{width}}" + "".join(f"{line:>8}" for line in data)]
    for directory in directories:
        cells = "".join(f"{data[line][0].get(directory, '-')!s:>8}" for line in data)
        rows.append(f"  {directory:{width}}{cells}")
    suites = "".join(f"{'-' if s is None else round(s * 60)!s:>8}" for _, s in data.values())
    rows.append(f"  {'suite (run_tests.py)':{width}}{suites}")
    chains = "".join(f"{'-' if (c := chain_seconds(log)) is None else c!s:>8}" for log in lines.values())
    rows.append(f"  {'make test (install+suite)':{width}}{chains}")
    if total_seconds is not None:
        rows.append(f"run total (.ci/run, both lines side by side): {total_seconds / 60:.1f} min")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+", metavar="LINE=LOG")
    parser.add_argument("--total-seconds", type=float)
    args = parser.parse_args(argv)
    lines = {}
    for item in args.logs:
        line, _, log = item.partition("=")
        lines[line] = Path(log)
    print(table(lines, args.total_seconds))
    if cpu := cpu_table(lines):
        print(cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
