"""``/login/`` and ``/logout/`` (Django's auth views with the console's templates)."""

from __future__ import annotations

from django.contrib.auth import views as auth_views


class LoginView(auth_views.LoginView):
    template_name = "webui/login.html"
    redirect_authenticated_user = True
    extra_context = {"section": "login"}


class LogoutView(auth_views.LogoutView):
    """POST only (Django's rule): the header's button posts a form."""
