"""Runs a connection's SASL steps against the accounts store, off the event loop.

``sasl.py`` decides (sans I/O) and asks for look-ups; this module makes them. Every
:class:`~mqcore.access.backend.AccessBackend` call may block on a database, so each runs in a
worker thread (``asyncio.to_thread``). The backend records logins and lockouts (failure
counters, the audit log); here every call names the client's address and the front end
``kafka``, and a refused login is logged at INFO with the user and the reason, never the
secret.

Order of checks, so a locked-out account costs no password hash and tells nothing:
``login_allowed`` first, then ``authenticate_password`` (PLAIN) or ``scram_user`` followed,
after the client's proof, by ``login_finished`` (SCRAM).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from mqcore.access.authorizer import Subject
from mqcore.access.backend import AccessBackend, LoginRefused
from mqcore.access.scram import ScramUser

from .sasl import CheckPassword, FinishScram, LookUpScram, Reply, SaslSession

log = logging.getLogger(__name__)
FRONT_END = "kafka"


def _check_password(
    access: AccessBackend, step: CheckPassword, host: str
) -> Subject | LoginRefused:
    refused = access.login_allowed(step.username, host)
    if refused is not None:
        return refused
    return access.authenticate_password(step.username, step.password, host, FRONT_END)


def _look_up_scram(
    access: AccessBackend, step: LookUpScram, host: str
) -> tuple[ScramUser | None, LoginRefused | None]:
    refused = access.login_allowed(step.username, host)
    if refused is not None:
        return None, refused
    return access.scram_user(step.mechanism, step.username), None


async def authenticate(
    access: AccessBackend,
    session: SaslSession,
    token: bytes,
    version: int,
    host: str,
    now_ms: Callable[[], int],
) -> Reply:
    """Take one client token through ``session``; return the reply to send.

    Args:
        version: the SaslAuthenticate version (0 for a bare token after a v0 handshake).
        host: the client's address, for the backend's throttling and audit.
        now_ms: the listener's clock (when the session starts, for re-authentication).
    """
    step = session.authenticate(token, version)
    username = None
    if isinstance(step, CheckPassword):
        username = step.username
        result = await asyncio.to_thread(_check_password, access, step, host)
        reply = session.login_result(result, now_ms())
    elif isinstance(step, LookUpScram):
        username = step.username
        user, refused = await asyncio.to_thread(_look_up_scram, access, step, host)
        reply = session.scram_user_found(user, refused)
    elif isinstance(step, FinishScram):
        username = step.username
        if not step.succeeded:
            log.info("Kafka SCRAM exchange of %r from %s failed: %s", username, host, step.detail)
        result = await asyncio.to_thread(
            access.login_finished, step.username, host, FRONT_END, step.succeeded, step.mechanism
        )
        reply = session.login_result(result, now_ms())
    else:
        reply = step
    if reply.close:
        log.info(
            "Kafka %s login%s from %s refused: %s",
            session.mechanism or "SASL",
            f" of {username!r}" if username is not None else "",
            host,
            reply.detail or reply.error_message,
        )
    return reply


async def certificate_subject(access: AccessBackend, common_name: str, host: str) -> Subject | None:
    """The subject a verified client certificate's CN stands for, recorded as a login
    (mechanism ``TLS``); None when no enabled user has that name or it is locked out."""

    def run() -> Subject | None:
        refused = access.login_allowed(common_name, host)
        if refused is not None:
            log.info("Kafka TLS client %r from %s refused: %s", common_name, host, refused.reason)
            return None
        if access.subject_for_certificate(common_name, host, FRONT_END) is None:
            log.info("Kafka TLS client certificate %r from %s names no user", common_name, host)
            return None
        result = access.login_finished(common_name, host, FRONT_END, True, "TLS")
        if isinstance(result, LoginRefused):
            log.info("Kafka TLS client %r from %s refused: %s", common_name, host, result.reason)
            return None
        return result

    return await asyncio.to_thread(run)


def common_name(peercert: object) -> str | None:
    """The subject CN of a verified peer certificate (``SSLObject.getpeercert()``)."""
    if not isinstance(peercert, dict):
        return None
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
