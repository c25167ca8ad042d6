"""mqcore is the bottom layer: it must never import a framework or an upper package.

Inside it, ``mqcore/format`` (RocketMQ's record bytes) is the bottom of the bottom: Spark
executors import it, so it takes nothing from the store, the broker or the services, only the
standard library, numpy, isal and the few plain mqcore modules listed in FORMAT_MAY_IMPORT.
"""

import ast
import sys
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
# What mqcore/format may import besides the standard library (a name or a dotted prefix).
FORMAT_MAY_IMPORT = (
    "mqcore.format",
    "mqcore.errors",
    "mqcore.message",
    "mqcore.clock",
    "numpy",
    "isal",
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


def imported_names(path: Path, root: Path = REPO) -> list[tuple[int, str]]:
    """Every module or name an import binds, made absolute: ``from mqcore import store`` gives
    ``mqcore.store``, and relative imports are resolved against the file's package."""
    package = list(path.relative_to(root).with_suffix("").parts[:-1])
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def offending(path: Path, root: Path = REPO) -> list[str]:
    return [
        f"{path.relative_to(root)}:{line}: imports {name}"
        for line, name in imported_modules(path)
        if name.split(".")[0] in FORBIDDEN
    ]


def format_offending(path: Path, root: Path = REPO) -> list[str]:
    return [
        f"{path.relative_to(root)}:{line}: imports {name}"
        for line, name in imported_names(path, root)
        if name.split(".")[0] not in sys.stdlib_module_names
        and not any(name == p or name.startswith(p + ".") for p in FORMAT_MAY_IMPORT)
    ]


def test_mqcore_imports_no_framework() -> None:
    files = sorted((REPO / "mqcore").rglob("*.py"))
    assert files, "mqcore has no modules?"
    problems = [p for f in files for p in offending(f)]
    assert problems == []


def test_format_imports_only_stdlib_numpy_isal_and_plain_mqcore() -> None:
    files = sorted((REPO / "mqcore" / "format").rglob("*.py"))
    assert files, "mqcore/format has no modules?"
    problems = [p for f in files for p in format_offending(f)]
    assert problems == []


@pytest.mark.parametrize(
    "source", ["import django.conf\n", "from celery import Celery\n", "import pyspark.sql as ps\n"]
)
def test_checker_catches_forbidden_imports(tmp_path: Path, source: str) -> None:
    # The guard itself must be able to fail. The probe lives under tmp_path, never in the tree.
    bad = tmp_path / "mqcore" / "_layering_probe.py"
    bad.parent.mkdir()
    bad.write_text(source)
    assert offending(bad, root=tmp_path)


@pytest.mark.parametrize(
    "source",
    [
        "from mqcore.store.commit_log import CommitLog\n",
        "from mqcore import store\n",
        "import mqcore.broker\n",
        "from mqcore.services.reput import reput_once\n",
        "from ..store import mapped_file\n",
        "import pyarrow\n",
    ],
)
def test_format_checker_catches_store_and_other_imports(tmp_path: Path, source: str) -> None:
    bad = tmp_path / "mqcore" / "format" / "_layering_probe.py"
    bad.parent.mkdir(parents=True)
    bad.write_text(source)
    assert format_offending(bad, root=tmp_path)


def test_format_checker_allows_stdlib_numpy_and_its_own_package(tmp_path: Path) -> None:
    good = tmp_path / "mqcore" / "format" / "_layering_probe.py"
    good.parent.mkdir(parents=True)
    good.write_text(
        "from __future__ import annotations\nimport struct\nimport numpy.typing as npt\n"
        "from isal.isal_zlib import crc32\nfrom mqcore.errors import MQError\n"
        "from mqcore import message\nfrom . import layout\nfrom .record import decode_record\n"
    )
    assert format_offending(good, root=tmp_path) == []
