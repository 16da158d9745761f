"""The inspector's run controls over real HTTP on 127.0.0.1: approve, reject and stop
through the write API, behind the write gate and the token, with every documented
refusal, and a store failure that the answer tells apart."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from helpers import FlakyMemoryStore
from inspector_support import awaiting_run, inspector

from runtime import Runtime, Store, open_runtime
from runtime.agents import RunHead, SidecarEntry, UserMessage, checkpoints
from runtime.inspector import InspectorServer

TIMEOUT = 20
TOKEN = "run-controls-token"
GOOD = {"X-Tidelog-Token": TOKEN}


@contextlib.asynccontextmanager
async def serving(
    address: str | Store, **options: Any
) -> AsyncIterator[tuple[Runtime, InspectorServer, httpx.AsyncClient]]:
    """A runtime on ``address`` with a run awaiting approval, its inspector, a client."""
    async with open_runtime(address) as rt:
        await awaiting_run(rt)
        async with (
            inspector(rt, **options) as server,
            httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as client,
        ):
            yield rt, server, client


async def post(
    client: httpx.AsyncClient, path: str, body: object, headers: dict[str, str] | None = GOOD
) -> httpx.Response:
    return await client.post(path, content=json.dumps(body), headers=headers)


async def decisions(rt: Runtime, run_id: str) -> list[object]:
    """The ``approval_decision`` records in the run's checkpoint."""
    snap = await checkpoints(rt).load(run_id)
    assert snap is not None
    return [
        e.data
        for e in snap.entries
        if isinstance(e, SidecarEntry) and e.kind == "approval_decision"
    ]


async def test_run_controls_need_writes_and_the_token(tmp_path: Path) -> None:
    """Approve, reject and stop answer 403 with writes off and 401 without the token in a
    header; nothing is written."""
    db = str(tmp_path / "app.db")
    body = {"run_id": "pay-run", "call_id": "c-pay"}
    async with serving(db) as (rt, _, client):
        for path in ("/api/approve", "/api/reject", "/api/stop"):
            refused = await post(client, path, body)
            assert refused.status_code == 403, path
            assert "writes are disabled" in refused.json()["error"]
        assert await decisions(rt, "pay-run") == []
    async with open_runtime(db) as rt, inspector(rt, writes=True, token=TOKEN) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as client:
            info = (await client.get("/api/info")).json()
            assert info["write_routes"] == ["/api/fork", "/api/approve", "/api/reject", "/api/stop"]
            for path in ("/api/approve", "/api/reject", "/api/stop"):
                assert (await post(client, path, body, None)).status_code == 401, path
                wrong = {"X-Tidelog-Token": "not-the-token"}
                assert (await post(client, path, body, wrong)).status_code == 401, path
                by_query = await client.post(
                    path, params={"token": TOKEN}, content=json.dumps(body)
                )
                assert by_query.status_code == 401, path
        assert await decisions(rt, "pay-run") == []
        assert await rt.stat("tidelog/ctl/pay-run") is None


async def test_approve_and_reject_record_one_decision_and_refuse_the_rest(
    tmp_path: Path,
) -> None:
    """The runs read shows the pending approval; an approval is recorded once (a second
    decision gets 409 saying how it was decided); unknown runs and calls get 404, a call
    that needs no approval 409, bad bodies 400 naming the field; a rejection keeps its
    message."""
    async with serving(str(tmp_path / "app.db"), writes=True, token=TOKEN) as (rt, _, client):
        runs = (await client.get("/api/runs", params={"id": "office"})).json()["runs"]
        assert len(runs) == 1
        run = runs[0]
        assert run["status"] == "awaiting_approval"
        assert run["checkpoint"] == "tidelog/run/pay-run"
        assert run["pending_approvals"] == [
            {"call_id": "c-pay", "name": "pay", "arguments": {"amount": 5}}
        ]
        assert run["decisions"] == []
        own = (await client.get("/api/runs", params={"id": "tidelog/run/pay-run"})).json()
        assert own["runs"] == [run]  # a checkpoint session shows its run

        refusals: list[tuple[str, object, int, str | None]] = [
            ("/api/approve", {"run_id": "pay-run", "call_id": "c-look"}, 409, "call_id"),
            ("/api/approve", {"run_id": "pay-run", "call_id": "c-nope"}, 404, "call_id"),
            ("/api/reject", {"run_id": "no-run", "call_id": "c-pay"}, 404, "run_id"),
            ("/api/approve", {"run_id": "pay-run"}, 400, "call_id"),
            ("/api/approve", {"call_id": "c-pay"}, 400, "run_id"),
            ("/api/approve", {"run_id": "bad\x01id", "call_id": "c-pay"}, 400, "run_id"),
            ("/api/approve", {"run_id": "pay-run", "call_id": 7}, 400, "call_id"),
            ("/api/approve", {"run_id": "pay-run", "call_id": "c-pay", "by": 3}, 400, "by"),
            (
                "/api/reject",
                {"run_id": "pay-run", "call_id": "c-pay", "message": []},
                400,
                "message",
            ),
            ("/api/approve", ["not", "an", "object"], 400, None),
            ("/api/stop", {"run_id": "no-run"}, 404, "run_id"),
            ("/api/stop", {}, 400, "run_id"),
        ]
        for path, body, status, parameter in refusals:
            answer = await post(client, path, body)
            assert answer.status_code == status, (path, body, answer.text)
            assert answer.json()["parameter"] == parameter, (path, body, answer.text)
            assert answer.json()["error"]
        needs_none = await post(client, "/api/approve", {"run_id": "pay-run", "call_id": "c-look"})
        assert "needs no approval" in needs_none.json()["error"]
        assert await decisions(rt, "pay-run") == []

        done = await post(
            client, "/api/approve", {"run_id": "pay-run", "call_id": "c-pay", "by": "ada"}
        )
        assert done.status_code == 200, done.text
        decision = done.json()["decision"]
        assert decision["approved"] is True
        assert decision["by"] == "ada"
        assert decision["call_id"] == "c-pay"
        again = await post(
            client, "/api/reject", {"run_id": "pay-run", "call_id": "c-pay", "by": "bob"}
        )
        assert again.status_code == 409
        assert again.json()["parameter"] == "call_id"
        assert again.json()["decision"] == decision  # how it was decided
        assert await decisions(rt, "pay-run") == [decision]
        run = (await client.get("/api/runs", params={"id": "office"})).json()["runs"][0]
        assert run["pending_approvals"] == []
        assert run["decisions"] == [decision]

        await awaiting_run(rt, "pay-run-2", "office-2")
        rejected = await post(
            client,
            "/api/reject",
            {"run_id": "pay-run-2", "call_id": "c-pay", "message": "<b>too much</b>"},
        )
        assert rejected.status_code == 200, rejected.text
        assert rejected.json()["decision"]["approved"] is False
        assert rejected.json()["decision"]["by"] == "inspector"  # no "by": the default
        assert rejected.json()["decision"]["message"] == "<b>too much</b>"
        assert await decisions(rt, "pay-run-2") == [rejected.json()["decision"]]


async def test_stop_asks_a_live_run_and_answers_any_other_plainly(tmp_path: Path) -> None:
    """A stop of a run that is not running writes nothing and answers 200 with its status;
    a stop of a run a host holds while running writes one stop record (202)."""
    async with serving(str(tmp_path / "app.db"), writes=True, token=TOKEN) as (rt, _, client):
        plain = await post(client, "/api/stop", {"run_id": "pay-run"})
        assert plain.status_code == 200, plain.text
        assert plain.json() == {
            "run_id": "pay-run",
            "requested": False,
            "status": "awaiting_approval",
        }
        assert await rt.stat("tidelog/ctl/pay-run") is None

        head = RunHead("clerk", status="running", session_id="office")
        await checkpoints(rt).append("live", [UserMessage("go")], head)
        async with checkpoints(rt).claim("live"):  # a host runs it
            asked = await post(
                client, "/api/stop", {"run_id": "live", "by": "ada", "reason": "enough"}
            )
            assert asked.status_code == 202, asked.text
            assert asked.json() == {"run_id": "live", "requested": True, "status": "running"}
        async with rt.snapshot("tidelog/ctl/live") as snap:
            records = await snap.read()
        assert [(e.kind, e.data["by"], e.data["reason"]) for e in records] == [  # type: ignore[index,call-overload]
            ("tidelog.stop", "ada", "enough")
        ]


async def test_a_store_failure_while_deciding_says_whether_it_was_recorded() -> None:
    """The decision's commit fails after it was accepted: the answer is 503 with
    ``recorded: true``; deciding again is told it was decided; it is stored once."""
    store = FlakyMemoryStore()
    async with serving(store, writes=True, token=TOKEN) as (rt, _, client):
        store.fail_next = 1
        failed = await post(client, "/api/approve", {"run_id": "pay-run", "call_id": "c-pay"})
        assert failed.status_code == 503, failed.text
        assert failed.json()["recorded"] is True
        again = await post(client, "/api/approve", {"run_id": "pay-run", "call_id": "c-pay"})
        assert again.status_code == 409, again.text
        assert again.json()["decision"]["approved"] is True
        await rt.flush()
        assert len(await decisions(rt, "pay-run")) == 1
