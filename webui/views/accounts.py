"""``/login/`` and ``/logout/`` (Django's auth views with the console's templates).

The login goes through :func:`accounts.logins.authenticate`, as the REST API's does: failed
logins are throttled per user and per address, repeated ones lock the user out (the right
password then fails too, with a message saying to wait or ask an admin), and every attempt is
audited (front end ``console``). A throttled or locked-out answer is a 429.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpResponse

from accounts import logins


class ThrottledLoginForm(AuthenticationForm):
    throttled = False

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if username is None or not password:
            return self.cleaned_data
        address = (self.request.META.get("REMOTE_ADDR") or "") if self.request else ""
        user, outcome = logins.authenticate(username, password, address, "console")
        if isinstance(outcome, logins.Throttled):
            self.throttled = True
            minutes = max(1, (outcome.retry_after_s + 59) // 60)
            why = (
                "This account is locked after repeated failed logins"
                if outcome.reason.startswith("account locked")
                else "Too many failed logins"
            )
            raise forms.ValidationError(
                f"{why}. Try again in {minutes} minute{'s' if minutes > 1 else ''}, "
                "or ask an administrator to lift the lockout.",
                code="throttled",
            )
        if user is None:
            raise self.get_invalid_login_error()
        user.backend = "django.contrib.auth.backends.ModelBackend"
        self.user_cache = user
        return self.cleaned_data


class LoginView(auth_views.LoginView):
    template_name = "webui/login.html"
    redirect_authenticated_user = True
    extra_context = {"section": "login"}
    form_class = ThrottledLoginForm

    def form_invalid(self, form: Any) -> HttpResponse:
        response = super().form_invalid(form)
        if getattr(form, "throttled", False):
            response.status_code = 429
        return response


class LogoutView(auth_views.LogoutView):
    """POST only (Django's rule): the header's button posts a form."""
