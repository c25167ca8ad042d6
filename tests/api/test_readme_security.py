"""The README's "Security" examples, run: the requests of its ACL commands go to the REST API
in order (as an admin), then each service may do exactly what the README says."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts import service
from mqcore.broker import Broker
from tests.api.conftest import token_client

pytestmark = pytest.mark.django_db

README = Path(__file__).resolve().parents[2] / "README.md"
BASE = "http://127.0.0.1:8080"
SEND = {"messages": [{"body": "x"}]}


def readme_commands() -> list[list[str]]:
    """The curl commands of the shell block under "### ACLs", as argument lists (as the shell
    splits them: comments dropped, quotes spanning lines kept whole), the
    ``for u in ...; do ... done`` loop unrolled."""
    text = README.read_text()
    section = text[text.index("### ACLs") :]
    start = section.index("```sh\n") + 6
    block = section[start : section.index("\n```", start)]
    lexer = shlex.shlex(block.replace("\\\n", " "), posix=True, punctuation_chars=";")
    lexer.whitespace_split = True
    words = list(lexer)
    commands: list[list[str]] = []
    i = 0
    while i < len(words):
        if words[i] == "for":  # for VAR in VALUES ; do COMMAND ; done
            variable, end = words[i + 1], words.index(";", i)
            values = words[i + 3 : end]
            done = words.index("done", end)
            body = [w for w in words[end + 2 : done] if w != ";"]
            commands += [[w.replace(f"${variable}", v) for w in body] for v in values]
            i = done + 1
        elif words[i] == "curl":
            end = next((j for j in range(i + 1, len(words)) if words[j] == "curl"), len(words))
            commands.append([w for w in words[i:end] if w != ";"])
            i = end
        else:
            i += 1
    assert len(commands) == 9 and all(c[0] == "curl" for c in commands), commands
    return commands


def run(client: APIClient, words: list[str]) -> Any:
    """One curl command's request, through the test client."""
    method, body, url = "GET", None, None
    i = 1
    while i < len(words):
        word = words[i]
        if word == "-X":
            method, i = words[i + 1], i + 2
        elif word == "-H":
            i += 2  # the admin client authenticates itself
        elif word == "-d":
            body, i = words[i + 1], i + 2
            method = "POST" if method == "GET" else method
        elif word.startswith("http"):
            url, i = word, i + 1
        else:
            i += 1
    assert url is not None and url.startswith(BASE), words
    response = client.generic(
        method, url.removeprefix(BASE), body or "", content_type="application/json"
    )
    assert response.status_code < 300, (words, response.content[:300])
    return response.json()


def test_the_readme_acl_examples_do_what_they_say(admin: APIClient, broker: Broker) -> None:
    for name in ("orders-eu", "orders-us", "payroll", "weather"):
        broker.admin.create_topic(name, read_queue_nums=1, write_queue_nums=1)
    broker.admin.create_group("billing")
    commands = readme_commands()
    *setup, delete = commands
    answers = [run(admin, words) for words in setup]
    issued = next(a for a in answers if "token" in a)
    assert issued["username"] == "order-service"

    producer = APIClient()
    producer.credentials(HTTP_AUTHORIZATION=f"Token {issued['token']}")
    users = {
        name: service.get_user(name) for name in ("order-service", "billing-service", "dashboard")
    }
    assert all(user.groups.count() == 0 for user in users.values())  # no role
    consumer = token_client(users["billing-service"])
    dashboard = token_client(users["dashboard"])
    assert service.list_tokens("order-service")[0].name == "orders producer"

    def status(client: APIClient, method: str, path: str, body: Any = None) -> int:
        call = getattr(client, method)
        return int((call(path, body, format="json") if body else call(path)).status_code)

    read = "/api/v1/topics/{}/messages?queue_id=0"
    send = "/api/v1/topics/{}/messages"
    # The producer writes orders-* and nothing else; it reads nothing.
    assert status(producer, "post", send.format("orders-eu"), SEND) == 200
    assert status(producer, "post", send.format("orders-us"), SEND) == 200
    assert status(producer, "post", send.format("weather"), SEND) == 403
    assert status(producer, "get", read.format("orders-eu")) == 403
    # The consumer reads orders-* as the group billing; it writes nothing.
    assert status(consumer, "get", read.format("orders-eu")) == 200
    assert status(consumer, "get", read.format("weather")) == 403
    reset = {"topic": "orders-eu", "to": "earliest"}
    assert status(consumer, "post", "/api/v1/groups/billing/offsets/reset", reset) == 200
    assert status(consumer, "post", send.format("orders-eu"), SEND) == 403
    # The dashboard reads every topic but payroll, describes groups, changes nothing.
    assert status(dashboard, "get", read.format("weather")) == 200
    assert status(dashboard, "get", read.format("orders-eu")) == 200
    assert status(dashboard, "get", read.format("payroll")) == 403
    assert status(dashboard, "get", "/api/v1/groups/billing/lag") == 200
    assert status(dashboard, "post", send.format("weather"), SEND) == 403
    assert status(dashboard, "post", "/api/v1/groups/billing/offsets/reset", reset) == 403
    # The "match" query lists what applies to orders-eu.
    matched = answers[-1]["results"]
    assert {e["principal"] for e in matched} == {
        "User:order-service",
        "User:billing-service",
        "User:dashboard",
    }
    # The last command takes the dashboard's entries away.
    assert run(admin, delete)["deleted"] == 3
    assert status(dashboard, "get", read.format("weather")) == 403
