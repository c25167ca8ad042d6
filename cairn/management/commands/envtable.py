"""``manage.py envtable``: print the README's settings table from ``cairn.env.VARIABLES``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from cairn import env


class Command(BaseCommand):
    help = (
        "Print the markdown table of every CAIRN_* setting (name, default, meaning), as the "
        "README's Settings section holds it. Paste it there after adding a variable."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(env.readme_table(), ending="")
