"""What a request to the ``serve`` app may be: its limits, its bodies (pydantic, strict types), the
text checks and the OpenAI-format error it is refused with. The app itself is ``serving.server``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, Strict, StrictBool, StrictInt, StrictStr

from ..decoding.actions import DEFAULT_TOKEN_BUDGET

__all__ = ["ServerLimits", "ApiError", "CompletionRequest", "ChatCompletionRequest", "ChatMessage", "StreamOptions"]

SAMPLING_PARAMETERS = ("temperature", "top_p")  # declared (validated) but ignored: the adapter decides


@dataclass(frozen=True)
class ServerLimits:
    """What one request may ask for, and how requests are batched."""

    max_tokens_limit: int = 512
    """Largest ``max_tokens`` accepted (larger: 400); a request without one gets min(128, this), the
    default of ``generate`` too."""
    max_batch: int = 16
    """Most rows (prompts x n) merged into one decode call; also the most one request may ask for."""
    max_prompt_chars: int = 32_000
    """Most characters of prompt text per request (more: 413)."""
    max_queue: int = 256
    """Most requests waiting; more are refused with 503 instead of piling up."""
    batch_wait_ms: float = 2.0
    """How long the idle worker waits after a first request for others to batch with it."""
    max_queue_wait_s: float = 120.0
    """A request still waiting for the decode after this many seconds is refused (503
    ``queue_timeout``) rather than served late."""

    def __post_init__(self) -> None:
        for name in ("max_tokens_limit", "max_batch", "max_prompt_chars", "max_queue"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.batch_wait_ms < 0:
            raise ValueError(f"batch_wait_ms must be >= 0, got {self.batch_wait_ms}")
        if not self.max_queue_wait_s > 0:  # NaN too
            raise ValueError(f"max_queue_wait_s must be > 0, got {self.max_queue_wait_s}")

    @property
    def default_max_tokens(self) -> int:
        return min(DEFAULT_TOKEN_BUDGET, self.max_tokens_limit)  # the same default as `generate`

    @property
    def max_body_bytes(self) -> int:
        """Request bodies larger than this are refused (413) before they are parsed."""
        return 4 * self.max_prompt_chars + 65_536


class ApiError(Exception):
    """An error answered to the client in OpenAI's format."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status)


# ---- request bodies ------------------------------------------------------------------------------


class StreamOptions(BaseModel):
    include_usage: StrictBool = False


Count = Annotated[StrictInt, Field(ge=1)]
"""A positive JSON integer: not a float, a string ("8") or a boolean (true)."""
Number = Annotated[float, Strict()]
"""A JSON number (an integer is accepted); not a string or a boolean."""


class CommonFields(BaseModel):
    """Fields shared by both endpoints. Unknown fields are accepted and reported as ignored.

    Types are strict: ``max_tokens: "8"``, ``max_tokens: true`` or ``stream: "yes"`` are 400s,
    not silently converted."""

    model_config = ConfigDict(extra="allow")

    model: StrictStr | None = None
    """Echoed back; any name is accepted (this server serves one adapter)."""
    max_tokens: Count | None = None
    n: Count = 1
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    seed: StrictInt | None = None
    stop: StrictStr | list[StrictStr] | None = None
    temperature: Annotated[Number, Field(ge=0, le=2)] | None = None
    top_p: Annotated[Number, Field(ge=0, le=1)] | None = None
    user: StrictStr | None = None
    problem_id: StrictStr | Annotated[list[StrictStr], Field(min_length=1)] | None = None
    """Attempt adapters (an extension): one id per prompt that keys its attempts' seeds as a sample
    table keys that problem's samples, so the server makes the table replay's decisions there."""

    def problem_ids(self) -> list[str] | None:
        return [self.problem_id] if isinstance(self.problem_id, str) else self.problem_id

    def ignored_parameters(self) -> list[str]:
        return sorted([k for k in SAMPLING_PARAMETERS if getattr(self, k) is not None] + list(self.model_extra or {}))


class CompletionRequest(CommonFields):
    prompt: StrictStr | Annotated[list[StrictStr], Field(min_length=1)]
    echo: StrictBool = False
    logprobs: StrictInt | None = None


class ContentPart(BaseModel):
    type: StrictStr
    text: StrictStr | None = None


class ChatMessage(BaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: StrictStr | list[ContentPart] | None = None

    def as_dict(self) -> dict:
        content = self.content or ""
        if not isinstance(content, str):
            if any(part.type != "text" or part.text is None for part in content):
                raise ApiError(400, "only text content parts are supported", param="messages",
                               code="unsupported_content")
            content = "".join(part.text for part in content)
        return {"role": "system" if self.role == "developer" else self.role, "content": content}


class ChatCompletionRequest(CommonFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: Count | None = None
    logprobs: StrictBool | None = None


def _reject_unencodable_text(value: Any, param: str) -> None:
    """A 400 for text that cannot be encoded as UTF-8 (a lone surrogate such as "\\ud800", which
    JSON escapes can carry): the tokenizer and the response encoder would fail on it."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(400, f"{param}: text holds a lone surrogate (invalid Unicode)", param=param,
                           code="invalid_value") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _reject_unencodable_text(key, param)
            _reject_unencodable_text(item, param)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _reject_unencodable_text(item, param)


def check_text(req: CommonFields) -> None:
    for name, value in req.model_dump().items():  # extra (ignored) fields included
        _reject_unencodable_text(value, name)
