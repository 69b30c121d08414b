"""
Compatibility corpus (issue 36 §1): every example Dag the pinned wheels ship parses and serializes
in the patched build exactly as in the line's unpatched release, but for the documented additions.

The corpus is what the line's pinned wheels install: core's ``airflow/example_dags`` and every
``example_dags`` directory of the providers (standard ships its own; celery, cncf.kubernetes and
amazon ship none in the pinned versions, which the test checks too, so that a provider release that
starts shipping some is picked up). ``_parse_corpus.py`` runs once in each venv (the session's
patched venv, ``.venv`` or ``.venv-3.4``, and the machine's unpatched venv of the line with every
pinned provider, ``pstool.unpatched``): it parses each file with the Dag processor's own
``_parse_file`` (``BundleDagBag``, then ``DagSerialization.to_dict`` into ``LazyDeserializedDAG``)
and writes each Dag's serialized data and each file's import errors.

Then, per file and per Dag:

* a Dag the unpatched build serializes must be serialized by the patched build, with the same data
  except the keys of :data:`ALLOWED_ADDITIONS` on a serialized task (each a documented addition);
* a file that fails to import in both builds is equal whatever the messages say (an example Dag may
  need a provider or an extra neither venv has);
* a file that fails in one build only, a Dag only one build serializes, and any other difference
  fail the test, listed in full.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import harness

from lines import LINE

HERE = Path(__file__).resolve().parent

#: Keys the patch set adds to a serialized operator, and where each is documented. Only a task's
#: dictionary may carry them, and only in the patched build.
ALLOWED_ADDITIONS = {
    # AIP-docs/AIP-122-infrastructure-retries.md, "The operator argument is serialized with the Dag
    # (`max_infra_retries` in the serialized-Dag JSON ...)" (aip-122 0003).
    "max_infra_retries": "AIP-docs/AIP-122-infrastructure-retries.md",
    # AIP-docs/retry-rules-and-causes.md: a retry_policy's RetryRule(cause=...) rules are serialized
    # "as `retry_rules` on the serialized operator" (retry-rules 0001).
    "retry_rules": "AIP-docs/retry-rules-and-causes.md",
    # AIP-docs/AIP-122-infrastructure-retries.md: "with retry-rules `infra_retry_delay`,
    # `max_infra_retry_delay`", read by the scheduler's serialized operators (retry-rules 0003).
    "infra_retry_delay": "AIP-docs/AIP-122-infrastructure-retries.md",
    "max_infra_retry_delay": "AIP-docs/AIP-122-infrastructure-retries.md",
}

#: The providers whose example Dags the corpus holds (issue 36 §1: core and the four providers).
PROVIDERS = {
    "apache-airflow-providers-standard",
    "apache-airflow-providers-celery",
    "apache-airflow-providers-cncf-kubernetes",
    "apache-airflow-providers-amazon",
}


def _env(home: Path, dags_folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    home.mkdir(parents=True)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            # One Dags folder for both builds: the serialized Dag records it (``_processor_dags_folder``).
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "PYTHONDONTWRITEBYTECODE": "1",
            # Upstream serializes some operators' template_fields in the order of a set of strings,
            # which string hashing randomizes per process: one seed makes two runs comparable.
            "PYTHONHASHSEED": "0",
        }
    )
    return env


def parse_in(venvs: dict[str, Path], tmp_path: Path) -> dict[str, dict]:
    """Run ``_parse_corpus.py`` in each venv at once (one subprocess each); return their outputs."""
    procs = {}
    for name, venv in venvs.items():
        out = tmp_path / f"{name}.json"
        procs[name] = (
            subprocess.Popen(
                [str(venv / "bin" / "python"), str(HERE / "_parse_corpus.py"), str(out)],
                env=_env(tmp_path / f"home-{name}", tmp_path / "dags"),
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            ),
            out,
        )
    results = {}
    for name, (proc, out) in procs.items():
        output, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, (
            f"{name} build ({venvs[name]}) could not parse the corpus:\n{output[-4000:]}"
        )
        results[name] = json.loads(out.read_text())
    return results


def diff(old, new, path: str = "") -> list[str]:
    """The differences between two serialized values, each as a line naming its JSON path."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        is_task = "task_id" in new and "_task_type" in new
        for key in sorted(old.keys() | new.keys()):
            where = f"{path}.{key}"
            if key not in new:
                found.append(f"{where}: removed (was {json.dumps(old[key])[:200]})")
            elif key not in old:
                if not (is_task and key in ALLOWED_ADDITIONS):
                    found.append(f"{where}: added {json.dumps(new[key])[:200]}")
            else:
                found.extend(diff(old[key], new[key], where))
        return found
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        found = []
        for i, (a, b) in enumerate(zip(old, new)):
            found.extend(diff(a, b, f"{path}[{i}]"))
        return found
    if old != new:
        return [f"{path}: {json.dumps(old)[:200]} -> {json.dumps(new)[:200]}"]
    return []


def compare(unpatched: dict, patched: dict) -> list[str]:
    """Every difference between the two builds' parse of the corpus that is not allowed."""
    problems = []
    for rel in sorted(unpatched["files"].keys() | patched["files"].keys()):
        old, new = unpatched["files"].get(rel), patched["files"].get(rel)
        if old is None or new is None:
            problems.append(f"{rel}: shipped by the {'patched' if old is None else 'unpatched'} build only")
            continue
        for name, entry in (("unpatched", old), ("patched", new)):
            if entry["crashed"]:
                problems.append(
                    f"{rel}: the Dag processor's parse raised in the {name} build: {entry['crashed']}"
                )
        old_failed, new_failed = bool(old["import_errors"]), bool(new["import_errors"])
        if new_failed and not old_failed:
            problems.append(
                f"{rel}: parses unpatched, import error patched:\n"
                + "\n".join(new["import_errors"].values())[-3000:]
            )
        elif old_failed and not new_failed:
            problems.append(f"{rel}: import error unpatched, parses patched")
        for dag_id in sorted(old["dags"].keys() | new["dags"].keys()):
            if dag_id not in new["dags"]:
                problems.append(f"{rel}: Dag {dag_id} serialized unpatched, not patched")
            elif dag_id not in old["dags"]:
                problems.append(f"{rel}: Dag {dag_id} serialized patched, not unpatched")
            else:
                problems.extend(
                    f"{rel}: {dag_id}{line}" for line in diff(old["dags"][dag_id], new["dags"][dag_id])
                )
    return problems


def test_diff_allows_only_the_documented_additions_on_a_task():
    task = {"task_id": "t", "_task_type": "BashOperator", "retries": 1}
    assert diff({"dag": {"tasks": [task]}}, {"dag": {"tasks": [{**task, "max_infra_retries": 2}]}}) == []
    assert diff({"dag": {"tasks": [task]}}, {"dag": {"tasks": [{**task, "retries": 2}]}}) == [
        ".dag.tasks[0].retries: 1 -> 2"
    ]
    assert diff({"dag": {"tasks": [task]}}, {"dag": {"tasks": [{**task, "surprise": 1}]}}) == [
        ".dag.tasks[0].surprise: added 1"
    ]
    # An allowed name outside a task is not allowed.
    assert diff({"dag": {}}, {"dag": {"retry_rules": []}}) == [".dag.retry_rules: added []"]


def test_example_dags_parse_and_serialize_alike(tmp_path):
    venvs = {"unpatched": harness.unpatched_venv(providers=True, line=LINE), "patched": Path(sys.prefix)}
    results = parse_in(venvs, tmp_path)
    unpatched, patched = results["unpatched"], results["patched"]
    assert unpatched["version"] != patched["version"] or unpatched["site"] != patched["site"]
    for name, result in results.items():
        assert PROVIDERS <= set(result["providers"]), f"{name} build lacks a provider: {result['providers']}"

    # The corpus is real: core's example Dags, and standard's; the others ship none today.
    groups: dict[str, int] = {}
    for entry in unpatched["files"].values():
        groups[entry["group"]] = groups.get(entry["group"], 0) + 1
    assert groups.get("core", 0) >= 40, groups
    assert groups.get("provider:standard", 0) >= 15, groups
    serialized = sum(len(entry["dags"]) for entry in unpatched["files"].values())
    assert serialized >= 50, f"only {serialized} Dags serialized unpatched"

    problems = compare(unpatched, patched)
    assert not problems, (
        f"{len(problems)} difference(s) between the unpatched and the patched build:\n" + "\n".join(problems)
    )
