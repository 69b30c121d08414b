"""
The Execution API route POST /execution/asset-events against the real api-server and database.

Covers provenance from the token, the receipt, idempotency (sequential, 20 concurrent requests,
and a transport failure injected after the commit followed by the SDK client's own retry),
every bad-input case (nothing persisted), the body not being able to spoof the source, the
Cadwyn version gate, and that the REST API lists the events with their source.
"""

from __future__ import annotations

import threading
import uuid
from datetime import datetime

import pytest

from lines import DEFAULT_LINE, LINE

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

ASSET = "emit_test_api_target"


def _key_rows(idempotency_key: str) -> int:
    from sqlalchemy import func, select

    from airflow.models.asset_event_idempotency import AssetEventIdempotencyKey
    from airflow.utils.session import create_session

    with create_session() as session:
        return session.scalar(
            select(func.count()).where(AssetEventIdempotencyKey.idempotency_key == idempotency_key)
        )


def test_emit_persists_event_with_the_callers_provenance(stack, seed_ti):
    token = stack.token_for(seed_ti["id"])
    key = f"route-{uuid.uuid4()}"
    resp = stack.emit(
        token,
        {
            "name": ASSET,
            "uri": ASSET,
            "partition_key": "p-1",
            "partition_date": "2026-11-30T00:00:00+00:00",
            "extra": {"rows": 10},
            "idempotency_key": key,
        },
    )
    assert resp.status_code == 201, resp.text
    receipt = resp.json()
    assert receipt["deduplicated"] is False
    assert receipt["asset_name"] == ASSET and receipt["asset_uri"] == ASSET
    assert receipt["partition_key"] == "p-1"
    assert receipt["idempotency_key"] == key
    assert datetime.fromisoformat(receipt["timestamp"]).tzinfo is not None

    [event] = [e for e in stack.events(ASSET) if e["id"] == receipt["id"]]
    assert event["source_dag_id"] == seed_ti["dag_id"]
    assert event["source_task_id"] == seed_ti["task_id"]
    assert event["source_run_id"] == seed_ti["run_id"]
    assert event["source_map_index"] == -1
    assert event["extra"] == {"rows": 10}

    # The public REST API lists it with its source.
    asset_id = stack.rest("GET", "/assets", params={"name_pattern": ASSET}).json()["assets"][0]["id"]
    listed = stack.rest("GET", "/assets/events", params={"asset_id": asset_id, "limit": 100}).json()
    [rest_event] = [e for e in listed["asset_events"] if e["id"] == receipt["id"]]
    assert (rest_event["source_dag_id"], rest_event["source_task_id"], rest_event["source_run_id"]) == (
        seed_ti["dag_id"],
        seed_ti["task_id"],
        seed_ti["run_id"],
    )
    assert rest_event["partition_key"] == "p-1"

    # Asset names alone and URIs alone address the asset too.
    by_name = stack.emit(token, {"name": ASSET, "idempotency_key": f"{key}-name"})
    by_uri = stack.emit(token, {"uri": ASSET, "idempotency_key": f"{key}-uri"})
    assert by_name.status_code == by_uri.status_code == 201


def test_repeated_idempotency_key_returns_the_original_event(stack, seed_ti):
    token = stack.token_for(seed_ti["id"])
    key = f"dedup-{uuid.uuid4()}"
    first = stack.emit(token, {"name": ASSET, "idempotency_key": key, "partition_key": "a"})
    # Same key, different payload: still the original event, nothing new.
    second = stack.emit(token, {"name": ASSET, "idempotency_key": key, "partition_key": "b"})
    assert first.status_code == 201 and second.status_code == 200, (first.text, second.text)
    assert second.json()["deduplicated"] is True
    assert second.json()["id"] == first.json()["id"]
    assert second.json()["partition_key"] == "a"
    assert _key_rows(key) == 1
    fired = [r for r in stack.listener_records() if r["partition_key"] in ("a", "b") and r["asset"] == ASSET]
    assert len(fired) == 1


def test_body_cannot_spoof_the_source(stack, seed_ti):
    token = stack.token_for(seed_ti["id"])
    before = len(stack.events(ASSET))
    resp = stack.emit(
        token,
        {
            "name": ASSET,
            "idempotency_key": f"spoof-{uuid.uuid4()}",
            "source": {"dag_id": "someone_else", "run_id": "r", "task_id": "t"},
        },
    )
    assert resp.status_code == 403, resp.text
    assert resp.json()["detail"]["reason"] == "source_not_allowed"
    assert len(stack.events(ASSET)) == before
    assert not [e for e in stack.events(ASSET) if e["source_dag_id"] == "someone_else"]


def test_token_of_unknown_task_instance_is_refused(stack):
    before = len(stack.events(ASSET))
    resp = stack.emit(stack.token_for(uuid.uuid4()), {"name": ASSET, "idempotency_key": "orphan"})
    if LINE == DEFAULT_LINE:
        assert (resp.status_code, resp.json()["detail"]["reason"]) == (403, "unknown_caller")
    else:
        # 3.4: require_auth's live-attempt check refuses a mutation from a token naming no attempt
        # before the route runs (AIP doc section 9, "HTTP caller without an attempt").
        assert (resp.status_code, resp.json()["detail"]["reason"]) == (404, "not_found"), resp.text
    assert len(stack.events(ASSET)) == before
    assert _key_rows("orphan") == 0


def test_older_api_versions_do_not_have_the_route(stack, seed_ti):
    resp = stack.emit(
        stack.token_for(seed_ti["id"]), {"name": ASSET, "idempotency_key": "old"}, version="2026-06-30"
    )
    assert resp.status_code in (404, 405)
    assert _key_rows("old") == 0


@pytest.fixture(scope="module")
def inactive_asset(stack):
    """An asset row that no Dag declares any more (no asset_active row)."""
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        session.add(AssetModel(name="emit_test_inactive", uri="emit_test_inactive", group="asset", extra={}))
    return "emit_test_inactive"


def _bad_cases(limit: int) -> list:
    return [
        pytest.param({"name": "emit_test_never_declared"}, 404, "asset_not_found", id="unknown-asset"),
        pytest.param({"name": "emit_test_inactive"}, 409, "asset_inactive", id="inactive-asset"),
        pytest.param(
            {"name": ASSET, "partition_key": "k", "partition_date": "2026-01-01T00:00:00"},
            422,
            "naive_partition_date",
            id="naive-partition-date",
        ),
        pytest.param(
            {"name": ASSET, "partition_date": "2026-01-01T00:00:00+00:00"},
            422,
            "partition_date_without_key",
            id="date-without-key",
        ),
        pytest.param({"name": ASSET, "extra": ["not", "an", "object"]}, 422, None, id="extra-not-object"),
        pytest.param(
            {"name": ASSET, "extra": {"blob": "x" * (limit + 1)}},
            413,
            "extra_too_large",
            id="extra-too-large",
        ),
        pytest.param(
            {"name": ASSET, "partition_key": "k" * 251},
            422,
            "partition_key_too_long",
            id="partition-key-too-long",
        ),
        pytest.param(
            {"name": ASSET, "idempotency_key": "i" * 251},
            422,
            "idempotency_key_too_long",
            id="idempotency-key-too-long",
        ),
        pytest.param(
            {"name": ASSET, "partition_key": ""}, 422, "invalid_partition_key", id="empty-partition-key"
        ),
        pytest.param({}, 422, "missing_asset", id="no-asset"),
    ]


@pytest.mark.parametrize(("body", "status", "reason"), _bad_cases(1024))
def test_bad_input_is_rejected_and_nothing_persisted(stack, seed_ti, inactive_asset, body, status, reason):
    key = body.get("idempotency_key") or f"bad-{uuid.uuid4()}"
    before = len(stack.events(ASSET))
    resp = stack.emit(stack.token_for(seed_ti["id"]), {"idempotency_key": key, **body})
    assert resp.status_code == status, resp.text
    if reason:
        assert resp.json()["detail"]["reason"] == reason
        assert resp.json()["detail"]["message"]
    assert len(stack.events(ASSET)) == before
    assert _key_rows(key) == 0


def test_non_json_extra_is_rejected(stack, seed_ti):
    """NaN is not JSON; a body carrying it must not be persisted."""
    import httpx

    key = f"nan-{uuid.uuid4()}"
    resp = httpx.post(
        f"{stack.api_url}/execution/asset-events",
        content=b'{"name": "%s", "idempotency_key": "%s", "extra": {"x": NaN}}'
        % (ASSET.encode(), key.encode()),
        headers={
            "Authorization": f"Bearer {stack.token_for(seed_ti['id'])}",
            "Airflow-API-Version": "2026-11-30",
            "Content-Type": "application/json",
        },
    )
    assert resp.status_code == 422, resp.text
    assert _key_rows(key) == 0


def test_concurrent_emits_with_one_key_create_exactly_one_event(stack, seed_ti):
    token = stack.token_for(seed_ti["id"])
    key = f"concurrent-{uuid.uuid4()}"
    barrier = threading.Barrier(20)
    results: list = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        barrier.wait()
        resp = stack.emit(token, {"name": ASSET, "idempotency_key": key, "extra": {"thread": n}})
        with lock:
            results.append(resp)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    assert len(results) == 20
    assert all(r.status_code in (200, 201) for r in results), [r.text for r in results]
    ids = {r.json()["id"] for r in results}
    assert len(ids) == 1
    assert sum(1 for r in results if not r.json()["deduplicated"]) == 1
    assert sum(1 for r in results if r.status_code == 201) == 1
    [event_id] = ids
    assert [e["id"] for e in stack.events(ASSET) if e["id"] == event_id] == [event_id]
    assert _key_rows(key) == 1
    # The listener fired once, for the created event only.
    fired = [r for r in stack.listener_records() if r["asset"] == ASSET and "thread" in (r["extra"] or {})]
    assert len(fired) == 1


def test_transport_failure_after_commit_is_retried_without_duplicate(stack, seed_ti):
    """The SDK client retries a POST whose response was lost; the server answers with the original."""
    import importlib

    from airflow.sdk.api.client import Client

    # The HTTP library the SDK client is built on (httpx on 3.3, httpx2 on 3.4): its transport
    # and errors are the ones the client's retry policy knows.
    httpx = importlib.import_module(Client.__bases__[0].__module__.partition(".")[0])

    class LoseFirstResponse(httpx.BaseTransport):
        def __init__(self) -> None:
            self.inner = httpx.HTTPTransport()
            self.posts = 0

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            response = self.inner.handle_request(request)
            if request.method == "POST" and request.url.path.endswith("/asset-events"):
                self.posts += 1
                if self.posts == 1:
                    response.read()  # the server has committed by now
                    response.close()
                    raise httpx.ReadError("connection reset after commit (injected)", request=request)
            return response

    transport = LoseFirstResponse()
    client = Client(
        base_url=f"{stack.api_url}/execution/", token=stack.token_for(seed_ti["id"]), transport=transport
    )
    key = f"lost-{uuid.uuid4()}"
    before = len(stack.events(ASSET))
    receipt = client.asset_events.emit(name=ASSET, idempotency_key=key, extra={"attempt": "lost"})
    assert transport.posts == 2
    assert receipt.deduplicated is True
    assert len(stack.events(ASSET)) == before + 1
    assert [e["id"] for e in stack.events(ASSET) if e["extra"] == {"attempt": "lost"}] == [receipt.id]
    assert _key_rows(key) == 1


# -- idempotency scoped to its producer ------------------------------------------------------


def _vouching_client():
    """The client a Dag processor manager gives its children: its own in-process Execution API."""
    from airflow.dag_processing.manager import DagFileProcessorManager

    return DagFileProcessorManager(max_runs=1).client


@pytest.fixture(scope="module")
def dag_level_client(stack):
    return _vouching_client()


def test_key_used_by_another_dag_is_rejected(stack, seed_ti, other_seed_ti):
    key = f"nightly-{uuid.uuid4()}"
    first = stack.emit(stack.token_for(seed_ti["id"]), {"name": ASSET, "idempotency_key": key})
    assert first.status_code == 201, first.text
    before = stack.events(ASSET)

    stolen = stack.emit(
        stack.token_for(other_seed_ti["id"]),
        {"name": ASSET, "idempotency_key": key, "extra": {"by": "other"}},
    )
    assert stolen.status_code == 409, stolen.text
    detail = stolen.json()["detail"]
    assert detail["reason"] == "idempotency_key_in_use"
    assert key in detail["message"] and ASSET in detail["message"] and "another producer" in detail["message"]
    assert "emit_test_seed" not in detail["message"]  # the other producer is not disclosed
    assert stack.events(ASSET) == before  # nothing written
    assert _key_rows(key) == 1

    # The same Dag repeating its key still gets its original receipt.
    again = stack.emit(stack.token_for(seed_ti["id"]), {"name": ASSET, "idempotency_key": key})
    assert again.status_code == 200 and again.json()["deduplicated"] is True
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["source_dag_id"] == "emit_test_seed"


def test_dag_level_and_task_level_callers_do_not_share_keys(stack, seed_ti, dag_level_client):
    from airflow.sdk.api.client import ServerResponseError
    from airflow.sdk.api.datamodels._generated import AssetEventEmitSource

    dag_level = AssetEventEmitSource(dag_id=seed_ti["dag_id"], run_id=seed_ti["run_id"])
    before = len(stack.events(ASSET))

    # Task-level first, then a Dag callback of the same Dag with the same key: 409.
    task_key = f"task-first-{uuid.uuid4()}"
    assert (
        stack.emit(stack.token_for(seed_ti["id"]), {"name": ASSET, "idempotency_key": task_key}).status_code
        == 201
    )
    with pytest.raises(ServerResponseError) as err:
        dag_level_client.asset_events.emit(name=ASSET, idempotency_key=task_key, source=dag_level)
    assert err.value.response.status_code == 409
    assert err.value.detail["reason"] == "idempotency_key_in_use"

    # Dag-level first (no task in the receipt), then a task of the same Dag: 409.
    dag_key = f"dag-first-{uuid.uuid4()}"
    receipt = dag_level_client.asset_events.emit(name=ASSET, idempotency_key=dag_key, source=dag_level)
    assert (receipt.source_dag_id, receipt.source_task_id, receipt.deduplicated) == (
        seed_ti["dag_id"],
        None,
        False,
    )
    repeated = dag_level_client.asset_events.emit(name=ASSET, idempotency_key=dag_key, source=dag_level)
    assert repeated.deduplicated is True and repeated.id == receipt.id
    resp = stack.emit(stack.token_for(seed_ti["id"]), {"name": ASSET, "idempotency_key": dag_key})
    assert resp.status_code == 409 and resp.json()["detail"]["reason"] == "idempotency_key_in_use"

    assert len(stack.events(ASSET)) == before + 2
    assert _key_rows(task_key) == _key_rows(dag_key) == 1


def test_concurrent_emits_from_two_dags_with_one_key(stack, seed_ti, other_seed_ti):
    """20 requests, 10 per Dag, released together: one event, the winner's Dag gets it, the other 409."""
    tokens = {
        "emit_test_seed": stack.token_for(seed_ti["id"]),
        "emit_test_seed_other": stack.token_for(other_seed_ti["id"]),
    }
    key = f"race-{uuid.uuid4()}"
    barrier = threading.Barrier(20)
    results: list = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        dag_id = sorted(tokens)[n % 2]
        barrier.wait()
        resp = stack.emit(tokens[dag_id], {"name": ASSET, "idempotency_key": key, "extra": {"race": n}})
        with lock:
            results.append((dag_id, resp))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    assert len(results) == 20
    created = [(dag_id, r) for dag_id, r in results if r.status_code == 201]
    assert len(created) == 1, [(d, r.status_code, r.text) for d, r in results]
    winner, (_, winning) = created[0][0], created[0]
    event_id = winning.json()["id"]
    for dag_id, resp in results:
        if dag_id == winner:
            assert resp.status_code in (200, 201), resp.text
            assert resp.json()["id"] == event_id and resp.json()["source_dag_id"] == winner
        else:
            assert resp.status_code == 409, resp.text
            assert resp.json()["detail"]["reason"] == "idempotency_key_in_use"
    assert sum(1 for d, _ in results if d == winner) == 10
    race_events = [e for e in stack.events(ASSET) if "race" in (e["extra"] or {})]
    assert [e["id"] for e in race_events] == [event_id]
    assert race_events[0]["source_dag_id"] == winner
    assert _key_rows(key) == 1
    fired = [r for r in stack.listener_records() if r["asset"] == ASSET and "race" in (r["extra"] or {})]
    assert len(fired) == 1


# -- in-process trust -------------------------------------------------------------------------


def test_only_vouching_in_process_apis_may_state_a_source(stack, seed_ti):
    """The triggerer's in-process Execution API (a plain one) cannot state a source."""
    from airflow.sdk.api.client import Client, ServerResponseError
    from airflow.sdk.api.datamodels._generated import AssetEventEmitSource

    if LINE == DEFAULT_LINE:
        from airflow.jobs.triggerer_job_runner import in_process_api_server

        api = in_process_api_server()
    else:
        # 3.4: TriggerRunnerSupervisor.make_client() builds the triggerer's API this way (its job id).
        from airflow.api_fastapi.execution_api.in_process import InProcessExecutionAPI

        api = InProcessExecutionAPI(triggerer_id=1)
    client = Client(base_url=None, token="", dry_run=True, transport=api.transport)
    client.base_url = "http://in-process.invalid./"  # type: ignore[assignment]
    before = len(stack.events(ASSET))
    source = AssetEventEmitSource(dag_id=seed_ti["dag_id"], run_id=seed_ti["run_id"])
    with pytest.raises(ServerResponseError) as err:
        client.asset_events.emit(name=ASSET, idempotency_key=f"trig-{uuid.uuid4()}", source=source)
    assert (err.value.response.status_code, err.value.detail["reason"]) == (403, "source_not_allowed")
    with pytest.raises(ServerResponseError) as err:  # no token there either: the zero UUID is nobody
        client.asset_events.emit(name=ASSET, idempotency_key=f"trig-{uuid.uuid4()}")
    assert (err.value.response.status_code, err.value.detail["reason"]) == (403, "unknown_caller")
    assert len(stack.events(ASSET)) == before


# -- cleanup ------------------------------------------------------------------------------------


def test_db_clean_removes_idempotency_keys_with_their_events(stack, seed_ti):
    """``airflow db clean`` on asset_event takes the key rows along (ON DELETE CASCADE)."""
    from datetime import timezone

    from sqlalchemy import update

    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    token = stack.token_for(seed_ti["id"])
    old_keys = [f"auto-{uuid.uuid4()}", f"clean-user-{uuid.uuid4()}"]
    kept_key = f"auto-{uuid.uuid4()}"
    ids = {}
    for key in [*old_keys, kept_key]:
        resp = stack.emit(token, {"name": ASSET, "idempotency_key": key})
        assert resp.status_code == 201, resp.text
        ids[key] = resp.json()["id"]
    with create_session() as session:
        session.execute(
            update(AssetEvent)
            .where(AssetEvent.id.in_([ids[k] for k in old_keys]))
            .values(timestamp=datetime(2001, 1, 1, tzinfo=timezone.utc))
        )
    proc = stack.env.airflow(
        "db",
        "clean",
        "--clean-before-timestamp",
        "2002-01-01T00:00:00+00:00",
        "--tables",
        "asset_event",
        "--skip-archive",
        "--yes",
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    remaining = {e["id"] for e in stack.events(ASSET)}
    assert not remaining & {ids[k] for k in old_keys}
    assert ids[kept_key] in remaining
    assert [_key_rows(k) for k in old_keys] == [0, 0]  # the keys went with their events
    assert _key_rows(kept_key) == 1
    # The cleaned user key is free again: a new emit creates a new event.
    resp = stack.emit(token, {"name": ASSET, "idempotency_key": old_keys[1]})
    assert resp.status_code == 201 and resp.json()["id"] not in ids.values()
