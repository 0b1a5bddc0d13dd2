"""lm-eval's chat-completions client, taught that a request the engine refuses is an answer.

lm-eval raises on any HTTP error and so ends the whole evaluation: one prompt longer than a
candidate's ``max_model_len`` (HTTP 400 from vLLM's validation) would leave every task of the run
unjudged. A refusal caused by the engine's own configuration is the candidate failing that
sample, so this client turns it into a marked answer that the scorer records as a failed sample
with the engine's message. Transient statuses (408, 429, 5xx) and connection errors still raise.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import aiohttp
from lm_eval.models.openai_completions import LocalChatCompletion

# 400: vLLM's request validation (context length, bad parameters); 413: request too large;
# 422: a body the server understood but will not process.
REFUSAL_STATUSES = frozenset({400, 413, 422})
REFUSED_PREFIX = "\x00optgate-refused\x00"


def refusal_answer(status: int, body: str) -> str:
    """The marked answer for a refused request: status and the engine's own message."""
    return f"{REFUSED_PREFIX}HTTP {status}: {error_message(body)}"


def parse_refusal(output: str) -> str | None:
    """The refusal's text ("HTTP 400: ...") when ``output`` is a refused request, else None."""
    return output[len(REFUSED_PREFIX) :] if output.startswith(REFUSED_PREFIX) else None


def error_message(body: str) -> str:
    """The message of an OpenAI-style error body (``{"error": {"message": ...}}`` or
    ``{"message": ...}``); the raw body, shortened, when it is not one."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:500]
    if isinstance(data, dict):
        inner = data.get("error")
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:500]
        if data.get("message"):
            return str(data["message"])[:500]
    return body.strip()[:500]


class RefusalAwareChatCompletion(LocalChatCompletion):  # type: ignore[misc]
    """``local-chat-completions`` that answers a refused request with :func:`refusal_answer`."""

    async def amodel_call(
        self,
        session: aiohttp.ClientSession,
        sem: Any,
        messages: Any,
        *,
        generate: bool = True,
        cache_keys: list[Any] | None = None,
        ctxlens: list[int] | None = None,
        gen_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        kept_kwargs = copy.deepcopy(gen_kwargs)
        try:
            return await super().amodel_call(
                session,
                sem,
                messages,
                generate=generate,
                cache_keys=cache_keys,
                ctxlens=ctxlens,
                gen_kwargs=gen_kwargs,
                **kwargs,
            )
        except aiohttp.ClientResponseError as exc:
            if not generate or exc.status not in REFUSAL_STATUSES:
                raise
            # lm-eval logged the body but raised without it: ask once more for the engine's message
            # (a validation refusal is answered at once, without generating anything).
            payload = self._create_payload(
                self.create_message(messages), generate=True, gen_kwargs=kept_kwargs, seed=self._seed, **kwargs
            )
            async with session.post(self.base_url, json=payload, headers=self.header) as response:
                body = await response.text()
            return [refusal_answer(exc.status, body)] * len(messages)
