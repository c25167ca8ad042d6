"""``/config/``: RocketMQ's config documents (topics.json, subscriptionGroup.json,
consumerOffset.json): view and download (``DESCRIBE`` on the cluster: viewers and up), and
upload to replace a whole table (``ALTER`` on the cluster: admins).

An upload is checked and compared first: the page shows the diff (entries added, removed,
changed field by field) and what it strands (a removed topic's messages per queue and its
groups with lag, ...: :func:`shared.impact.config_diff`); the table is replaced only when the
user confirms that diff (POST ``action=apply`` with the preview's token, :mod:`webui.pending`).
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from accounts import audit
from mqcore.access.model import Operation, Resource
from mqcore.broker import Broker
from mqcore.errors import MQError
from mqcore.errors import ValidationError as MQValidationError
from mqcore.metadata.config_file import ConfigFileManager
from mqcore.metadata.jsonfile import loads_fastjson
from shared import impact
from webui import pending
from webui.access import console_page, get_broker, may, require
from webui.views.common import checkbox

DOCUMENTS = {
    "topics.json": (
        "Topics",
        "every topic's queues, permission and attributes",
        "topicConfigTable",
    ),
    "subscriptionGroup.json": (
        "Subscription groups",
        "every group's consume and retry settings",
        "subscriptionGroupTable",
    ),
    "consumerOffset.json": (
        "Consumer offsets",
        "each group's committed offset per topic and queue",
        "offsetTable",
    ),
}
MAX_UPLOAD_BYTES = 16 * 1024 * 1024
PREVIEW_CHARS = 200_000


def _manager(broker: Broker, document: str) -> ConfigFileManager[Any]:
    metadata = broker.metadata
    managers: dict[str, ConfigFileManager[Any]] = {
        "topics.json": metadata.topics,
        "subscriptionGroup.json": metadata.groups,
        "consumerOffset.json": metadata.offsets,
    }
    if document not in managers:
        raise Http404(document)
    return managers[document]


def _parsed(text: str) -> Any:
    """The document as plain JSON data (consumerOffset's bare integer keys become strings)."""
    return json.loads(json.dumps(loads_fastjson(text)))


def _summary(document: str, text: str) -> dict[str, Any]:
    table_name = DOCUMENTS[document][2]
    try:
        data = _parsed(text)
    except ValueError:
        return {"entries": None, "version": None}
    table = data.get(table_name) or {}
    version = data.get("dataVersion") or {}
    return {
        "entries": len(table),
        "version": version.get("counter"),
        "timestamp": version.get("timestamp"),
    }


def _documents(broker: Broker) -> list[dict[str, Any]]:
    docs = []
    for name, (title, meaning, _table) in DOCUMENTS.items():
        text = _manager(broker, name).to_document()
        docs.append(
            {
                "name": name,
                "title": title,
                "meaning": meaning,
                "size": len(text.encode("utf-8")),
                "text": text[:PREVIEW_CHARS],
                "cut": len(text) > PREVIEW_CHARS,
                **_summary(name, text),
                **(_offsets_activity(broker) if name == "consumerOffset.json" else {}),
            }
        )
    return docs


def _offsets_activity(broker: Broker) -> dict[str, Any]:
    """When offsets really last changed: consumerOffset.json's dataVersion moves only every
    500th commit (as RocketMQ writes it), so "data version 0 · changed 7 min ago" could
    stand next to a minute of commits."""
    commits, last_change_ms = broker.metadata.offsets.activity
    return {"commits": commits, "timestamp": last_change_ms} if commits else {"commits": 0}


def _uploaded_text(request: HttpRequest, target: str) -> tuple[str, str]:
    """The uploaded file's (or the pasted) document, and an error ("" when none)."""
    upload = request.FILES.get("file")
    if upload is not None:
        if upload.size is not None and upload.size > MAX_UPLOAD_BYTES:
            return "", f"the file is larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MiB"
        try:
            text = upload.read().decode("utf-8")
        except UnicodeDecodeError:
            return "", "the file is not UTF-8 text"
    else:
        text = request.POST.get("text", "")
    if not text.strip():
        return "", f"choose a {target} file (or paste the document)"
    return text, ""


def _refusal(exc: MQError) -> str:
    field = getattr(exc, "field", "")
    return f"{exc}" + (f" (at {field})" if field and field not in str(exc) else "")


def _diff(
    broker: Broker, manager: ConfigFileManager[Any], target: str, text: str
) -> dict[str, Any]:
    """The import's diff against the table now. Raises MQError for a broken document."""
    try:
        preview = manager.preview_document(text)
    except RecursionError:
        raise MQValidationError("document", "json", "the document is nested too deeply") from None
    return impact.config_diff(broker, target, manager.to_document(), preview)


def _preview(
    request: HttpRequest,
    target: str,
    diff: dict[str, Any],
    token: str,
    *,
    error: str = "",
    notice: str = "",
    status: int = 200,
) -> HttpResponse:
    return render(
        request,
        "webui/config_preview.html",
        {
            "section": "config",
            "document": target,
            "title": DOCUMENTS[target][0],
            "diff": diff,
            "token": token,
            "error": error,
            "notice": notice,
        },
        status=status,
    )


def _apply(
    request: HttpRequest, broker: Broker, target: str, manager: ConfigFileManager[Any]
) -> HttpResponse | str:
    """POST ``action=apply``: replace the table with the previewed upload if the user ticked
    the box and the diff is still the one shown; else the preview again (or an error)."""
    token = request.POST.get("token", "")
    found = pending.get(token, request.user.pk)
    if found is None or found.document != target:
        return "this preview has expired: choose the file again"
    try:
        diff = _diff(broker, manager, target, found.text)
    except MQError as exc:
        return _refusal(exc)
    if pending.diff_key(diff) != found.base:
        pending.drop(token)
        token = pending.put(request.user.pk, target, found.text, pending.diff_key(diff))
        notice = (
            f"{target} changed since the preview (another change, or the broker): "
            "this is what the upload would change now."
        )
        return _preview(request, target, diff, token, notice=notice)
    if not checkbox(request.POST, "confirm"):
        error = "tick the box to confirm that the whole table is replaced"
        return _preview(request, target, diff, token, error=error, status=400)
    old_text = manager.to_document()
    try:
        manager.replace_from_document(found.text)
    except MQError as exc:
        return _preview(request, target, diff, token, error=_refusal(exc), status=400)
    pending.drop(token)
    new_text = manager.to_document()
    audited = {k: diff[k] for k in ("added", "removed", "changed", "impact", "summary")}
    audit.record(
        request,
        "config.import",
        "config",
        target,
        old=_parsed(old_text),
        new=_parsed(new_text) | {"diff": audited},
    )
    entries = _summary(target, new_text)["entries"]
    messages.success(request, f"{target} imported: {entries} entries ({diff['summary']}).")
    return redirect("webui:config")


@console_page(read_role=None, write_role=None)
def config_page(request: HttpRequest) -> HttpResponse:
    broker = get_broker()
    require(request, Operation.DESCRIBE, Resource.cluster())
    errors: dict[str, str] = {}
    target = ""
    if request.method == "POST":
        require(request, Operation.ALTER, Resource.cluster())
        target = request.POST.get("document", "")
        manager = _manager(broker, target)
        if request.POST.get("action") == "apply":
            applied = _apply(request, broker, target, manager)
            if not isinstance(applied, str):
                return applied
            errors[target] = applied
        else:
            text, errors[target] = _uploaded_text(request, target)
            if not errors[target]:
                try:
                    diff = _diff(broker, manager, target, text)
                except MQError as exc:
                    errors[target] = _refusal(exc)
                else:
                    token = pending.put(request.user.pk, target, text, pending.diff_key(diff))
                    return _preview(request, target, diff, token)
        errors = {k: v for k, v in errors.items() if v}
    return render(
        request,
        "webui/config.html",
        {
            "section": "config",
            "documents": _documents(broker),
            "errors": errors,
            "target": target,
            "may_import": may(request, Operation.ALTER, Resource.cluster()),
        },
        status=400 if errors else 200,
    )


@console_page(read_role=None)
def config_download(request: HttpRequest, document: str) -> HttpResponse:
    require(request, Operation.DESCRIBE, Resource.cluster())
    text = _manager(get_broker(), document).to_document()
    response = HttpResponse(text.encode("utf-8"), content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{document}"'
    return response
