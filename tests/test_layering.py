"""The layers, as imports: every top-level package of the repository is checked.

* No import cycles between packages, and none between the modules of one package. Every
  import counts, wherever it is written (at the top, inside a function, under
  ``TYPE_CHECKING``): an import moved into a function to dodge a cycle is still one.
* ``webui`` never imports ``api``: what the console and the REST API share is in ``shared``
  (validation, JSON shapes) and ``accounts`` (users, roles, permissions, the audit log), and
  neither imports a front end.
* The Kafka listener imports only ``mqcore``: it reaches the accounts through
  ``mqcore.access.backend.AccessBackend``.
* ``mqcore`` is the bottom layer: it never imports a framework or an upper package.
* Inside it, ``mqcore/format`` (RocketMQ's record bytes) is the bottom of the bottom: Spark
  executors import it, so it takes nothing from the store, the broker or the services, only
  the standard library, numpy, isal and the few plain mqcore modules in FORMAT_MAY_IMPORT.

The checks read the source with :mod:`ast` and import nothing; their probes (the checks must
be able to fail) are written under ``tmp_path``, never into the tree.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: Top-level directories that hold code but are not packages of the product.
NOT_CHECKED = frozenset({"tests"})
FRAMEWORKS = ("django", "rest_framework", "channels", "celery", "pyspark")
# What mqcore/format may import besides the standard library (a name or a dotted prefix).
FORMAT_MAY_IMPORT = (
    "mqcore.format",
    "mqcore.errors",
    "mqcore.message",
    "mqcore.clock",
    "numpy",
    "isal",
)
#: Cycles between modules of one package that exist today: modules of the store that still
#: take the whole ``MessageStore`` (issue 16 takes them apart), and ``index_file.py`` <->
#: ``index_check.py``. A cycle listed here must still exist (the test says so when one is
#: gone, so the list only shrinks); no new one may appear.
KNOWN_CYCLES: tuple[frozenset[str], ...] = (
    frozenset({"mqcore.store.index.index_check", "mqcore.store.index.index_file"}),
    frozenset(
        {
            "mqcore.store.recovery.derived_start",
            "mqcore.store.recovery.full_disk",
            "mqcore.store.offset_table",
            "mqcore.store.store",
        }
    ),
)


def packages(root: Path = REPO) -> list[str]:
    """The top-level packages: directories with an ``__init__.py``."""
    return sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir() and (p / "__init__.py").is_file() and p.name not in NOT_CHECKED
    )


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``package`` (``pkg/__init__.py`` is
    the module ``pkg``)."""
    found: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


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


def module_graph(root: Path = REPO) -> dict[str, set[str]]:
    """Module -> the modules of the repository it imports. ``from a.b import c`` imports the
    module ``a.b.c`` when there is one, else ``a.b`` (``c`` is a name in it); the parent
    packages an import runs implicitly are not counted (every module would depend on its
    package's ``__init__``)."""
    modules: dict[str, Path] = {}
    for package in packages(root):
        modules.update(module_files(root, package))
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for _, imported in imported_names(path, root):
            target = imported
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].add(target)
    return graph


def package_graph(graph: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """Top-level package -> the other top-level packages its modules import."""
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        top = module.split(".")[0]
        out.setdefault(top, set()).update(
            t.split(".")[0] for t in targets if t.split(".")[0] != top
        )
    return out


def cycles(graph: Mapping[str, Iterable[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def within_package_cycles(graph: Mapping[str, Iterable[str]]) -> list[frozenset[str]]:
    """Cycles among the modules of one top-level package (only its own imports)."""
    inside = {
        m: {t for t in targets if t.split(".")[0] == m.split(".")[0]}
        for m, targets in graph.items()
    }
    return cycles(inside)


def upward_imports(root: Path, package: str, forbidden: Iterable[str]) -> list[str]:
    """``file:line: imports name`` for each import in ``package`` of a forbidden top-level
    name (a framework or another package)."""
    banned = set(forbidden)
    return [
        f"{path.relative_to(root)}:{line}: imports {name}"
        for path in module_files(root, package).values()
        for line, name in imported_modules(path)
        if name.split(".")[0] in banned
    ]


def offending(path: Path, root: Path = REPO) -> list[str]:
    """mqcore's rule for one file: no framework, no other package of the repository."""
    banned = set(FRAMEWORKS) | (set(packages(root)) - {"mqcore"})
    return [
        f"{path.relative_to(root)}:{line}: imports {name}"
        for line, name in imported_modules(path)
        if name.split(".")[0] in banned
    ]


def format_offending(path: Path, root: Path = REPO) -> list[str]:
    return [
        f"{path.relative_to(root)}:{line}: imports {name}"
        for line, name in imported_names(path, root)
        if name.split(".")[0] not in sys.stdlib_module_names
        and not any(name == p or name.startswith(p + ".") for p in FORMAT_MAY_IMPORT)
    ]


def _describe(component: frozenset[str], graph: Mapping[str, Iterable[str]]) -> str:
    edges = sorted(f"{a} -> {b}" for a in component for b in graph.get(a, ()) if b in component)
    return "; ".join(edges)


# -- the rules, on the repository -----------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    """The repository's module graph (read once: parsing every module takes seconds)."""
    return module_graph()


def test_every_top_level_package_is_checked(graph: dict[str, set[str]]) -> None:
    found = packages()
    assert {"mqcore", "api", "webui", "accounts", "kafka_listener"} <= set(found), found
    assert set(package_graph(graph)) == set(found)


def test_no_import_cycles_between_packages(graph: dict[str, set[str]]) -> None:
    between = package_graph(graph)
    assert [_describe(c, between) for c in cycles(between)] == []


def test_no_import_cycles_within_a_package(graph: dict[str, set[str]]) -> None:
    found = within_package_cycles(graph)
    new = [_describe(c, graph) for c in found if c not in KNOWN_CYCLES]
    assert new == []
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert gone == [], "no longer a cycle: take it out of KNOWN_CYCLES"


def test_webui_never_imports_api() -> None:
    assert upward_imports(REPO, "webui", ["api"]) == []


@pytest.mark.parametrize("package", ["shared", "accounts"])
def test_what_the_front_ends_share_imports_no_front_end(package: str) -> None:
    # webui would import api through them otherwise.
    assert upward_imports(REPO, package, ["api", "webui", "kafka_listener", "server"]) == []


def test_kafka_listener_reaches_the_accounts_only_through_the_access_backend() -> None:
    # Roles, ACL entries and the audit log come through mqcore.access.backend.AccessBackend
    # (the runtime hands it accounts.access.DjangoAccess): the listener imports no Django.
    others = set(packages()) - {"kafka_listener", "mqcore"}
    assert upward_imports(REPO, "kafka_listener", [*FRAMEWORKS, *others]) == []


def test_mqcore_imports_no_framework_and_no_upper_package() -> None:
    files = sorted((REPO / "mqcore").rglob("*.py"))
    assert files, "mqcore has no modules?"
    problems = [p for f in files for p in offending(f)]
    assert problems == []


def test_format_imports_only_stdlib_numpy_isal_and_plain_mqcore() -> None:
    files = sorted((REPO / "mqcore" / "format").rglob("*.py"))
    assert files, "mqcore/format has no modules?"
    problems = [p for f in files for p in format_offending(f)]
    assert problems == []


# -- the checks can fail: probes under tmp_path, never in the tree ---------------------------


def _tree(root: Path, files: Mapping[str, str]) -> Path:
    """A repository of ``files`` (path -> source) under ``root``, packages made as needed."""
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(root).parents:
            if parent != Path("."):
                (root / parent / "__init__.py").touch()
        path.write_text(source)
    return root


@pytest.mark.parametrize(
    "source",
    [
        "import django.conf\n",
        "from celery import Celery\n",
        "import pyspark.sql as ps\n",
        "from accounts.roles import role_of\n",
        "import kafka_listener.server\n",
        "from shared import health\n",
    ],
)
def test_checker_catches_forbidden_imports(tmp_path: Path, source: str) -> None:
    root = _tree(
        tmp_path,
        {
            "mqcore/_layering_probe.py": source,
            "accounts/roles.py": "",
            "kafka_listener/server.py": "",
            "shared/health.py": "",
        },
    )
    assert offending(root / "mqcore" / "_layering_probe.py", root=root)


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


@pytest.mark.parametrize(
    "files",
    [
        # at the top of both modules
        {"a/x.py": "from b.y import f\n", "b/y.py": "import a.x\n"},
        # one side inside a function (the usual way to hide one)
        {"a/x.py": "import b.y\n", "b/y.py": "def f():\n    from a import x\n"},
        # through a third package, with a relative import inside one
        {
            "a/x.py": "from c import z\n",
            "b/y.py": "from a.x import f\n",
            "c/z.py": "from . import w\n",
            "c/w.py": "import b.y\n",
        },
        # one side only for the type checker
        {
            "a/x.py": "import b.y\n",
            "b/y.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from a.x import X\n",
        },
    ],
)
def test_cycle_check_catches_cycles_between_packages(tmp_path: Path, files: dict[str, str]) -> None:
    between = package_graph(module_graph(_tree(tmp_path, files)))
    assert cycles(between)


def test_cycle_check_catches_cycles_within_a_package(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "a/__init__.py": "from .x import f\n",
            "a/x.py": "from .y import g\n",
            "a/y.py": "from a import f\n",
            "a/z.py": "import a.x\n",
        },
    )
    graph = module_graph(root)
    assert within_package_cycles(graph) == [frozenset({"a", "a.x", "a.y"})]
    assert cycles(package_graph(graph)) == []


def test_cycle_check_passes_a_layered_tree(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "low/x.py": "import json\n",
            "mid/y.py": "from low import x\nfrom low.x import loads\n",
            "top/z.py": "import mid.y\nfrom low.x import json\nfrom . import w\n",
            "top/w.py": "from mid import y\n",
        },
    )
    graph = module_graph(root)
    assert cycles(package_graph(graph)) == []
    assert within_package_cycles(graph) == []
    assert package_graph(graph) == {"low": set(), "mid": {"low"}, "top": {"low", "mid"}}


def test_webui_check_catches_an_api_import(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "api/views.py": "",
            "webui/views.py": "def page():\n    from api.views import born_host\n",
        },
    )
    assert upward_imports(root, "webui", ["api"]) == ["webui/views.py:2: imports api.views"]
