"""The web sign-in, rate-limited per client address and per username."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse

from core.throttling import LoginIpThrottle, LoginUsernameThrottle, web_refusals

logger = logging.getLogger(__name__)


class RateLimitedLoginView(LoginView):
    """Django's LoginView; a POST over either limit answers 429 with ``Retry-After`` and the form."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        # Each attempt counts against both limits, so spreading guesses over many usernames or
        # many addresses does not get around them.
        refused, wait = web_refusals(request, LoginIpThrottle(), LoginUsernameThrottle())
        if not refused:
            return super().post(request, *args, **kwargs)
        logger.warning(
            "sign-in refused: too many attempts (%s); retry after %s s",
            ", ".join(throttle.scope or "" for throttle in refused),
            wait,
        )
        # An unbound form: the password is not checked at all while the limit holds.
        form = self.get_form_class()(request, initial={"username": request.POST.get("username", "")})
        refusal = f"Too many sign-in attempts. Try again in {wait} seconds."
        response = self.render_to_response(self.get_context_data(form=form, refusal=refusal), status=429)
        response["Retry-After"] = str(wait)
        return response
