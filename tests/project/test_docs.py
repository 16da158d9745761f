"""What the documentation names exists: every file path and module it cites."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([*ROOT.glob("docs/*.md"), ROOT / "README.md", *ROOT.glob("bench/*.md")])
#: A path in backticks: ``stores/_batching.py``, ``bench/probes/``, a bare ``_models.py``.
PATH = re.compile(r"`((?:[\w.-]+/)*[\w.-]+\.(?:py|md)|(?:[\w.-]+/)+)`")
#: A dotted name in backticks under one of the project's packages: ``stores._listening``.
DOTTED = re.compile(r"`((?:stores|actors|runtime|bench)(?:\.\w+)+)`")
#: Paths that documents name as things a run creates, not files of the tree.
CREATED = {
    ".venv/",
    "bench/results/",
    "sessions/",
    "locks/",
    "index/",
    "migrated/",
    "tmp/",
    "bases/",
    "intents/",
}


def _cited(pattern: re.Pattern[str]) -> list[tuple[Path, str]]:
    return [(doc, m.group(1)) for doc in DOCS for m in pattern.finditer(doc.read_text())]


def _exists(doc: Path, path: str) -> bool:
    if "/" in path.rstrip("/"):  # from the root, or from the document's folder
        return (ROOT / path).exists() or (doc.parent / path).exists()
    # A bare file name (a module named in a list under its folder): somewhere in the tree.
    name = path.rstrip("/")
    return any(p for p in ROOT.rglob(name) if ".venv" not in p.parts and ".git" not in p.parts)


def test_every_cited_path_exists() -> None:
    """Every file or folder path a document names (in backticks) is in the tree."""
    missing = [
        f"{doc.name}: {path}"
        for doc, path in _cited(PATH)
        if path not in CREATED and "..." not in path and not _exists(doc, path)
    ]
    assert missing == []


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_cited_module_exists() -> None:
    """Every dotted module or name a document cites (``stores._listening``,
    ``runtime.agents.prune``) imports and resolves."""
    missing = [f"{doc.name}: {name}" for doc, name in _cited(DOTTED) if not _resolves(name)]
    assert missing == []
