# Licensed to the Apache Software Foundation (ASF) under one
# or more contributor license agreements.  See the NOTICE file
# distributed with this work for additional information
# regarding copyright ownership.  The ASF licenses this file
# to you under the Apache License, Version 2.0 (the
# "License"); you may not use this file except in compliance
# with the License.  You may obtain a copy of the License at
#
#   http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing,
# software distributed under the License is distributed on an
# "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY
# KIND, either express or implied.  See the License for the
# specific language governing permissions and limitations
# under the License.
"""``make release`` (``pstool release``) and what names a release (issue 38, "releases a platform team
can name"): the label moves on both lines, CHANGELOG.md gets the newsfragments and the series diff, the
commit is tagged per line, and ``make image`` refuses a released label from another series.

Every test runs the real ``pstool release`` in a throwaway git repository holding a copy of this
checkout's ``dev/`` and ``lines/`` (the real series of both lines); this repository is never changed.
The labels are read from the locks, never written here: a release of this repository breaks no test.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.line_independent  # the release covers every line at once

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "dev") not in sys.path:
    sys.path.insert(0, str(REPO / "dev"))

from pstool.lock import load_lock, local_version  # noqa: E402
from pstool.paths import known_lines  # noqa: E402
from pstool.release import added_files  # noqa: E402
from pstool.releases import series_hash  # noqa: E402

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@localhost",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@localhost",
}


class Clone:
    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PATCHSET_", "GIT_"))}
        env.update(GIT_ENV, PYTHONPATH=str(self.root / "dev"), PATCHSET_LINE="3.3")
        return env

    def git(self, *args: str) -> str:
        return subprocess.run(["git", *args], cwd=self.root, env=self.env, check=True, capture_output=True, text=True).stdout

    def pstool(self, *args: str, line: str = "3.3") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pstool", *args],
            cwd=self.root,
            env={**self.env, "PATCHSET_LINE": line},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    def label(self, line: str) -> str:
        return local_version(self.root / "lines" / line / "upstream.lock")

    def patches(self, line: str) -> Path:
        return self.root / "lines" / line / "patches"

    def commit_all(self, message: str) -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)


@pytest.fixture
def clone(tmp_path: Path) -> Clone:
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copytree(REPO / "dev", root / "dev", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "lines", root / "lines")
    (root / "lines" / "releases.toml").unlink(missing_ok=True)
    clone = Clone(root)
    clone.git("init", "-q", "-b", "main")
    clone.commit_all("The patch set")
    return clone


def bump(label: str, by: int = 1) -> str:
    return f"ps.{int(label.split('.')[1]) + by}"


def test_a_release_bumps_both_lines_commits_and_tags(clone: Clone) -> None:
    before = {line: clone.label(line) for line in known_lines()}
    assert len(set(before.values())) == 1
    new = bump(before["3.3"])
    proc = clone.pstool("release", "--date", "2026-12-04")
    assert proc.returncode == 0, proc.stderr
    assert {line: clone.label(line) for line in known_lines()} == dict.fromkeys(known_lines(), new)
    assert clone.git("status", "--porcelain") == ""
    assert clone.git("log", "-1", "--format=%s").startswith(f"Release {new}: ")
    changed = clone.git("show", "--name-only", "--format=", "HEAD").split()
    assert sorted(changed) == ["CHANGELOG.md", "lines/3.3/upstream.lock", "lines/3.4/upstream.lock", "lines/releases.toml"]
    head = clone.git("rev-parse", "HEAD").strip()
    tags = [f"v{load_lock(clone.root / 'lines' / line / 'upstream.lock').release}-{new}" for line in known_lines()]
    assert tags == [f"v3.3.2-{new}", f"v3.4.0b2-{new}"]
    for tag in tags:
        assert clone.git("rev-parse", f"{tag}^{{commit}}").strip() == head
        assert clone.git("cat-file", "-t", tag).strip() == "tag"  # annotated
    record = tomllib.loads((clone.root / "lines" / "releases.toml").read_text())["release"]
    assert record == [
        {
            "label": new,
            "date": "2026-12-04",
            "tags": tags,
            "series": {line: series_hash(clone.patches(line)) for line in known_lines()},
        }
    ]


def test_the_changelog_entry_lists_newsfragments_per_feature_and_the_series_diff(clone: Clone) -> None:
    first = bump(clone.label("3.3"))
    assert clone.pstool("release", "--date", "2026-12-04").returncode == 0
    changelog = (clone.root / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog\n")
    assert f"## {first} (2026-12-04)" in changelog
    for line in known_lines():
        assert f"`{series_hash(clone.patches(line))}`" in changelog
    # Every newsfragment a patch adds is there, under its feature's heading.
    series = [n for n in (clone.patches("3.3") / "series").read_text().splitlines() if n and not n.startswith("#")]
    fragments = 0
    for name in series:
        patch = clone.patches("3.3") / name.split()[0]
        for path in added_files(patch.read_bytes()):
            if "/newsfragments/" in path:
                feature = name.split("/", 1)[0]
                section = changelog.split(f"**{feature}**", 1)[1].split("\n**", 1)[0]
                assert f"`{path.rsplit('/', 1)[1]}`" in section, (feature, path)
                fragments += 1
    assert fragments > 5
    assert "### Series (the first release by `make release`: the whole series)" in changelog
    assert not [row for row in changelog.splitlines() if row != row.rstrip()]  # no trailing whitespace

    # The next release: one patch changed, one added, one removed on 3.3; nothing on 3.4.
    patches = clone.patches("3.3")
    entries = (patches / "series").read_text().splitlines()
    names = [e.split()[0] for e in entries if e and not e.startswith("#")]
    changed, removed = names[0], names[-1]
    text = (patches / changed).read_text()
    (patches / changed).write_text(text.replace("\n\n", "\n\nReworded.\n\n", 1))
    (patches / removed).unlink()
    added = changed.rsplit("/", 1)[0] + "/0099-a-copy.patch"
    shutil.copy2(patches / changed, patches / added)
    kept = [e for e in entries if not e.startswith(removed)]
    kept.insert(kept.index(next(e for e in kept if e.startswith(changed))) + 1, added)
    (patches / "series").write_text("\n".join(kept) + "\n")
    clone.commit_all("Change the 3.3 series")
    second = bump(first)
    proc = clone.pstool("release", "--date", "2026-12-05")
    assert proc.returncode == 0, proc.stderr
    changelog = (clone.root / "CHANGELOG.md").read_text()
    assert changelog.index(f"## {second} (2026-12-05)") < changelog.index(f"## {first} (2026-12-04)")
    entry = changelog.split(f"## {second}", 1)[1].split(f"## {first}", 1)[0]
    assert f"### Series since {first} (`v3.3.2-{first}`)" in entry
    diff_33 = entry.split("**3.3**:", 1)[1].split("**3.4**:", 1)[0]
    assert f"- added: `{added}`" in diff_33
    assert f"- changed: `{changed}`" in diff_33
    assert f"- removed: `{removed}`" in diff_33
    assert entry.split("**3.4**:", 1)[1].strip().startswith("- no patch changed")


def test_an_image_of_a_released_label_from_another_series_is_refused(clone: Clone) -> None:
    label = bump(clone.label("3.3"))
    assert clone.pstool("release").returncode == 0
    probe = "from pstool.releases import check_label; print(check_label('3.3'))"
    ok = subprocess.run([sys.executable, "-c", probe], cwd=clone.root, env=clone.env, capture_output=True, text=True)
    assert ok.returncode == 0 and f"{label} released from this series" in ok.stdout, ok.stderr
    patch = next(clone.patches("3.3").rglob("*.patch"))
    patch.write_text(patch.read_text().replace("\n\n", "\n\nChanged after the release.\n\n", 1))
    proc = clone.pstool("image", "--no-wheels", line="3.3")
    assert proc.returncode == 1
    assert f"the label {label} was released on" in proc.stderr and "from another 3.3 series" in proc.stderr
    assert "make release" in proc.stderr
    # The other line's series did not change: its label is still its released series'.
    other = subprocess.run(
        [sys.executable, "-c", probe.replace("'3.3'", "'3.4'")], cwd=clone.root, env=clone.env, capture_output=True, text=True
    )
    assert other.returncode == 0, other.stderr


def test_an_unreleased_label_builds(clone: Clone) -> None:
    probe = "from pstool.releases import check_label; print(check_label('3.3'))"
    proc = subprocess.run([sys.executable, "-c", probe], cwd=clone.root, env=clone.env, capture_output=True, text=True)
    assert proc.returncode == 0 and "is not released yet" in proc.stdout, proc.stderr


def test_a_dirty_tree_or_differing_labels_are_refused(clone: Clone) -> None:
    (clone.root / "stray.txt").write_text("x")
    proc = clone.pstool("release")
    assert proc.returncode == 1 and "uncommitted changes" in proc.stderr
    (clone.root / "stray.txt").unlink()
    lock = clone.root / "lines" / "3.4" / "upstream.lock"
    label = clone.label("3.4")
    lock.write_text(re.sub(r'^local_version = ".*"$', f'local_version = "{bump(label, 5)}"', lock.read_text(), flags=re.M))
    clone.commit_all("Skew the labels")
    proc = clone.pstool("release")
    assert proc.returncode == 1 and "the lines' labels differ" in proc.stderr
    assert clone.git("tag", "--list") == ""


def test_a_dry_run_prints_the_entry_and_changes_nothing(clone: Clone) -> None:
    head = clone.git("rev-parse", "HEAD")
    proc = clone.pstool("release", "--dry-run", "--date", "2026-12-04")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"## {bump(clone.label('3.3'))} (2026-12-04)")
    assert clone.git("rev-parse", "HEAD") == head and clone.git("status", "--porcelain") == ""
    assert clone.git("tag", "--list") == ""
