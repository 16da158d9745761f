"""The inspector's HTTP API over real HTTP on 127.0.0.1 (httpx on trio): every endpoint on
SQLite, JSONL and PostgreSQL, bad parameters, the token and write rules, static files."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from inspector_support import data_of, fill, inspector, sse_read, store_address

from runtime import MemoryStore, NewEvent, Runtime, SqliteStore, open_runtime
from runtime.inspector import InspectorServer

TIMEOUT = 20


@pytest.fixture(params=["sqlite", "jsonl", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store address of each backend (a PostgreSQL schema of the test's own)."""
    with store_address(request.param, tmp_path) as found:
        yield found


@contextlib.asynccontextmanager
async def serving(
    address: str | SqliteStore, *, filled: bool = False, **options: Any
) -> AsyncIterator[tuple[Runtime, InspectorServer, httpx.AsyncClient]]:
    """A runtime on ``address`` (given :func:`fill`'s sessions unless ``filled``), its
    inspector, and an HTTP client of it."""
    async with open_runtime(address) as rt:
        if not filled:
            await fill(rt)
        async with (
            inspector(rt, **options) as server,
            httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as client,
        ):
            yield rt, server, client


async def get(client: httpx.AsyncClient, path: str, **params: Any) -> Any:
    response = await client.get(path, params=params)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


async def test_every_read_endpoint_answers_from_the_store(target: str) -> None:
    """The list, one session (values at the head and at an earlier seq), windows of
    events, runs and lineage answer what the store holds."""
    async with serving(target) as (rt, server, client):
        info = await get(client, "/api/info")
        assert info["writes"] is False
        assert info["write_routes"] == ["/api/fork", "/api/approve", "/api/reject", "/api/stop"]
        assert {"stats", "conversation", "turns"} <= set(info["projections"])

        listed = await get(client, "/api/sessions")
        assert [s["id"] for s in listed["sessions"]] == ["chat", "chat-fork", "notes"]
        assert listed["next"] is None
        fork = listed["sessions"][1]
        assert fork["parent"] == {"id": "chat", "seq": 4}
        assert "writer" not in fork  # no store given: leases are not shown
        page = await get(client, "/api/sessions", limit=1)
        assert [s["id"] for s in page["sessions"]] == ["chat"]
        assert page["next"] == "chat"
        page = await get(client, "/api/sessions", limit=1, after="chat")
        assert [s["id"] for s in page["sessions"]] == ["chat-fork"]
        prefixed = await get(client, "/api/sessions", prefix="chat-")
        assert [s["id"] for s in prefixed["sessions"]] == ["chat-fork"]
        internal = await get(client, "/api/sessions", internal="true", prefix="tidelog/")
        assert {s["id"] for s in internal["sessions"]} >= {"tidelog/run/r1", "tidelog/run/r3"}
        assert all(s["internal"] for s in internal["sessions"])

        whole = await get(client, "/api/session", id="chat")
        assert whole["head"] == whole["as_of_seq"] == 10
        assert whole["values"]["stats"]["events"] == 10
        assert whole["forks"] == [{"id": "chat-fork", "seq": 4}]
        assert whole["session"]["parent"] is None
        at4 = await get(client, "/api/session", id="chat", as_of_seq=4)
        assert at4["as_of_seq"] == 4
        assert at4["head"] == 10
        async with rt.snapshot("chat") as snap:
            first4 = await snap.read(until_seq=4)
        assert at4["values"]["stats"]["events"] == 4
        assert at4["values"]["stats"]["kinds"] == {
            "user": 1,
            "assistant": 1,
            "tool_call": 1,
            "tool_started": 1,
        }
        assert [m["role"] for m in at4["values"]["conversation"]] == ["user", "assistant"]
        assert len(at4["values"]["turns"]) == 1
        assert len(first4) == 4
        at0 = await get(client, "/api/session", id="chat", as_of_seq=0)
        assert at0["values"]["stats"]["events"] == 0
        assert at0["values"]["conversation"] == []

        events = await get(client, "/api/events", id="chat")
        assert [e["seq"] for e in events["events"]] == list(range(1, 11))
        assert events["events"][0] == {
            "seq": 1,
            "ts": events["events"][0]["ts"],
            "kind": "user",
            "run_id": "r1",
            "data": {"text": "When is high tide?"},
        }
        last = await get(client, "/api/events", id="chat", from_end="1", limit=3)
        assert [e["seq"] for e in last["events"]] == [8, 9, 10]
        window = await get(client, "/api/events", id="chat", since_seq=2, until_seq=5)
        assert [e["seq"] for e in window["events"]] == [3, 4, 5]
        before = await get(client, "/api/events", id="chat", until_seq=6, from_end=1, limit=2)
        assert [e["seq"] for e in before["events"]] == [5, 6]
        forked = await get(client, "/api/events", id="chat-fork")
        assert [e["seq"] for e in forked["events"]] == [1, 2, 3, 4]

        runs = {r["run_id"]: r for r in (await get(client, "/api/runs", id="chat"))["runs"]}
        assert set(runs) == {"r1", "r3", "r4"}
        assert runs["r1"]["status"] == "completed"
        assert runs["r1"]["pending_calls"] == []
        assert (runs["r1"]["first_seq"], runs["r1"]["last_seq"]) == (1, 7)
        assert runs["r3"]["status"] == "interrupted"
        assert runs["r3"]["pending_calls"] == [
            {"call_id": "call-3", "name": "send_mail", "arguments": {"to": "ada"}}
        ]
        assert runs["r3"]["first_seq"] is None  # not in the history: it never completed
        assert runs["r4"]["status"] == "failed"
        assert runs["r4"]["unknown_outcomes"] == ["call-4"]
        assert runs["r4"]["error"] == {"type": "ModelError", "message": "down"}
        assert (await get(client, "/api/runs", id="notes"))["runs"] == []
        del server


async def read_stream(
    server: InspectorServer, count: int, headers: dict[str, str] | None = None, **params: Any
) -> list[dict[str, str]]:
    """The first ``count`` events of an SSE stream, read over a plain socket with h11 (so
    no half-read response iterator is left behind when the test stops reading)."""
    return await sse_read(server, count, headers, **params)


async def test_the_stream_follows_commits_and_resumes_after_the_last_id(target: str) -> None:
    """The SSE stream sends committed events with id = seq, then new ones as they commit;
    ``Last-Event-ID`` (or ``since_seq``) resumes exactly after the event named."""
    async with serving(target) as (rt, server, _):
        got = await read_stream(server, 3, id="notes", since_seq=2)
        assert [e["id"] for e in got] == ["3", "4", "5"]
        assert all(e["event"] == "event" for e in got)
        assert data_of(got[0]) == {
            "seq": 3,
            "ts": data_of(got[0])["ts"],  # type: ignore[index,call-overload]
            "kind": "note",
            "run_id": None,
            "data": {"n": 3},
        }

        async def write_later() -> None:
            await trio.sleep(0.2)
            async with rt.open_session("notes") as writer:
                await writer.append([NewEvent("note", {"n": 6}), NewEvent("note", {"n": 7})])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write_later)
            live = await read_stream(server, 2, headers={"Last-Event-ID": "5"}, id="notes")
        assert [e["id"] for e in live] == ["6", "7"]
        resumed = await read_stream(
            server, 1, headers={"Last-Event-ID": "6"}, id="notes", since_seq=0
        )
        assert [e["id"] for e in resumed] == ["7"]  # the header wins over since_seq


async def test_many_streams_of_one_session_each_get_every_event_once(tmp_path: Path) -> None:
    """Streams of one session opened at different seqs -- far behind the shared feed's
    buffer, inside it, at the head -- each get exactly the events after their seq, in
    order, while new ones commit."""
    async with serving(str(tmp_path / "app.db")) as (rt, server, _):
        async with rt.open_session("notes") as writer:
            for start in range(6, 1206, 300):  # seqs 6..1205: more than a feed keeps
                await writer.append([NewEvent("note", {"n": n}) for n in range(start, start + 300)])
            got: dict[int, list[int]] = {}

            async def stream(since: int) -> None:
                found = await read_stream(server, 1215 - since, id="notes", since_seq=since)
                got[since] = [int(e["id"]) for e in found]

            async with trio.open_nursery() as nursery:
                for since in (0, 700, 1200, 1205):
                    nursery.start_soon(stream, since)
                await trio.sleep(0.3)  # (not needed for correctness: some come live)
                for n in range(1206, 1216):
                    await writer.append([NewEvent("note", {"n": n})])
        for since, seqs in got.items():
            assert seqs == list(range(since + 1, 1216)), since


BAD_REQUESTS = [
    ("/api/events", {"id": "chat", "since_seq": "-1"}, 400, "since_seq"),
    ("/api/events", {"id": "chat", "until_seq": "x"}, 400, "until_seq"),
    ("/api/events", {"id": "chat", "limit": "1000000"}, 400, "limit"),
    ("/api/events", {"id": "chat", "limit": "0"}, 400, "limit"),
    ("/api/events", {"id": "chat", "since_seq": "99999999999999999999999"}, 400, "since_seq"),
    ("/api/events", {"id": "chat", "since_seq": "5", "until_seq": "2"}, 400, "until_seq"),
    ("/api/events", {"id": "chat", "from_end": "maybe"}, 400, "from_end"),
    ("/api/events", {"id": "nobody"}, 404, "id"),
    ("/api/events", {}, 400, "id"),
    ("/api/events", {"id": "x" * 300}, 400, "id"),
    ("/api/events", {"id": "bad\x01id"}, 400, "id"),
    ("/api/session", {"id": "chat", "as_of_seq": "-3"}, 400, "as_of_seq"),
    ("/api/session", {"id": "chat", "as_of_seq": "11"}, 400, "as_of_seq"),
    ("/api/session", {"id": "nobody"}, 404, "id"),
    ("/api/session", {"id": ""}, 400, "id"),
    ("/api/runs", {"id": "nobody"}, 404, "id"),
    ("/api/sessions", {"limit": "1001"}, 400, "limit"),
    ("/api/sessions", {"limit": "-5"}, 400, "limit"),
    ("/api/sessions", {"internal": "perhaps"}, 400, "internal"),
    ("/api/stream", {"id": "nobody"}, 404, "id"),
    ("/api/stream", {"id": "notes", "since_seq": "-1"}, 400, "since_seq"),
    ("/api/nothing-here", {}, 404, None),
]


async def test_bad_parameters_get_a_4xx_naming_the_parameter(tmp_path: Path) -> None:
    """Negative seqs, huge limits, unknown sessions, malformed ids... each answered with a
    4xx and a JSON error naming the parameter; nothing is read or written."""
    async with serving(str(tmp_path / "app.db")) as (_, _, client):
        for path, params, status, parameter in BAD_REQUESTS:
            response = await client.get(path, params=params)
            assert response.status_code == status, (path, params, response.text)
            body = response.json()
            assert body["parameter"] == parameter, (path, params, body)
            assert isinstance(body["error"], str)
            assert body["error"]
        response = await client.get(
            "/api/stream", params={"id": "notes"}, headers={"Last-Event-ID": "-2"}
        )
        assert response.status_code == 400
        assert response.json()["parameter"] == "Last-Event-ID"


async def post_fork(
    client: httpx.AsyncClient, body: object, headers: dict[str, str] | None = None
) -> httpx.Response:
    return await client.post("/api/fork", content=json.dumps(body), headers=headers)


async def test_writes_are_refused_unless_enabled_and_the_header_carries_the_token(
    tmp_path: Path,
) -> None:
    """Fork answers 403 when writes are off; with writes on, 401 without the token in a
    header (a cookie or a query parameter does not count), 201 with it."""
    db = str(tmp_path / "app.db")
    async with serving(db) as (rt, server, client):
        assert server.token is None
        assert not server.writes
        refused = await post_fork(client, {"id": "chat", "new_id": "x"})
        assert refused.status_code == 403
        assert "writes are disabled" in refused.json()["error"]
        assert await rt.stat("x") is None
    async with serving(db, filled=True, writes=True, token="s3cret-token") as (rt, server, client):
        assert server.token == "s3cret-token"
        assert server.writes
        body = {"id": "chat", "new_id": "branch", "at_seq": 7}
        assert (await post_fork(client, body)).status_code == 401
        client.cookies.set("X-Tidelog-Token", "s3cret-token")
        assert (await post_fork(client, body)).status_code == 401
        client.cookies.clear()
        by_query = await client.post(
            "/api/fork", params={"token": "s3cret-token"}, content=json.dumps(body)
        )
        assert by_query.status_code == 401
        wrong = await post_fork(client, body, {"X-Tidelog-Token": "not-the-token"})
        assert wrong.status_code == 401
        assert await rt.stat("branch") is None
        good = {"X-Tidelog-Token": "s3cret-token"}
        done = await post_fork(client, body, good)
        assert done.status_code == 201, done.text
        assert done.json()["session"]["parent"] == {"id": "chat", "seq": 7}
        info = await rt.stat("branch")
        assert info is not None
        assert info.head == 7
        assert info.parent == ("chat", 7)
        bearer = {"Authorization": "Bearer s3cret-token"}
        again = await post_fork(client, body, bearer)
        assert again.status_code == 409
        assert again.json()["parameter"] == "new_id"
        past = await post_fork(client, {"id": "chat", "new_id": "y", "at_seq": 99}, good)
        assert past.status_code == 400
        assert past.json()["parameter"] == "at_seq"
        missing = await post_fork(client, {"id": "nobody", "new_id": "y"}, good)
        assert missing.status_code == 404
        assert missing.json()["parameter"] == "id"
        malformed = await post_fork(client, ["not", "an", "object"], good)
        assert malformed.status_code == 400
        inside = await post_fork(client, {"id": "chat", "new_id": "y", "at_seq": 3}, good)
        assert inside.status_code == 409
        assert inside.json()["parameter"] == "at_seq"
        assert await rt.stat("y") is None


async def test_writes_enabled_generate_a_token() -> None:
    """``writes=True`` without a token generates one (never writes without a token)."""
    async with open_runtime(MemoryStore()) as rt, inspector(rt, writes=True) as server:
        assert server.token is not None
        assert len(server.token) >= 16
        assert server.page_url == f"{server.url}#token={server.token}"


async def test_another_address_needs_the_token_for_every_request(tmp_path: Path) -> None:
    """Bound off 127.0.0.1, every API request needs the token (generated when not
    given); the page's static files do not (they hold no data)."""
    async with serving(str(tmp_path / "app.db"), host="0.0.0.0") as (_, server, _):
        assert server.token is not None
        url = f"http://127.0.0.1:{server.port}"
        async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:
            assert (await client.get("/api/sessions")).status_code == 401
            assert (await client.get("/")).status_code == 200
            ok = await client.get("/api/sessions", headers={"X-Tidelog-Token": server.token})
            assert ok.status_code == 200
            by_query = await client.get("/api/sessions", params={"token": server.token})
            assert by_query.status_code == 200  # reads only: an EventSource sends no header


async def test_static_files_come_from_the_package_only(tmp_path: Path) -> None:
    """The page and its files are served with a strict CSP; no path leaves the static
    folder; a foreign Host name is refused (DNS rebinding)."""
    async with serving(str(tmp_path / "app.db")) as (_, _, client):
        page = await client.get("/")
        assert page.status_code == 200
        assert "<title>tidelog inspector</title>" in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["x-content-type-options"] == "nosniff"
        assert (await client.get("/static/app.js")).status_code == 200
        for path in ["/static/../_app.py", "/static/%2e%2e/_app.py", "/static/..%2f_app.py"]:
            response = await client.get(path)
            assert response.status_code == 404, path
            assert "build_app" not in response.text
        foreign = await client.get("/api/sessions", headers={"Host": "evil.example"})
        assert foreign.status_code == 400


async def test_the_writer_column_shows_live_leases(tmp_path: Path) -> None:
    """Given the store, the list marks the sessions a writer holds now."""
    store = SqliteStore(tmp_path / "app.db")
    try:
        async with open_runtime(store) as rt:
            await fill(rt)  # its writers hold their leases until this runtime closes
        async with serving(store, filled=True, store=store) as (rt, _, client):
            async with rt.open_session("notes"):
                listed = await get(client, "/api/sessions")
                writers = {s["id"]: s["writer"] for s in listed["sessions"]}
                assert writers["notes"] is not None
                assert writers["chat"] is None
            listed = await get(client, "/api/sessions")
            assert all(s["writer"] is None for s in listed["sessions"])
    finally:
        store.close()
