"""The seams between modules: backends independent of each other, private names used only
where they are defined, capabilities read instead of probed, and ``import stores`` light."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("stores", "actors", "runtime", "examples", "bench")
BACKENDS = ("memory", "sqlite", "jsonl", "postgres")
#: Private names of the standard library that a program may use as documented.
STDLIB_PRIVATE = {"os._exit", "sys._getframe", "argparse._SubParsersAction"}
#: A probe measures a backend's own statements, so it imports them (bench/probes/README);
#: so does W2pg's by-hand loop, which runs the PostgreSQL store's batch statement as is.
RUN_STORE_STATEMENTS = ("bench/probes/", "bench/references/by_hand.py")


def _files(*packages: str) -> list[Path]:
    return sorted(p for package in packages for p in (ROOT / package).rglob("*.py"))


def _package_of(path: Path) -> list[str]:
    return list(path.relative_to(ROOT).with_suffix("").parts[:-1])


def _imported(path: Path, tree: ast.AST) -> list[tuple[int, list[str]]]:
    """``(line, dotted parts)`` of every name the file imports, relative ones resolved."""
    package = _package_of(path)
    found: list[tuple[int, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = base + (node.module.split(".") if node.module else [])
            else:
                module = (node.module or "").split(".")
            found += [(node.lineno, [*module, alias.name]) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")) for alias in node.names]
    return found


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_backends_import_no_other_backend() -> None:
    """A backend subpackage of stores/ imports no other backend, and the shared rules in
    stores/ import none (only the package's lazy loader and the address dispatcher do)."""
    out = []
    for path in _files("stores"):
        rel = _rel(path)
        if rel in ("stores/__init__.py", "stores/_urls.py"):
            continue
        parts = path.relative_to(ROOT).parts
        own = parts[1] if len(parts) > 2 and parts[1] in BACKENDS else None
        for line, name in _imported(path, ast.parse(path.read_text())):
            if name[0] == "stores" and len(name) > 1 and name[1] in BACKENDS and name[1] != own:
                out.append(f"{rel}:{line} imports {'.'.join(name)}")
    assert out == []


def test_no_private_name_is_imported_from_outside_its_package() -> None:
    """``_x`` modules and names are imported only by modules inside the package that holds
    them (tests, which test private parts on purpose, are not checked)."""
    out = []
    for path in _files(*PACKAGES):
        rel = _rel(path)
        if rel.startswith(RUN_STORE_STATEMENTS):
            continue
        package = _package_of(path)
        for line, name in _imported(path, ast.parse(path.read_text())):
            for i, part in enumerate(name):
                if part.startswith("_") and not part.startswith("__"):
                    owner = name[:i]
                    if package[: len(owner)] != owner:
                        out.append(f"{rel}:{line} imports {'.'.join(name)}")
                    break
    assert out == []


def _defined_here(tree: ast.AST) -> set[str]:
    """Every name a module binds: functions, classes, attributes, variables, arguments."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[-1])
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def test_no_module_reaches_into_another_modules_privates() -> None:
    """``x._y`` appears only where ``_y`` is defined in the same module (its own class's
    fields and methods, its own helpers) or ``x`` is a class of the module (``Cls._create``
    of trio's ``NoPublicConstructor``): no module reaches the private state of an object
    defined elsewhere."""
    out = []
    for path in _files(*PACKAGES):
        tree = ast.parse(path.read_text())
        local = _defined_here(tree)
        classes = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
                continue
            if node.attr.startswith("__") or node.attr in local:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in {"self", "cls", *classes}:
                continue
            if ast.unparse(node) in STDLIB_PRIVATE:
                continue
            out.append(f"{_rel(path)}:{node.lineno}: {ast.unparse(node)}")
    assert out == []


@pytest.mark.parametrize("package", ["actors", "runtime"])
def test_capabilities_are_read_not_probed(package: str) -> None:
    """The generic layers read a store's declared ``capabilities`` instead of probing it
    with ``getattr`` (a store's methods and flags are the contract's or the record's)."""
    out = []
    for path in _files(package):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and node.args
                and "store" in ast.unparse(node.args[0])
            ):
                out.append(f"{_rel(path)}:{node.lineno}: {ast.unparse(node)}")
    assert out == []


HIDE = textwrap.dedent(
    """
    import importlib.abc, sys

    class Hide(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"apsw", "psycopg", "zstandard"}:
                raise ModuleNotFoundError(f"No module named {name!r} (hidden)", name=name)
            return None

    sys.meta_path.insert(0, Hide())
    """
)


@pytest.mark.slow
def test_import_stores_needs_no_backend_driver() -> None:
    """With apsw, psycopg and zstandard hidden, ``import stores`` works and a MemoryStore
    stores and reads events; asking for a backend that needs a driver says which extra
    installs it."""
    program = HIDE + textwrap.dedent(
        """
        import stores
        store = stores.MemoryStore()
        store.append("s", [stores.NewEvent("user", {"text": "hi"})], expected_head=0)
        assert [e.data for e in store.read("s")] == [{"text": "hi"}]
        assert "apsw" not in sys.modules and "psycopg" not in sys.modules
        try:
            stores.PostgresStore
        except ImportError as exc:
            assert "tidelog[postgres]" in str(exc), exc
        else:
            raise AssertionError("PostgresStore loaded without psycopg")
        try:
            stores.SqliteStore
        except ImportError as exc:
            assert "apsw" in str(exc), exc
        else:
            raise AssertionError("SqliteStore loaded without apsw")
        print("ok")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
