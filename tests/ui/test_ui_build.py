"""The UI is built from the patched source: layout, the built dist in the wheel, its cache, vitest."""

from __future__ import annotations

import importlib.metadata
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "dev"))

from pstool import ui  # noqa: E402
from pstool.layout import CORE, is_generated, tree_to_wheels, wheel_to_tree  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))

import lines  # noqa: E402

TREE = lines.TREE
UI = TREE / "airflow-core" / "src" / "airflow" / "ui"
# The UI components the series changes, and their vitest files.
# Details.test.tsx: aip-122's "k of cap" row on both lines; on 3.4 also aip-97's cause and reason
# in 3.4's own "Reason for state" row.
VITEST_FILES = [
    "src/components/FailureCauseBadge.test.tsx",
    "src/components/TaskInstanceTooltip.test.tsx",
    "src/components/TaskTrySelect.test.tsx",
    "src/pages/TaskInstance/Details.test.tsx",
]


def test_tree_holds_the_ui_source_without_built_output() -> None:
    assert (UI / "pnpm-lock.yaml").is_file()
    assert (UI / "src" / "pages" / "TaskInstance" / "Details.tsx").is_file()
    assert not (UI / "dist").exists()
    assert not (UI / "node_modules").exists()


def test_layout_keeps_ui_source_out_of_the_wheel() -> None:
    assert wheel_to_tree(CORE, "airflow/ui/dist/index.html") is None
    assert tree_to_wheels("airflow-core/src/airflow/ui/src/main.tsx", [CORE]) == []
    assert tree_to_wheels("airflow-core/src/airflow/models/dag.py", [CORE]) == [(CORE, "airflow/models/dag.py")]
    assert is_generated("airflow-core/src/airflow/ui/openapi-gen/requests/types.gen.ts")
    assert not is_generated("airflow-core/src/airflow/ui/src/main.tsx")


def test_installed_core_ships_the_dist_built_from_the_patched_source() -> None:
    dist = importlib.metadata.distribution("apache-airflow-core")
    manifest = json.loads(dist.read_text("patchset.json"))
    assert manifest["ui_source_key"] == ui.source_key(TREE)
    ui_dist = Path(str(dist.locate_file("airflow/ui/dist")))
    index = (ui_dist / "index.html").read_text()
    bundles = re.findall(r'src="\./static/assets/([^"]+\.js)"', index)
    assert bundles, index
    code = "".join(p.read_text(errors="replace") for p in (ui_dist / "assets").glob("*.js"))
    # Strings only the patched source has: the badge's test id and the new column's accessor.
    assert "failure-cause-badge" in code
    assert "infra-retries" in code


def test_second_build_with_unchanged_ui_uses_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the UI source unchanged (the install built it), build_dist() runs no tool: no rebuild."""
    ran: list[str] = []
    real_run = ui._run

    def recording_run(tc, cwd, *args, **kwargs):
        ran.append(kwargs.get("what") or " ".join(map(str, args)))
        return real_run(tc, cwd, *args, **kwargs)

    monkeypatch.setattr(ui, "_run", recording_run)
    cached = ui.ui_cache() / "dist" / ui.source_key(TREE)
    marker = next(p for p in (cached / "index.html", cached / ".vite" / "manifest.json") if p.exists())
    built_at = marker.stat().st_mtime_ns
    dist = ui.build_dist(TREE)
    assert ran == [], f"ui/dist was rebuilt although the UI source is unchanged: {ran}"
    assert marker.stat().st_mtime_ns == built_at
    assert dist == cached
    assert dist.parent == ui.ui_cache() / "dist"
    assert dist.name == ui.source_key(TREE)


@pytest.mark.timeout(900)
def test_vitest_of_the_changed_components_passes() -> None:
    proc = ui.vitest(TREE, VITEST_FILES)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    summary = re.search(r"Tests\s+(\d+) passed", re.sub(r"\x1b\[[0-9;]*m", "", output))
    assert summary and int(summary.group(1)) >= 10, output[-3000:]
