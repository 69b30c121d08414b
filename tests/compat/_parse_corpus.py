"""
Parse and serialize the example Dags a venv ships, through the Dag processor's own code; print JSON.

Run with a venv's interpreter (``<venv>/bin/python _parse_corpus.py OUT.json``): the build of that
venv parses every file, so the patched and the unpatched build each use their own code. For every
Python file under ``airflow/example_dags`` and under every ``example_dags`` directory of an installed
provider (``airflow/providers/**/example_dags``) it calls ``airflow.dag_processing.processor._parse_file``
with a ``DagFileParseRequest``, the function the Dag processor's parsing subprocess runs on each file
(``_parse_file_entrypoint``): ``BundleDagBag`` runs the file, ``_serialize_dags`` turns each Dag into
``DagSerialization.to_dict`` data in a ``LazyDeserializedDAG``, which is what the Dag processor
manager writes with ``SerializedDagModel.write_dag``. The output holds, per file, the serialized
data of each Dag and the import errors, with what names the venv itself replaced so that two venvs
compare: its site-packages (``<site>``), its prefix (``<venv>``: an ``ExternalPythonOperator`` of
``sys.executable``) and the hash of the file's path in the module name the Dag bag gives the file.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path


def corpus(site: Path) -> dict[str, list[Path]]:
    """The example Dag files per distribution: core's ``airflow/example_dags`` and each provider's."""
    found: dict[str, list[Path]] = {"core": sorted((site / "airflow" / "example_dags").rglob("*.py"))}
    providers = site / "airflow" / "providers"
    for provider_dir in sorted(
        p for p in providers.rglob("*") if p.is_dir() and (p / "__init__.py").exists()
    ):
        if provider_dir.name != "example_dags":
            continue
        # airflow/providers/cncf/kubernetes/example_dags -> cncf.kubernetes
        name = ".".join(provider_dir.relative_to(providers).parts[:-1])
        found.setdefault(f"provider:{name}", []).extend(sorted(provider_dir.rglob("*.py")))
    return found


def installed_providers(site: Path) -> list[str]:
    """The provider distributions of the venv (their example Dags, or that they ship none, are reported)."""
    from importlib.metadata import distributions

    return sorted(
        d.metadata["Name"].lower().replace("_", "-")
        for d in distributions()
        if (d.metadata["Name"] or "").lower().replace("_", "-").startswith("apache-airflow-providers-")
    )


def main(out: Path) -> None:
    import structlog

    import airflow
    from airflow.dag_processing.processor import DagFileParseRequest, _parse_file

    site = Path(airflow.__file__).resolve().parents[1]
    log = structlog.get_logger(logger_name="compat-corpus")

    def normalize(value):
        text = json.dumps(value, default=str).replace(str(site), "<site>").replace(sys.prefix, "<venv>")
        # The module name the Dag bag gives a Dag file holds a hash of the file's path (``_task_module``).
        return json.loads(re.sub(r"unusual_prefix_[0-9a-f]{40}_", "unusual_prefix_<path-hash>_", text))

    files: dict[str, dict] = {}
    started = time.monotonic()
    for group, paths in corpus(site).items():
        for path in paths:
            rel = path.relative_to(site).as_posix()
            entry: dict = {"group": group, "dags": {}, "import_errors": {}, "crashed": None}
            try:
                result = _parse_file(
                    DagFileParseRequest(file=os.fspath(path), bundle_path=site, bundle_name="compat"), log
                )
            except BaseException as e:  # a file that breaks the processor itself is a finding too
                entry["crashed"] = f"{type(e).__name__}: {e}"
            else:
                if result is not None:
                    for lazy in result.serialized_dags:
                        entry["dags"][lazy.dag_id] = normalize(lazy.data)
                    entry["import_errors"] = normalize(dict(result.import_errors))
            files[rel] = entry
    out.write_text(
        json.dumps(
            {
                "version": airflow.__version__,
                "site": str(site),
                "providers": installed_providers(site),
                "seconds": round(time.monotonic() - started, 1),
                "files": files,
            },
            indent=1,
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
