"""A store's process role: who else works on the same store directory (Celery mode).

Three process roles (``MessageStore(root, config, role=...)``)::

    role        <root>/lock   CommitLog                 ConsumeQueue / IndexFile / checkpoint
    ----------  ------------  ------------------------  ---------------------------------------
    standalone  held          writes                    writes (reput, flush, cleanup in-process)
    broker      held          writes                    follows what a worker writes (read-only)
    services    never         follows (mapped read-only) follows; writes once it holds reput

``standalone`` is the embedded default (``CAIRN_SERVICES=inline``). With
``CAIRN_SERVICES=celery`` the broker process opens ``broker`` and Celery workers open
``services``; the files and ``<root>/services/progress`` (``progress.py``) are all they share.
The role's values are part of that interface (``mqcore.services.inline.store_role``,
``workers/stores.py``, ``cairn`` commands) and do not change.

The objects of this package, each given its collaborators:

* :class:`~mqcore.store.sharing.derived_views.DerivedViews`: this process's view of the
  ConsumeQueues, index files and checkpoint (a follower replaces them as others write).
* :class:`~mqcore.store.sharing.publisher.Publisher`: the offsets this process publishes.
* :class:`~mqcore.store.sharing.follower.Follower`: catching up with what others published.
* :class:`~mqcore.store.sharing.reput_holder.ReputHolder`: a services process that writes
  the derived files (attach, each reput pass, detach).
* :func:`~mqcore.store.sharing.writer_open.open_writer`: the broker's start.

Not to be confused with user roles (viewer, operator, admin: ``mqcore/access``).
"""

from __future__ import annotations

from typing import Literal

ProcessRole = Literal["standalone", "broker", "services"]
PROCESS_ROLES: tuple[ProcessRole, ...] = ("standalone", "broker", "services")


def check_process_role(role: str, *, readonly: bool) -> ProcessRole:
    """``role`` if it is a process role a store can open with, else ValueError.

    A read-only open (tools, Spark) takes no part in the sharing: only ``standalone``.

    Raises:
        ValueError: an unknown role, or ``broker``/``services`` with ``readonly``.
    """
    for known in PROCESS_ROLES:
        if role == known and (known == "standalone" or not readonly):
            return known
    raise ValueError(f"role must be one of {PROCESS_ROLES} (and standalone if readonly)")
