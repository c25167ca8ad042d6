"""Routes of ``/api/v1/``. The endpoints arrive with the REST API issue."""

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
