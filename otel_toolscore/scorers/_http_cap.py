"""A judge answer larger than ``max_response_bytes`` is refused before anything parses it.

litellm and the provider SDK read an answer's body whole and parse it as JSON on the judge
loop's thread, holding the GIL: a 10 MB answer stalled the app's threads for ~150 ms. The judge's
HTTP client here carries an httpx response hook, which runs once the headers are in and before
the body is read: a Content-Length over the cap fails at once, and the body stream is wrapped so
that reading stops (and fails) at the cap when no length was announced. ``ResponseTooLarge``
travels up through the SDK's and litellm's exceptions; the judge classifies it as
``judge_invalid_output``.

Applied where litellm takes our client: the OpenAI-compatible endpoints (provider ``openai``,
any ``api_base`` speaking the OpenAI API). Other providers' answers are read by litellm's own
clients (docs/reliability.md, "Judge storms").
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any


class ResponseTooLarge(Exception):
    """The answer's body is larger than the cap."""


def _too_large(limit: int, seen: str) -> ResponseTooLarge:
    return ResponseTooLarge(f"the judge's answer is larger than max_response_bytes ({limit} bytes; {seen}); "
                            "not read further, not parsed")


def _capped(stream: Any, limit: int) -> Any:
    """``stream`` (an httpx async byte stream) failing once more than ``limit`` bytes came through."""
    import httpx

    class CappedStream(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            read = 0
            async for chunk in stream:
                read += len(chunk)
                if read > limit:
                    raise _too_large(limit, f"{read} bytes read so far")
                yield chunk

        async def aclose(self) -> None:
            await stream.aclose()

    return CappedStream()


def _hook(limit: int) -> Any:
    async def check(response: Any) -> None:
        length = response.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await response.aclose()
            raise _too_large(limit, f"Content-Length {length}")
        response.stream = _capped(response.stream, limit)

    return check


def capped_client(settings: Any) -> Any:
    """The client litellm is given for ``settings``' model (an ``AsyncOpenAI`` whose httpx client
    caps answers), or None where litellm takes none of ours."""
    from otel_toolscore.scorers.judge import _import_litellm

    litellm = _import_litellm()
    try:
        _, provider, _, _ = litellm.get_llm_provider(settings.model, api_base=settings.api_base)
    except Exception:  # noqa: BLE001 - a model litellm does not know: its own error comes at the call
        return None
    if provider != "openai":
        return None
    try:
        import httpx
        import openai
    except ImportError:  # pragma: no cover - litellm requires both
        return None
    api_key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    http = httpx.AsyncClient(event_hooks={"response": [_hook(settings.max_response_bytes)]},
                             timeout=settings.timeout_s, follow_redirects=True)
    try:
        # the key as litellm would resolve it (the option, else OPENAI_API_KEY), read per call by
        # litellm when this client has none: a placeholder keeps the SDK from refusing to start
        return openai.AsyncOpenAI(api_key=api_key or _env_key(), base_url=settings.api_base or None,
                                  http_client=http, max_retries=0, timeout=settings.timeout_s)
    except Exception:  # noqa: BLE001 - the SDK refused the settings: litellm's own client then
        return None


def _env_key() -> str:
    import os

    return os.environ.get("OPENAI_API_KEY") or "unset"
