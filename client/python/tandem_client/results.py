"""The result of a generation: its text and the figures of the daemon's final reply."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional


def _opt(r: Dict[str, Any], key: str, kind: type) -> Any:
    # A field a daemon leaves out (an older or newer one) reads as None rather than failing.
    v = r.get(key)
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float) if kind is float else kind):
        return None
    return float(v) if kind is float else v


@dataclass(frozen=True)
class GenerateResult:
    """A finished generate (or chat) request.

    text: the whole generated text (for a stream, its pieces joined).
    finish_reason: "length", "stop", "context_limit" or "cancelled".
    reused_tokens: prompt tokens whose KV a cached prefix already held (not prefilled).
    first_token_seconds: from the engine taking the request to its first token, queueing for a
    sequence slot included. The other figures are as tandem-protocol(7) names them; `raw` is the
    final reply's whole result map, for fields this version does not know.
    """

    text: str
    model: Optional[str] = None
    finish_reason: Optional[str] = None
    prompt_tokens: Optional[int] = None
    reused_tokens: Optional[int] = None
    generated_tokens: Optional[int] = None
    first_token_seconds: Optional[float] = None
    prefill_seconds: Optional[float] = None
    decode_seconds: Optional[float] = None
    prefill_tok_s: Optional[float] = None
    decode_tok_s: Optional[float] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def cancelled(self) -> bool:
        return self.finish_reason == "cancelled"

    @classmethod
    def from_result(cls, r: Dict[str, Any], streamed_text: str) -> "GenerateResult":
        # With stream=false the text is in the result; streamed, it is the chunks joined.
        text = r.get("text")
        return cls(
            text=text if isinstance(text, str) else streamed_text,
            model=_opt(r, "model", str),
            finish_reason=_opt(r, "finish_reason", str),
            prompt_tokens=_opt(r, "prompt_tokens", int),
            reused_tokens=_opt(r, "reused_tokens", int),
            generated_tokens=_opt(r, "generated_tokens", int),
            first_token_seconds=_opt(r, "first_token_seconds", float),
            prefill_seconds=_opt(r, "prefill_seconds", float),
            decode_seconds=_opt(r, "decode_seconds", float),
            prefill_tok_s=_opt(r, "prefill_tok_s", float),
            decode_tok_s=_opt(r, "decode_tok_s", float),
            raw=dict(r),
        )
