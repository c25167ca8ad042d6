"""Filters and tags of the console templates."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from webui import format as fmt

register = template.Library()


@register.filter
def ms_time(value: Any, style: str = "") -> str:
    """An epoch-ms time as ``<time>``: UTC text the browser rewrites in its own zone, with the
    epoch ms on hover. ``style``: ``"relative"`` also shows how long ago; ``"short"`` hides
    the date when it is today (done in the browser)."""
    if value in (None, "", 0):
        return mark_safe('<span class="muted">–</span>')
    ms = int(value)
    return format_html(
        '<time datetime="{}" data-ms="{}" data-style="{}" title="epoch ms {}">{}</time>',
        fmt.iso_utc(ms),
        ms,
        style,
        ms,
        fmt.utc_text(ms),
    )


@register.filter
def bytes_h(value: Any) -> str:
    return fmt.human_bytes(value)


@register.filter
def duration_ms(value: Any) -> str:
    return fmt.human_duration_ms(value)


@register.filter
def perm(value: Any) -> str:
    return fmt.perm_text(int(value))


@register.filter
def pairs(value: dict[str, str] | None) -> str:
    return fmt.format_pairs(dict(value or {}))


@register.filter
def fill_bar(value: Any, scale: Any = 100) -> str:
    """A bar filled to ``value`` of ``scale`` (a percentage by default; ``fill_bar:1`` for a
    ratio), as an SVG rect: no style attribute, which the Content-Security-Policy refuses."""
    try:
        filled = max(0.0, min(100.0, float(value) / float(scale) * 100))
    except (TypeError, ValueError, ZeroDivisionError):
        filled = 0.0
    return format_html(
        '<svg class="fill" viewBox="0 0 100 1" preserveAspectRatio="none" aria-hidden="true">'
        '<rect width="{}" height="1"/></svg>',
        f"{filled:.2f}",
    )


@register.filter
def percent(value: Any, digits: int = 0) -> str:
    try:
        return f"{float(value) * 100:.{int(digits)}f} %"
    except (TypeError, ValueError):
        return "–"


@register.filter
def rate(value: Any) -> str:
    """Messages per second, compact."""
    number = float(value or 0)
    if number >= 100:
        return f"{number:,.0f}"
    if number >= 10:
        return f"{number:.1f}"
    return f"{number:.2f}"


@register.filter
def get(mapping: dict[str, Any] | None, key: str) -> Any:
    return (mapping or {}).get(key)


@register.filter
def state_class(state: Any) -> str:
    return {
        "CONSUMED": "ok",
        "PENDING": "info",
        "RETRYING": "warn",
        "DLQ": "danger",
    }.get(str(state), "")


@register.filter
def kind_class(kind: Any) -> str:
    return {"retry": "warn", "dlq": "danger", "system": "muted"}.get(str(kind), "")


@register.filter
def ms_input(value: Any) -> str:
    """An epoch-ms time as a ``datetime-local`` value in UTC (the page's script replaces it
    with the browser's zone)."""
    if value in (None, ""):
        return ""
    return fmt.iso_utc(int(value))[:19]


@register.filter
def tojson(value: Any) -> str:
    """Compact JSON text (for small values shown inline)."""
    import json

    return json.dumps(value, ensure_ascii=False, sort_keys=True)
