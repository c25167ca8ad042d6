"""Token authentication per request, hashed tokens against the old plain lookup, and the
cost of deriving SCRAM credentials when a password is set.

    .venv/bin/python bench/rest_auth.py            # ~10 s
    .venv/bin/python bench/rest_auth.py --quick    # ~2 s

In one process, over a temporary SQLite database (the embedded default, WAL), migrated:

1. **hashed** (today): ``QuickTokenAuthentication.authenticate_credentials`` with a token's
   text: SHA-256 of it, one query by digest (token live, user active, superuser bit, role
   groups), the "last used" check (no write within the minute), the cached user object.
2. **plain** (before accounts): the same query and user cache against a table holding the
   token text itself (DRF's ``authtoken_token`` layout: the key as primary key), and a model
   instance as ``request.auth``, as ``api/authentication.py`` did before.
3. Floors in the same run: SHA-256 of a token alone, and ``SELECT 1`` on the same connection.

The rows alternate in rounds so that both see the same machine. Then SCRAM: the time to derive
a password's credentials for both mechanisms (``accounts.scram_keys.derive_password``, what
every password set adds) at the default and the minimum iteration count, next to Django's own
password hash (``make_password``) for scale.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def per_call_us(fn: Callable[[], object], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args()
    rounds, per_round = (3, 500) if args.quick else (10, 2000)

    data = tempfile.mkdtemp(prefix="cairn-bench-auth-")
    os.environ["CAIRN_DATA_DIR"] = data
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cairn.settings")
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    from accounts import scram_keys, service
    from accounts.models import ApiToken
    from accounts.tokens import digest, new_token_text
    from api import authentication
    from mqcore.access.authorizer import Subject

    actor = Subject("bench", "admin", "127.0.0.1", "command")
    user = service.create_user(actor, "bench-user", "operator")
    text = service.issue_token(actor, "bench-user", "bench").text
    auth = authentication.QuickTokenAuthentication()

    # The old layout: the token's text as the key, DRF authtoken's table shape.
    plain_key = new_token_text()[:40]
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE bench_plain_token (key varchar(40) PRIMARY KEY, "
            "user_id integer NOT NULL, created datetime NOT NULL)"
        )
        cursor.execute(
            "INSERT INTO bench_plain_token VALUES (%s, %s, '2026-01-01 00:00:00')",
            [plain_key, user.pk],
        )
    old_sql = (
        'SELECT t."user_id", u."is_active", u."is_superuser", g."name" '
        'FROM "bench_plain_token" t JOIN "auth_user" u ON u."id" = t."user_id" '
        'LEFT JOIN "auth_user_groups" m ON m."user_id" = u."id" '
        'LEFT JOIN "auth_group" g ON g."id" = m."group_id" AND g."name" IN (%s, %s, %s) '
        'WHERE t."key" = %s'
    )
    roles = ("viewer", "operator", "admin")

    def plain() -> object:
        with connection.cursor() as cursor:
            cursor.execute(old_sql, [*roles, plain_key])
            rows = cursor.fetchall()
        user_id, active, superuser, _ = rows[0]
        found = authentication._users.get(user_id, bool(active), bool(superuser))
        # The old code returned a Token model instance as request.auth (Token(key=, user=));
        # ApiToken stands in for it (the same Django model construction).
        return ApiToken(pk=1, user=found)

    def hashed() -> object:
        return auth.authenticate_credentials(text)

    def select_one() -> object:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            return cursor.fetchall()

    rows: dict[str, list[float]] = {"hashed": [], "plain": [], "sha256": [], "select 1": []}
    for fn in (hashed, plain):
        per_call_us(fn, 200)  # warm-up: statements prepared, user cached
    for _ in range(rounds):
        rows["hashed"].append(per_call_us(hashed, per_round))
        rows["plain"].append(per_call_us(plain, per_round))
        rows["sha256"].append(per_call_us(lambda: digest(text), per_round))
        rows["select 1"].append(per_call_us(select_one, per_round))

    print(f"Token authentication per request ({rounds} rounds x {per_round} calls, SQLite WAL)")
    for name, samples in rows.items():
        print(
            f"  {name:9s} median {statistics.median(samples):7.1f} us   min {min(samples):7.1f} us"
        )
    delta = statistics.median(rows["hashed"]) - statistics.median(rows["plain"])
    print(f"  hashed - plain: {delta:+.1f} us per request")

    print("\nSCRAM credentials per password set (SCRAM-SHA-256 + SCRAM-SHA-512)")
    for iterations in (int(settings.CAIRN_ACCOUNTS["SCRAM_ITERATIONS"]), 4096):
        account = scram_keys.account_of(user)
        account.scram_iterations = iterations
        account.save()
        times = []
        for _ in range(3 if args.quick else 10):
            start = time.perf_counter()
            scram_keys.derive_password(user, "a-password-to-derive")
            times.append((time.perf_counter() - start) * 1e3)
        print(f"  {iterations:6d} iterations: median {statistics.median(times):6.1f} ms")
    start = time.perf_counter()
    make_password("a-password-to-derive")
    print(f"  for scale, Django's own password hash: {(time.perf_counter() - start) * 1e3:.1f} ms")
    get_user_model().objects.all().delete()
    import shutil

    shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
