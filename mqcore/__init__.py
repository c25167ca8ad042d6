"""Cairn's engine: the RocketMQ-compatible store and the broker semantics over it.

This package is plain Python. It never imports Django, Django REST framework, Channels,
Celery or PySpark (``tests/test_layering.py`` enforces it): the front ends adapt to it.
"""

__version__ = "0.1.0"
