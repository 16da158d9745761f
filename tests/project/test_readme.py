"""Every code block of the README runs as written: the Python ones as programs (and they
pass ``mypy --strict``), the shell ones in order in one shell, as a reader would type
them, in a copy of the repository."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
TIMEOUT = 300


def _blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer((ROOT / "README.md").read_text())]


def _python_blocks(tmp_path: Path) -> list[Path]:
    paths = []
    for index, (lang, code) in enumerate(_blocks()):
        if lang == "python":
            path = tmp_path / f"readme_block_{index}.py"
            path.write_text(code)
            paths.append(path)
    return paths


def test_readme_has_only_runnable_blocks() -> None:
    """Every fenced block is marked python or sh (so every one is run below), and there
    are some of each."""
    langs = [lang for lang, _ in _blocks()]
    assert set(langs) == {"python", "sh"}, langs
    assert langs.count("python") >= 4
    assert langs.count("sh") >= 2


@pytest.mark.slow
def test_python_blocks_run_as_written(tmp_path: Path) -> None:
    """Each Python block runs to completion as a program in a new directory, twice in a
    row (no state is left between runs to trip the second); a block holding test classes
    passes under pytest. (The real-model block runs in test_readme_model.py.)"""
    for path in _python_blocks(tmp_path):
        if "OpenAIChatModel(" in path.read_text():
            continue  # it talks to a model: tests/agents/test_readme_model.py runs it as
            # written against a local server speaking the provider's wire format
        tests = re.search(r"^class Test", path.read_text(), re.M) is not None
        for _ in range(1 if tests else 2):
            workdir = tmp_path / f"run-{path.stem}"
            workdir.mkdir(exist_ok=True)
            command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)]
            proc = subprocess.run(
                command if tests else [sys.executable, str(path)],
                cwd=workdir,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
            )
            assert proc.returncode == 0, f"{path.name}:\n{proc.stdout}\n{proc.stderr}"
            assert "Traceback" not in proc.stderr, path.name


@pytest.mark.slow
def test_python_blocks_pass_mypy_strict(tmp_path: Path) -> None:
    """The README's Python (the tour included) type-checks with mypy --strict, no casts."""
    paths = _python_blocks(tmp_path)
    assert not any("cast(" in path.read_text() for path in paths)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", *map(str, paths)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _copy_of_the_repository(target: Path) -> Path:
    """The tracked files in ``target``, with the real ``.venv`` linked in: the README's
    setup must find it installed and up to date (else it would reinstall the project
    from the copy into the real ``.venv``), so this fails first if it is not."""
    wanted = hashlib.sha256(
        b"".join(
            (ROOT / name).read_bytes()
            for name in ("pyproject.toml", ".ci/constraints.txt", ".ci/setup")
        )
    ).hexdigest()
    stamp = ROOT / ".venv" / ".tidelog-installed"
    if not stamp.exists() or stamp.read_text().strip() != wanted:
        pytest.fail(".venv is not up to date with pyproject.toml: run `bash .ci/setup` first")
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).write_bytes(source.read_bytes())
            (target / name).chmod(source.stat().st_mode)
    (target / ".venv").symlink_to(ROOT / ".venv")
    return target


@pytest.mark.slow
def test_shell_blocks_run_as_written(tmp_path: Path) -> None:
    """The shell blocks, in order in one bash (as a reader types them, from the
    repository root of a copy, with no virtualenv active): each command succeeds, and
    `tidelog` is on the PATH after the setup block."""
    repo = _copy_of_the_repository(tmp_path / "repo")
    script = "set -eu\n" + "\n".join(code for lang, code in _blocks() if lang == "sh")
    venv_bin = str(ROOT / ".venv" / "bin")
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != venv_bin)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"} | {"PATH": path}
    proc = subprocess.run(
        ["bash", "-c", script], cwd=repo, env=env, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "demo finished: every step checked" in proc.stdout
    assert "tidelog 0.1.0" in proc.stdout
    assert "rewound 'ada-alt': kept 1 entries" in proc.stdout
    assert "Traceback" not in proc.stderr
