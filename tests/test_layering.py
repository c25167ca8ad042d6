"""mqcore is the bottom layer: it must never import a framework or an upper package."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FORBIDDEN = (
    "django",
    "rest_framework",
    "channels",
    "celery",
    "pyspark",
    "api",
    "webui",
    "workers",
    "cairn",
)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def offending(path: Path) -> list[str]:
    return [
        f"{path.relative_to(REPO)}:{line}: imports {name}"
        for line, name in imported_modules(path)
        if name.split(".")[0] in FORBIDDEN
    ]


def test_mqcore_imports_no_framework() -> None:
    files = sorted((REPO / "mqcore").rglob("*.py"))
    assert files, "mqcore has no modules?"
    problems = [p for f in files for p in offending(f)]
    assert problems == []


@pytest.mark.parametrize(
    "source", ["import django.conf\n", "from celery import Celery\n", "import pyspark.sql as ps\n"]
)
def test_checker_catches_forbidden_imports(tmp_path: Path, source: str) -> None:
    # The guard itself must be able to fail.
    bad = REPO / "mqcore" / "_layering_probe.py"
    try:
        bad.write_text(source)
        assert offending(bad)
    finally:
        bad.unlink()
