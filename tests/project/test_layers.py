"""The layers import only downward, and each package's public surface is what it says."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    """Every module a file imports (absolute names; relative ones resolved)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package.replace(".", "/")).rglob("*.py"))


def _offenders(
    package: str, banned: tuple[str, ...], *, exclude: tuple[str, ...] = ()
) -> list[str]:
    out = []
    for path in _files(package):
        rel = path.relative_to(ROOT).as_posix()
        if any(rel.startswith(e) for e in exclude):
            continue
        for name in _imports(path):
            if any(name == b or name.startswith(b + ".") for b in banned):
                out.append(f"{rel} imports {name}")
    return out


def test_stores_import_neither_trio_nor_anything_above() -> None:
    """stores/ is synchronous: no trio, no actors, no runtime."""
    assert _offenders("stores", ("trio", "trio_util", "actors", "runtime")) == []


def test_actors_know_nothing_above_them() -> None:
    """actors/ imports stores/ and trio, never the runtime or the agent layer."""
    assert _offenders("actors", ("runtime",)) == []


def test_runtime_never_imports_its_clients() -> None:
    """The session runtime never imports the agent layer, the command line or the
    inspector."""
    assert (
        _offenders(
            "runtime",
            ("runtime.agents", "runtime.cli", "runtime.inspector", "runtime.integrations"),
            exclude=(
                "runtime/agents/",
                "runtime/cli/",
                "runtime/inspector/",
                "runtime/integrations/",
            ),
        )
        == []
    )


def test_inspector_reads_only_through_the_public_api() -> None:
    """The web inspector imports neither the stores, the actors, nor the command line:
    only the public ``runtime`` and ``runtime.agents`` names (and its own modules)."""
    assert _offenders("runtime.inspector", ("stores", "actors", "runtime.cli")) == []


def _is_private_runtime(name: str) -> bool:
    parts = name.split(".")
    if parts[0] == "actors":
        return True
    return parts[0] == "runtime" and len(parts) > 1 and parts[1].startswith("_")


def _private_runtime_imports(package: str) -> list[str]:
    out = []
    for path in _files(package):
        rel = path.relative_to(ROOT).as_posix()
        out += [f"{rel} imports {name}" for name in _imports(path) if _is_private_runtime(name)]
    return out


@pytest.mark.parametrize(
    "package", ["runtime.agents", "runtime.cli", "runtime.inspector", "runtime.integrations"]
)
def test_clients_use_only_the_public_runtime(package: str) -> None:
    """The agent layer and the command line import neither actors nor a private
    ``runtime._*`` module: they are clients of the public runtime API."""
    assert _private_runtime_imports(package) == []


def test_clients_touch_no_private_runtime_attribute() -> None:
    """No ``._something`` attribute of a runtime object is used by the agent layer or the
    command line (their own objects' privates are theirs)."""
    suspicious = []
    for package in ("runtime.agents", "runtime.cli", "runtime.inspector", "runtime.integrations"):
        for path in _files(package):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Attribute)
                    and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Name)
                    and node.value.id in {"rt", "runtime", "self.runtime"}
                ):
                    suspicious.append(f"{path.relative_to(ROOT)}: {node.value.id}.{node.attr}")
                if (
                    isinstance(node, ast.Attribute)
                    and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "runtime"
                ):
                    suspicious.append(f"{path.relative_to(ROOT)}: .runtime.{node.attr}")
    assert suspicious == []


RUNTIME_NAMES = {
    "INTERNAL_PREFIX",
    "JSON",
    "BrokenError",
    "ClosedError",
    "CommitPendingError",
    "ConflictError",
    "InvalidArgumentError",
    "InvalidEventError",
    "InvalidSessionIdError",
    "MemoryStore",
    "NewEvent",
    "OwnershipLostError",
    "Projection",
    "PublishedStatistics",
    "ReadOnlyError",
    "Runtime",
    "RuntimeStatistics",
    "SessionExistsError",
    "SessionInfo",
    "SessionNotFoundError",
    "SessionOwnedError",
    "SessionReader",
    "SessionWriter",
    "Snapshot",
    "SnapshotExpiredError",
    "STATISTICS_PREFIX",
    "SqliteStore",
    "StatsProjection",
    "Store",
    "StoreBusyError",
    "StoreCorruptError",
    "StoreError",
    "StoreIOError",
    "StoredEvent",
    "Tail",
    "TidelogError",
    "UnsupportedFormatError",
    "UnwrittenError",
    "Watch",
    "WriterStatistics",
    "open_runtime",
    "published_statistics",
}


def test_runtime_public_names_are_pinned() -> None:
    """runtime.__all__ is exactly the session runtime's surface (a change is deliberate)."""
    import runtime

    assert set(runtime.__all__) == RUNTIME_NAMES
    assert all(hasattr(runtime, name) for name in runtime.__all__)


@pytest.mark.parametrize("package", ["runtime", "runtime.agents", "runtime.inspector"])
def test_public_names_report_their_public_home(package: str) -> None:
    """Classes and functions defined in private modules say ``runtime.X`` (trio's way)."""
    module = importlib.import_module(package)
    for name in module.__all__:
        obj = getattr(module, name)
        home = getattr(obj, "__module__", None)
        if isinstance(home, str) and home.startswith(package + "."):
            pytest.fail(f"{package}.{name} reports {home}")
