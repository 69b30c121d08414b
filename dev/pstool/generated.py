"""Generated files: re-run upstream's generators and compare.

- ``task-sdk/src/airflow/sdk/api/datamodels/_generated.py``: upstream's
  ``task-sdk/dev/generate_task_sdk_models.py`` (datamodel-codegen 0.77.0 against the patched
  Execution API's OpenAPI document).
  then ``ruff format``, as upstream's prek hooks do.
- ``.../core_api/openapi/v2-rest-api-generated.yaml`` and the UI's ``_private_ui.yaml``:
  ``dev/generate_rest_api_spec.py``, the same procedure as upstream's in-container generator.
- ``airflow-core/src/airflow/ui/openapi-gen/``: the UI's TypeScript client, from the two REST specs
  with upstream's own ``pnpm codegen`` (openapi-merge-cli + openapi-react-query-codegen, pinned by
  the UI's pnpm-lock.yaml; see ``pstool.ui``). It needs no venv, only the specs.
- ``task-sdk/.../execution_time/schema/schema.json``: ``dev/dump_supervisor_schemas.py``, the same
  document as upstream's ``generate-supervisor-schemas-snapshot`` hook.

Both import Airflow, so they run in a venv holding wheels built from the same series. The tree
lacks two repository files the SDK generator reads (the root ruff/black settings and the license
template); ``dev/generator-root`` supplies them while it runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from pstool import PatchsetError, stamps
from pstool.build import applied_patches
from pstool.git import out
from pstool.lines import generator_options
from pstool.paths import CURRENT, ROOT, machine_cache_dir, tree_dir, venv_dir

SDK_MODELS = "task-sdk/src/airflow/sdk/api/datamodels/_generated.py"
REST_SPEC = "airflow-core/src/airflow/api_fastapi/core_api/openapi/v2-rest-api-generated.yaml"
UI_SPEC = "airflow-core/src/airflow/api_fastapi/core_api/openapi/_private_ui.yaml"
SUPERVISOR_SCHEMA = "task-sdk/src/airflow/sdk/execution_time/schema/schema.json"
GENERATED = (SDK_MODELS, REST_SPEC, UI_SPEC, SUPERVISOR_SCHEMA)
GENERATOR_ROOT = ROOT / "dev" / "generator-root"
# The stamps of passed checks (pstool.stamps), by check.
SERIES_CHECK = "generators-reproduce-series"
SELECTION_CHECK = "generators-reproduce-selection"


def _installed_patch_ids(venv: Path) -> list[str]:
    code = (
        "import json, importlib.metadata as m\n"
        "d = m.distribution('apache-airflow-core')\n"
        "t = d.read_text('patchset.json')\n"
        "print(json.dumps([p['patch_id'] for p in json.loads(t)['patches']] if t else []))\n"
    )
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        raise PatchsetError(f"cannot read the installed core's manifest in {venv}: {proc.stderr[-500:]}")
    return json.loads(proc.stdout)


def _run(cmd: list[str], cwd: Path, venv: Path, home: Path, pythonpath: str | None = None) -> str:
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '')}", "AIRFLOW_HOME": str(home)}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise PatchsetError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def run_generators(tree: Path, venv: Path, *, from_source: bool = False) -> None:
    """Regenerate the generated files in ``tree`` (its working copy changes; nothing is committed).

    With ``from_source`` the generators import Airflow from the tree's own ``airflow-core/src`` and
    ``task-sdk/src`` (ahead of the venv's installed copy), so a selection of the series that no
    venv holds (a feature alone) is checked without building and installing it.
    """
    pythonpath = f"{tree / 'airflow-core/src'}:{tree / 'task-sdk/src'}" if from_source else None
    placed = []
    for item in GENERATOR_ROOT.iterdir():
        target = tree / item.name
        if target.exists():
            raise PatchsetError(f"{target} exists; refusing to overwrite it with generator settings")
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, target)
        placed.append(target)
    home = Path(tempfile.mkdtemp(prefix="pstool-gen-home-"))
    try:
        py = str(venv / "bin" / "python")
        _run([py, "dev/generate_task_sdk_models.py"], tree / "task-sdk", venv, home, pythonpath)
        _run([str(venv / "bin" / "ruff"), "format", "--quiet", SDK_MODELS], tree, venv, home)
        # Validated where the specs are made for the series (regenerate, the full series' check); a
        # run from a tree's source (pristine upstream, a feature alone) only compares their bytes.
        rest = [py, str(ROOT / "dev" / "generate_rest_api_spec.py"), *(["--no-validate"] if from_source else []), str(tree)]
        _run(rest, home, venv, home, pythonpath)
        dump = [py, str(ROOT / "dev" / "dump_supervisor_schemas.py")]
        if generator_options().get("supervisor_typed_json_value"):
            dump.append("--typed-json-value")
        schema = _run(dump, home, venv, home, pythonpath)
        (tree / SUPERVISOR_SCHEMA).write_text(schema)
    finally:
        for target in placed:
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        shutil.rmtree(home, ignore_errors=True)


def _tree_ids(tree: Path) -> list[str]:
    """The git tree ids, at ``tree``'s HEAD, of what the generators read and write."""
    return [out(tree, "rev-parse", f"HEAD:{d}") for d in ("airflow-core", "task-sdk", "shared")]


def check_generated(tree: Path, touched: list[str]) -> list[str]:
    """Fail unless every generated file the series touches is what the generator produces."""
    from pstool import ui
    from pstool.layout import UI_CLIENT_DIR

    unknown = [p for p in touched if p not in GENERATED and not p.startswith(UI_CLIENT_DIR)]
    if unknown:
        raise PatchsetError(f"no generator is known for {', '.join(unknown)}")
    venv = venv_dir()
    series_ids = [p["patch_id"] for p in applied_patches(tree)]
    key = stamps.key("full series", *_tree_ids(tree), repr(sorted(touched)), repr(sorted(generator_options().items())))
    if stamps.passed(SERIES_CHECK, key):
        return [f"generated files reproduce upstream's generators (passed on this machine for this series: {key[:12]})"]
    if _installed_patch_ids(venv) != series_ids:
        raise PatchsetError(
            f"{venv} does not hold wheels built from this series; run `make install` first "
            "(the generators import the patched Airflow)"
        )
    run_generators(tree, venv)
    dirty = out(tree, "status", "--porcelain", "--", *GENERATED)
    if dirty:
        diff = out(tree, "diff", "--stat", "--", *GENERATED)
        raise PatchsetError(f"generated files differ from what the generators produce:\n{diff}")
    report = [f"generator reproduces {p}" for p in touched if not p.startswith(UI_CLIENT_DIR)]
    if any(p in (REST_SPEC, UI_SPEC) or p.startswith(UI_CLIENT_DIR) for p in touched):
        # The REST specs are what the UI's client is generated from: a spec change needs the
        # regenerated client in the same patch (upstream's prek hook does the same).
        stale = ui.client_differs(tree)
        if stale:
            raise PatchsetError(
                "the UI's TypeScript client (openapi-gen/) is not what `pnpm codegen` makes of the patched "
                f"REST specs; run `pstool regenerate` and commit it with the spec change: {', '.join(stale[:8])}"
            )
        report.append(f"pnpm codegen reproduces {UI_CLIENT_DIR}")
    stamps.record(SERIES_CHECK, key, "; ".join(report))
    return report


def selection_key(tree: Path) -> str:
    """The stamp key of :func:`check_generated_from_source` on ``tree``: the git tree ids of what the
    generators read and write (core, task-sdk, shared libraries) and the generator settings, in
    this environment (:func:`pstool.stamps.environment_key`)."""
    return stamps.key("selection", *_tree_ids(tree), repr(sorted(generator_options().items())))


def check_generated_from_source(tree: Path, what: str) -> str:
    """Fail unless the generated files in ``tree`` (a selection of the series) are what the
    generators make of that tree's own source (``run_generators(from_source=True)``).

    A pass is stamped on the machine by :func:`selection_key` (:mod:`pstool.stamps`), so selections
    differing only in provider patches, and every later checkout of the same series, check once.
    """
    key = selection_key(tree)
    if stamps.passed(SELECTION_CHECK, key):
        return f"{what}: generated files reproduce from its own source (passed on this machine: {key[:12]})"
    run_generators(tree, venv_dir(), from_source=True)
    dirty = out(tree, "status", "--porcelain", "--", *GENERATED)
    if dirty:
        diff = out(tree, "diff", "--stat", "--", *GENERATED)
        raise PatchsetError(f"{what}: generated files differ from what the generators make of its source:\n{diff}")
    stamps.record(SELECTION_CHECK, key, f"{what}: generated files reproduce from its own source")
    return f"{what}: generated files reproduce from its own source"


def _pristine_stamp(key: str) -> Path:
    """Where a passed pristine check is recorded: the machine's cache (``pstool.paths.machine_cache_dir``).

    The check's inputs are pinned upstream files (the sdists, wheels and constraints of the lock)
    and the generator code, all in ``_pristine_key``; no file of the series is among them, so its
    result holds for every checkout of the same pins and generators on this machine, like the
    unpatched venvs. What the series changes is still generated and compared in every checkout.
    """
    return machine_cache_dir() / "checks" / f"generators-reproduce-pristine-{key}"


def _pristine_key() -> str:
    """What the pristine check depends on: the line's pins, its generator settings, the Python and
    the generator code (this module, the UI's codegen driver, the scripts and generator-root)."""
    import sys

    from pstool import ui
    from pstool.lock import load_lock
    from pstool.venv import CONSTRAINTS

    lock = load_lock()
    parts = [repr((lock.commit, lock.wheels, lock.sources)), repr(sorted(generator_options().items())), sys.version]
    parts += [hashlib.sha256(p.read_bytes()).hexdigest() for p in (CONSTRAINTS, Path(__file__), Path(ui.__file__))]
    parts += [hashlib.sha256((ROOT / "dev" / n).read_bytes()).hexdigest() for n in ("generate_rest_api_spec.py", "dump_supervisor_schemas.py")]
    parts += [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(GENERATOR_ROOT.rglob("*")) if p.is_file()]
    return hashlib.sha256(" ".join(parts).encode()).hexdigest()[:20]


def check_pristine(*, use_cache: bool = True) -> str:
    """Fail unless the generators, run on the line's PRISTINE upstream tree (no patch), reproduce
    upstream's generated files byte for byte: the task-sdk models, both REST specs, the UI client
    and the supervisor schema. This is what proves the line's generator environment (its
    constraints and ``[generators]`` settings) before any patch's generated file is trusted.
    """
    from pstool import ui
    from pstool.layout import UI_CLIENT_DIR
    from pstool.tree import scratch_tree

    key = _pristine_key()
    stamp = _pristine_stamp(key)
    if use_cache and stamp.exists():
        return f"generators reproduce pristine upstream's generated files (checked on this machine for these pins: {key[:12]})"
    tree = scratch_tree()
    try:
        run_generators(tree, venv_dir(), from_source=True)
        ui.codegen(tree)
        dirty = out(tree, "status", "--porcelain", "--", *GENERATED, UI_CLIENT_DIR)
        if dirty:
            diff = out(tree, "diff", "--", *GENERATED, UI_CLIENT_DIR)
            raise PatchsetError(
                "on pristine upstream the generators do not reproduce upstream's generated files "
                f"(fix the line's generator environment first):\n{dirty}\n{diff[:4000]}"
            )
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps({"key": key, "line": CURRENT.line}) + "\n")
    return f"generators reproduce pristine upstream's generated files byte for byte ({len(GENERATED)} files and {UI_CLIENT_DIR})"


def regenerate(tree: Path | None = None) -> None:
    """Re-run the generators in ``tree`` against the venv (install the tree's wheels first)."""
    from pstool import ui
    from pstool.layout import UI_CLIENT_DIR

    tree = (tree or tree_dir()).resolve()  # the REST generator runs in another directory
    run_generators(tree, venv_dir())
    ui.codegen(tree)  # after the REST specs: the client is generated from them
    changed = out(tree, "status", "--short", "--", *GENERATED, UI_CLIENT_DIR)
    print(changed or "generated files unchanged")
