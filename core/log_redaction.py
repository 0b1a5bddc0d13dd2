"""Keep secrets out of log output.

``RedactSecretsFilter`` sits on every handler of ``settings.LOGGING``. It renders a record's
message once (message % args), masks what must never be written, and stores the result back on
the record, so handlers that see the record afterwards (including pytest's capture) get the
masked text too. Masked:

* ``Authorization`` headers, in any ``Authorization: X`` / ``'HTTP_AUTHORIZATION': 'X'`` shape;
* OptGate API keys (``og_<prefix>_<secret>``): the public prefix stays, the secret goes;
* passwords in URLs (``postgres://user:PASSWORD@``, ``redis://:PASSWORD@``);
* ``password=…`` / ``"secret": …`` / ``DB_PASSWORD=…`` / ``token=…`` style pairs;
* the values of secret settings (``SECRET_KEY``, webhook secrets, the metrics token, database and
  broker passwords, the notification webhook URL), wherever they appear.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

MASK = "[REDACTED]"

_AUTHORIZATION = re.compile(
    r"(?P<head>\b(?:HTTP_)?AUTHORIZATION\b['\"]?\s*[:=]\s*['\"]?)(?P<value>(?:[A-Za-z]+\s+)?[^\s'\",;}]+)",
    re.IGNORECASE,
)
_API_KEY = re.compile(r"\b(?P<head>og_[0-9a-f]{10}_)[A-Za-z0-9_\-]{8,}")
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-z][a-z0-9+.\-]*://[^:/@\s'\"]*:)[^@/\s'\"]+(?=@)", re.IGNORECASE)
_SECRET_PAIR = re.compile(
    r"(?P<head>\b[\w-]*?(?:password|passwd|secret|api[_-]?key|token)['\"]?\s*[:=]\s*['\"]?)"
    r"(?!og_[0-9a-f]{10}_\[REDACTED\])(?P<value>[^\s'\",&}]+)",  # an API key already masked keeps its prefix
    re.IGNORECASE,
)
# Values shorter than this are not hunted for in free text: they would mask ordinary words.
MIN_SECRET_LENGTH = 8
SECRET_SETTINGS = (
    "SECRET_KEY",
    "SECRET_KEY_FALLBACKS",
    "OPTGATE_GITHUB_WEBHOOK_SECRET",
    "OPTGATE_METRICS_TOKEN",
    "OPTGATE_LEDGER_SIGNING_KEY",
    "OPTGATE_NOTIFY_WEBHOOK_URL",
    "EMAIL_HOST_PASSWORD",
)


def _url_password(url: Any) -> str | None:
    if not isinstance(url, str) or "://" not in url:
        return None
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def secret_values() -> set[str]:
    """The secrets configured in Django settings (empty before settings are configured)."""
    from django.conf import settings

    if not settings.configured:
        return set()
    values: set[Any] = set()
    for name in SECRET_SETTINGS:
        value = getattr(settings, name, None)
        values.update(value if isinstance(value, list | tuple) else [value])
    for database in getattr(settings, "DATABASES", {}).values():
        values.add(database.get("PASSWORD"))
    for name in ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL"):
        values.add(_url_password(getattr(settings, name, None)))
    return {str(value) for value in values if isinstance(value, str) and len(value) >= MIN_SECRET_LENGTH}


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret this module knows of masked."""
    # Known values first and longest first, so a secret that contains another is masked whole.
    for value in sorted(secrets, key=len, reverse=True):
        text = text.replace(value, MASK)
    text = _AUTHORIZATION.sub(lambda m: m["head"] + MASK, text)
    text = _API_KEY.sub(lambda m: m["head"] + MASK, text)
    text = _URL_PASSWORD.sub(lambda m: m["head"] + MASK, text)
    return _SECRET_PAIR.sub(lambda m: m["head"] + MASK, text)


class RedactSecretsFilter(logging.Filter):
    """Mask secrets in a record's message, arguments, exception text and stack before it is written."""

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = secret_values()
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: keep its parts, masked, rather than lose the record
            message = f"{record.msg} {record.args}"
        record.msg = redact(message, secrets)
        record.args = ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, secrets)
        return True
