"""``/config/``: RocketMQ's config documents (topics.json, subscriptionGroup.json,
consumerOffset.json): view and download (``DESCRIBE`` on the cluster: viewers and up), and
upload to replace a whole table (``ALTER`` on the cluster: admins)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from api import audit
from mqcore.access.model import Operation, Resource
from mqcore.broker import Broker
from mqcore.errors import MQError
from mqcore.metadata.config_file import ConfigFileManager
from mqcore.metadata.jsonfile import loads_fastjson
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
        upload = request.FILES.get("file")
        if upload is not None:
            if upload.size is not None and upload.size > MAX_UPLOAD_BYTES:
                errors[target] = f"the file is larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MiB"
                text = ""
            else:
                raw = upload.read()
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    errors[target] = "the file is not UTF-8 text"
                    text = ""
        else:
            text = request.POST.get("text", "")
        if not errors and not text.strip():
            errors[target] = f"choose a {target} file (or paste the document)"
        if not errors and not checkbox(request.POST, "confirm"):
            errors[target] = "tick the box to confirm that the whole table is replaced"
        if not errors:
            old_text = manager.to_document()
            try:
                manager.replace_from_document(text)
            except MQError as exc:
                field = getattr(exc, "field", "")
                errors[target] = f"{exc}" + (
                    f" (at {field})" if field and field not in str(exc) else ""
                )
            else:
                new_text = manager.to_document()
                audit.record(
                    request,
                    "config.import",
                    "config",
                    target,
                    old=_parsed(old_text),
                    new=_parsed(new_text),
                )
                summary = _summary(target, new_text)
                messages.success(
                    request,
                    f"{target} imported: {summary['entries']} entries, nothing else changed.",
                )
                return redirect("webui:config")
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
