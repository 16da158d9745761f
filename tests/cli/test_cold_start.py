"""What a fresh ``tidelog ls`` process imports: the runtime, the SQLite backend and the
command, not the agent layer, pydantic, jsonschema, rich, the inspector, the other
backends or the compiled JSON codec, which only event data needs (their imports cost more
than the command; see W12 in ``bench/README.md``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from cli_support import TIMEOUT, make_db

#: Top-level packages and modules that ``tidelog ls`` must not import.
HEAVY = (
    "runtime.agents",
    "runtime.inspector",
    "runtime.integrations",
    "pydantic",
    "jsonschema",
    "rich",
    "stores.memory",
    "stores.jsonl",
    "stores.postgres",
    "psycopg",
    "msgspec",
)


def _imported_after(program: str, cwd: Path) -> list[str]:
    """Run ``program`` in a fresh interpreter; the modules of :data:`HEAVY` it imported."""
    check = textwrap.dedent(
        f"""
        import json, sys
        heavy = {HEAVY!r}
        loaded = [m for m in heavy if any(n == m or n.startswith(m + ".") for n in sys.modules)]
        print(json.dumps(loaded), file=sys.stderr)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program + check],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return loaded


def test_ls_imports_none_of_the_heavy_modules(tmp_path: Path) -> None:
    """`tidelog ls DB` lists the sessions without importing the agent layer, pydantic,
    jsonschema, rich, the inspector, another backend or msgspec."""
    db = make_db(tmp_path)
    program = textwrap.dedent(
        f"""
        import io, sys
        from runtime.cli import main
        out, sys.stdout = sys.stdout, io.StringIO()
        status = main(["ls", {str(db)!r}])
        listed, sys.stdout = sys.stdout.getvalue(), out
        assert status == 0 and "chat" in listed, (status, listed)
        """
    )
    assert _imported_after(program, tmp_path) == []


def test_import_runtime_loads_no_backend(tmp_path: Path) -> None:
    """`import runtime` loads no store backend (nor apsw) until one is asked for, and
    `runtime.SqliteStore` / `runtime.MemoryStore` are then the stores' classes."""
    program = textwrap.dedent(
        """
        import sys
        import runtime
        early = [m for m in ("apsw", "stores.sqlite", "stores.memory") if m in sys.modules]
        assert early == [], early
        import stores
        assert runtime.SqliteStore is stores.SqliteStore
        assert runtime.MemoryStore is stores.MemoryStore
        assert "SqliteStore" in dir(runtime)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
