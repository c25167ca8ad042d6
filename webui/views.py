from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from cairn import runtime


def home(request: HttpRequest) -> HttpResponse:
    """The landing page: broker identity and health until the console pages land."""
    return render(request, "webui/home.html", {"health": runtime.current().health()})
