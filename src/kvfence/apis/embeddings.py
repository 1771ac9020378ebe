"""The ``/v1/embeddings`` request: text inputs only (token ids cannot be scanned, so they are refused)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kvfence.apis.common import validate
from kvfence.errors import RequestError

__all__ = ["EmbeddingsRequest", "text_paths"]


class EmbeddingsRequest(BaseModel):
    """Body of ``POST /v1/embeddings`` (an allowlist: an unknown field is a 400)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    input: str | list[Any]
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None

    @classmethod
    def parse(cls, body: Any) -> EmbeddingsRequest:
        req = validate(cls, body, "/v1/embeddings")
        req.texts()
        return req

    def texts(self) -> list[str]:
        """The inputs; a 400 for token ids (or anything else that is not text) and for an empty list."""
        if isinstance(self.input, str):
            return [self.input]
        if not self.input:
            raise RequestError("`input` must not be an empty list", param="input")
        if not all(isinstance(x, str) for x in self.input):
            raise RequestError("`input` given as token ids cannot be scanned by the gateway's data protection: "
                               "send the text (a string or a list of strings)", param="input")
        return list(self.input)


def text_paths(body: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str, str | None]]:
    """(path, text, role) of every input string."""
    value = body.get("input")
    if isinstance(value, str):
        return [(("input",), value, None)]
    if isinstance(value, list):
        return [(("input", i), v, None) for i, v in enumerate(value) if isinstance(v, str)]
    return []
