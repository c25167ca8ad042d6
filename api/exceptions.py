"""The API's one error boundary: every failure becomes RFC 7807 ``application/problem+json``.

::

    {"type": "urn:cairn:problem:validation", "title": "Invalid input", "status": 400,
     "detail": "messages[0].body_encoding: \"hex\" is not a valid choice.",
     "field": "messages[0].body_encoding", "rule": "choice",
     "errors": [{"field": "messages[0].body_encoding", "rule": "choice", "detail": "..."}]}

``field`` and ``rule`` repeat the first entry of ``errors`` (every broken rule, when a
serializer found several). Status codes, by exception (first match wins):

=====================================================  ======  ==========================
exception                                              status  type (``urn:cairn:problem:``)
=====================================================  ======  ==========================
mqcore ``NotFoundError``, DRF ``NotFound``, Http404     404     ``not-found``
mqcore ``MessageIllegalError`` rule ``max_size`` /      413     ``too-large``
``max_batch_bytes``, :class:`RequestTooLarge`
mqcore ``ValidationError``, DRF ``ValidationError``     400     ``validation``
DRF ``ParseError``                                      400     ``malformed``
mqcore ``ConflictError``                                409     ``conflict``
DRF ``NotAuthenticated`` / ``AuthenticationFailed``     401     ``unauthenticated``
DRF ``PermissionDenied``, mqcore ``PermissionDenied``   403     ``forbidden``
DRF ``Throttled`` (failed logins, locked out)          429     ``throttled``
DRF ``MethodNotAllowed`` / ``NotAcceptable`` /          405 /   ``method-not-allowed`` ...
``UnsupportedMediaType``                                406 /
                                                        415
mqcore ``StoreNotWritableError``, ``StoreClosedError``  503     ``unavailable``
:class:`BrokerUnavailable`
any other ``MQError``                                   500     ``internal``
=====================================================  ======  ==========================

A store that refuses writes (``StoreNotWritableError``: disk full, read-only start) answers
503 with ``"code": "SERVICE_NOT_AVAILABLE"`` (RocketMQ's status for it), the store's reason as
``detail`` ("disk full: the CommitLog partition is 93% used ...") and ``Retry-After: 1``:
the refusal lifts by itself once space is freed. So does any other write that finds the disk
full (``OSError`` ``ENOSPC``/``EDQUOT``: a config file, a topic created): "disk full: ...",
never a 500.

Exceptions that are none of these propagate (a real bug is a 500 with Django's logging).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions as drf
from rest_framework.response import Response
from rest_framework.views import set_rollback

from mqcore import errors as mq
from mqcore.store.files.space import is_disk_full
from shared.serializers.errors import flatten_errors

PROBLEM_CONTENT_TYPE = "application/problem+json"
_TYPE_PREFIX = "urn:cairn:problem:"
_TOO_LARGE_RULES = frozenset({"max_size", "max_batch_bytes", "too_large"})


class RequestTooLarge(drf.APIException):
    """The request body is over ``CAIRN_API["MAX_REQUEST_BYTES"]``."""

    status_code = 413
    default_detail = "the request body is too large"
    default_code = "max_request_bytes"


class BrokerUnavailable(drf.APIException):
    """The broker runtime is not running in this process (not started, or stopping)."""

    status_code = 503
    default_detail = "the broker is not running"
    default_code = "not_started"


def problem(
    status: int,
    kind: str,
    title: str,
    detail: str,
    errors: list[dict[str, str]] | None = None,
    headers: dict[str, str] | None = None,
    code: str = "",
) -> Response:
    """A problem+json response; ``errors`` gives ``field`` and ``rule`` (first entry);
    ``code``, when given, is a machine-readable status (``SERVICE_NOT_AVAILABLE``)."""
    errors = errors or []
    first = errors[0] if errors else {"field": "", "rule": ""}
    body: dict[str, Any] = {
        "type": _TYPE_PREFIX + kind,
        "title": title,
        "status": status,
        "detail": detail,
        "field": first["field"],
        "rule": first["rule"],
        "errors": errors,
    }
    if code:
        body["code"] = code
    return Response(body, status=status, headers=headers, content_type=PROBLEM_CONTENT_TYPE)


def problem_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF ``EXCEPTION_HANDLER``: map ``exc`` to a problem response (None: let it raise)."""
    if isinstance(exc, mq.MQError):
        view = context.get("view")
        aliases = {**_FIELD_ALIASES, **getattr(view, "mq_field_aliases", {})}
        response = _from_mq(exc, aliases)
    elif is_disk_full(exc):
        detail = f"disk full: {exc} (SERVICE_NOT_AVAILABLE)"
        errors = [{"field": "broker", "rule": "not_available", "detail": detail}]
        response = problem(
            503, "unavailable", "Broker not available", detail, errors,
            {"Retry-After": "1"}, code="SERVICE_NOT_AVAILABLE",
        )  # fmt: skip
    else:
        if isinstance(exc, Http404):
            exc = drf.NotFound(*exc.args)
        elif isinstance(exc, DjangoPermissionDenied):
            exc = drf.PermissionDenied(*exc.args)
        if not isinstance(exc, drf.APIException):
            return None
        response = _from_drf(exc)
    set_rollback()
    return response


# mqcore's argument names, as the API's parameters call them.
_FIELD_ALIASES = {
    "topic_name": "topic",
    "group_name": "group",
    "begin_ms": "begin",
    "end_ms": "end",
    "max_count": "limit",
    "timestamp_ms": "timestamp",
    "tag_expression": "tag",
}


def _from_mq(exc: mq.MQError, aliases: dict[str, str]) -> Response:
    detail = str(exc)

    def _mq_error(exc: mq.MQError, field: str = "", rule: str = "") -> list[dict[str, str]]:
        name = str(getattr(exc, "field", field))
        head, dot, rest = name.partition(".")
        name = aliases.get(name) or (aliases[head] + dot + rest if head in aliases else name)
        return [{"field": name, "rule": str(getattr(exc, "rule", rule)), "detail": detail}]

    if isinstance(exc, mq.NotFoundError):
        return problem(404, "not-found", "Not found", detail, _mq_error(exc))
    if isinstance(exc, mq.MessageIllegalError) and exc.rule in _TOO_LARGE_RULES:
        return problem(413, "too-large", "Message too large", detail, _mq_error(exc))
    if isinstance(exc, mq.ValidationError):
        return problem(400, "validation", "Invalid input", detail, _mq_error(exc))
    if isinstance(exc, mq.ConflictError):
        return problem(409, "conflict", "Conflict", detail, _mq_error(exc, "", "exists"))
    if isinstance(exc, mq.PermissionDeniedError):
        errors = _mq_error(exc, "", "no_permission")
        return problem(403, "forbidden", "Not permitted by the broker", detail, errors)
    if isinstance(exc, mq.StoreNotWritableError):
        errors = _mq_error(exc, "broker", "not_available")
        return problem(
            503, "unavailable", "Broker not available", detail, errors,
            {"Retry-After": "1"}, code="SERVICE_NOT_AVAILABLE",
        )  # fmt: skip
    if isinstance(exc, mq.StoreClosedError):
        errors = _mq_error(exc, "broker", "not_available")
        return problem(503, "unavailable", "Broker not available", detail, errors)
    return problem(500, "internal", "Broker error", detail, _mq_error(exc, "", "internal"))


_DRF_KINDS: dict[type[drf.APIException], tuple[str, str, str]] = {
    # class: (type suffix, title, rule)
    drf.NotFound: ("not-found", "Not found", "not_found"),
    drf.ParseError: ("malformed", "Malformed request body", "parse"),
    drf.NotAuthenticated: ("unauthenticated", "Authentication required", "not_authenticated"),
    drf.AuthenticationFailed: ("unauthenticated", "Authentication failed", "invalid_credentials"),
    drf.PermissionDenied: ("forbidden", "Forbidden", "role"),
    drf.MethodNotAllowed: ("method-not-allowed", "Method not allowed", "method"),
    drf.NotAcceptable: ("not-acceptable", "Not acceptable", "accept"),
    drf.UnsupportedMediaType: ("unsupported-media-type", "Unsupported media type", "media_type"),
    RequestTooLarge: ("too-large", "Request too large", "max_request_bytes"),
    drf.Throttled: ("throttled", "Too many failed logins", "throttled"),
    BrokerUnavailable: ("unavailable", "Broker not available", "not_started"),
}


def _from_drf(exc: drf.APIException) -> Response:
    headers: dict[str, str] = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = str(exc.auth_header)  # type: ignore[attr-defined]
    if isinstance(exc, drf.Throttled) and exc.wait is not None:
        headers["Retry-After"] = str(max(1, int(exc.wait)))
    if isinstance(exc, drf.ValidationError):
        errors = flatten_errors(exc.detail)
        detail = "; ".join(
            f"{e['field']}: {e['detail']}" if e["field"] else e["detail"] for e in errors
        )
        return problem(400, "validation", "Invalid input", detail, errors, headers)
    kind, title, rule = next(
        (value for cls, value in _DRF_KINDS.items() if isinstance(exc, cls)),
        ("error", "Error", exc.default_code),
    )
    detail = str(exc.detail)
    field = "body" if isinstance(exc, drf.ParseError | RequestTooLarge) else ""
    errors = [{"field": field, "rule": rule, "detail": detail}]
    return problem(exc.status_code, kind, title, detail, errors, headers)
