"""The store's subpackages stay layered: ``files/`` is the bottom of the store.

``mqcore/store/files`` (mapped files, segment queues, locks, disk space) is what every other
part of the store builds on, so it takes nothing from them: within the store it may import
only itself and ``config`` (the knobs). The rule is checked on the source, like
``tests/test_layering.py``.
"""

from pathlib import Path

from tests.test_layering import REPO, imported_names

FILES_MAY_IMPORT = ("mqcore.store.files", "mqcore.store.config")


def store_offending(path: Path, root: Path = REPO) -> list[str]:
    return [
        f"{path.relative_to(root)}:{line}: imports {name}"
        for line, name in imported_names(path, root)
        if name.startswith("mqcore.store.")
        and not any(name == p or name.startswith(p + ".") for p in FILES_MAY_IMPORT)
    ]


def test_files_imports_nothing_else_of_the_store() -> None:
    files = sorted((REPO / "mqcore" / "store" / "files").rglob("*.py"))
    assert len(files) > 5, "mqcore/store/files has lost its modules?"
    assert [p for f in files for p in store_offending(f)] == []


def test_the_files_rule_can_fail(tmp_path: Path) -> None:
    probe = tmp_path / "mqcore" / "store" / "files" / "_probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text(
        "from mqcore.store.commit_log import CommitLog\nfrom mqcore.store.files import libc\n"
    )
    assert store_offending(probe, root=tmp_path) == [
        "mqcore/store/files/_probe.py:1: imports mqcore.store.commit_log.CommitLog"
    ]


# -- no import cycles inside the store ----------------------------------------------------

#: Cycles not broken yet, each through ``if TYPE_CHECKING:`` imports of the module named
#: first (the modules still take the whole ``MessageStore``). The list may only shrink: the
#: test fails on any other cycle, and on a listed one that is gone (then delete it here).
KNOWN_CYCLES = {
    frozenset({"mqcore.store.index.index_file", "mqcore.store.index.index_check"}),
    frozenset(
        {
            "mqcore.store.store",
            "mqcore.store.offset_table",
            "mqcore.store.recovery.derived_start",
            "mqcore.store.recovery.full_disk",
        }
    ),
}


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path, root: Path = REPO) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports, ``TYPE_CHECKING`` imports included
    (they tie the modules together as much as the others: mypy and a reader follow them)."""
    modules = {module_name(p, root): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for _line, imported in imported_names(path, root):
            # ``from a.b import c`` binds a.b.c: the module a.b.c, else the module a.b.
            target = imported if imported in modules else imported.rpartition(".")[0]
            if target in modules and target != name:
                deps.add(target)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_store_has_no_new_import_cycle() -> None:
    graph = import_graph(REPO / "mqcore" / "store")
    assert len(graph) > 40, "mqcore/store has lost its modules?"
    assert cycles(graph) == KNOWN_CYCLES


def test_the_sharing_and_reput_packages_do_not_import_the_store_facade() -> None:
    """The objects of ``sharing/`` and ``reput/`` are given their collaborators; none reaches
    back into ``MessageStore`` (RocketMQ's ``DefaultMessageStore.this``)."""
    graph = import_graph(REPO / "mqcore" / "store")
    reaching = sorted(
        name
        for name, deps in graph.items()
        if name.startswith(("mqcore.store.sharing", "mqcore.store.reput"))
        and "mqcore.store.store" in deps
    )
    assert reaching == []


def test_the_cycle_check_can_fail(tmp_path: Path) -> None:
    package = tmp_path / "mqcore" / "store"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from mqcore.store.sub import b\n")
    (package / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mqcore.store.a import A\n"
    )
    (package / "c.py").write_text("from mqcore.store import a\n")
    assert cycles(import_graph(package, root=tmp_path)) == {
        frozenset({"mqcore.store.a", "mqcore.store.sub.b"})
    }
