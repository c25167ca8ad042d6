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


# -- the sharing and reput objects are given their collaborators ----------------------


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
