"""Count what the test suite checks: collected tests and assertions, per test directory.

For each directory under ``tests/`` (and ``benchmarks/``): the test ids pytest collects there
(``pytest --collect-only -q``, one session per directory as ``dev/run_tests.py`` runs them, with the
interpreter running this script, i.e. the line's venv), and per Python file the ``assert``
statements and ``pytest.raises(...)`` calls (read with ``ast``). Prints a table and, with
``--json FILE``, writes every figure (and the collected ids) so that two runs can be compared::

    PATCHSET_LINE=3.3 .venv/bin/python dev/test_inventory.py --json build/inventory-3.3.json
    PATCHSET_LINE=3.4 .venv-3.4/bin/python dev/test_inventory.py --json build/inventory-3.4.json
    python3 dev/test_inventory.py --compare before.json after.json

``--compare`` lists the directories whose counts went down and the test ids that disappeared.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def checks_in(path: Path) -> dict[str, int]:
    """The ``assert`` statements and ``pytest.raises`` calls of one Python file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    asserts = sum(isinstance(node, ast.Assert) for node in ast.walk(tree))
    raises = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "raises":
                raises += 1
    return {"asserts": asserts, "raises": raises}


def collected(directory: Path) -> list[str]:
    """The test ids one pytest session collects in ``directory`` (deselection and skips included)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", str(directory)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    ids = [line for line in proc.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    if proc.returncode not in (0, 5):
        raise SystemExit(f"collection failed in {directory}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return ids


def inventory(collect: bool) -> dict[str, dict]:
    out: dict[str, dict] = {}
    roots = [p for p in sorted((REPO / "tests").iterdir()) if p.is_dir() and p.name != "__pycache__"]
    roots.append(REPO / "benchmarks")
    for directory in roots:
        files = {
            str(path.relative_to(REPO)): checks_in(path)
            for path in sorted(directory.rglob("*.py"))
            if "__pycache__" not in path.parts
        }
        entry = {
            "asserts": sum(f["asserts"] for f in files.values()),
            "raises": sum(f["raises"] for f in files.values()),
            "files": files,
        }
        if collect and directory.parent.name == "tests" and any(directory.glob("test_*.py")):
            entry["tests"] = collected(directory)
        out[str(directory.relative_to(REPO))] = entry
    shared = {str(p.relative_to(REPO)): checks_in(p) for p in sorted((REPO / "tests").glob("*.py"))}
    out["tests/*.py"] = {
        "asserts": sum(f["asserts"] for f in shared.values()),
        "raises": sum(f["raises"] for f in shared.values()),
        "files": shared,
    }
    return out


def table(data: dict[str, dict]) -> str:
    rows = [f"{'directory':28} {'tests':>6} {'asserts':>8} {'raises':>7}"]
    for name, entry in data.items():
        tests = len(entry["tests"]) if "tests" in entry else "-"
        rows.append(f"{name:28} {tests!s:>6} {entry['asserts']:>8} {entry['raises']:>7}")
    total_tests = sum(len(e.get("tests", [])) for e in data.values())
    rows.append(
        f"{'total':28} {total_tests:>6} {sum(e['asserts'] for e in data.values()):>8} "
        f"{sum(e['raises'] for e in data.values()):>7}"
    )
    return "\n".join(rows)


def compare(before: dict[str, dict], after: dict[str, dict]) -> int:
    """Print what went down from ``before`` to ``after``; exit status 1 if any test id disappeared."""
    lost = 0
    for name in sorted(set(before) | set(after)):
        b, a = before.get(name, {}), after.get(name, {})
        for key in ("asserts", "raises"):
            if a.get(key, 0) != b.get(key, 0):
                print(f"{name}: {key} {b.get(key, 0)} -> {a.get(key, 0)}")
        gone = sorted(set(b.get("tests", [])) - set(a.get("tests", [])))
        new = sorted(set(a.get("tests", [])) - set(b.get("tests", [])))
        for test_id in gone:
            print(f"{name}: test gone: {test_id}")
        for test_id in new:
            print(f"{name}: test added: {test_id}")
        lost += len(gone)
    return 1 if lost else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="write the figures and the collected ids here")
    parser.add_argument("--no-collect", action="store_true", help="count assertions only (no pytest run)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args(argv)
    if args.compare:
        before, after = (json.loads(p.read_text()) for p in args.compare)
        print(table(before), "\n", table(after), sep="\n")
        return compare(before, after)
    data = inventory(collect=not args.no_collect)
    print(table(data))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
