"""Request maps of tandem-protocol(7), checked against the daemon's bounds before anything is sent,
and the reading of replies; shared by the sync and the asyncio client."""
from __future__ import annotations

import math
import numbers
import os
import re
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from ._frame import DEFAULT_MAX_FRAME, HEADER, encode, is_final
from .errors import ProtocolError, daemon_error
from .results import GenerateResult

# The daemon's limits (daemon/protocol/request.h, request_decoder.cpp). Checking them here gives
# a ValueError naming the argument instead of a bad_request after a round trip.
MAX_TOKENS = 1 << 20
MAX_TOP_K = 1 << 20
MAX_STOP = 16
MAX_STOP_BYTES = 256
MAX_MESSAGES = 4096
MAX_ROLE_BYTES = 64
MAX_NAME_BYTES = 64
MAX_PATH_BYTES = 4096
MAX_KEEP_ALIVE = 1e9  # seconds, as the daemon's limit
MIN_CONTEXT, MAX_CONTEXT, MAX_PARALLEL = 16, 1 << 24, 256  # daemon/protocol/model_settings.h
MAX_U64 = (1 << 64) - 1
MAX_TOKEN_ID = (1 << 31) - 1

# tandemd's default socket, as tandem(1) finds it: $TANDEM_SOCKET, else the daemon's default path.
DEFAULT_SOCKET = "/run/tandem/tandemd.sock"
PROTOCOL_VERSION = 1


def default_socket_path() -> str:
    return os.environ.get("TANDEM_SOCKET") or DEFAULT_SOCKET


_NAME = re.compile(r"[A-Za-z0-9._:\-]{1,%d}\Z" % MAX_NAME_BYTES)

Msg = Dict[str, Any]


def _utf8_bytes(value: str, what: str) -> int:
    # msgpack strings are UTF-8: a lone surrogate would fail inside packb with a less clear error.
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise ValueError("%s is not encodable as UTF-8: %s" % (what, e)) from None


def check_str(value: Any, what: str, max_bytes: Optional[int] = None, nonempty: bool = False) -> str:
    if not isinstance(value, str):
        raise TypeError("%s must be a str, got %s" % (what, type(value).__name__))
    n = _utf8_bytes(value, what)
    if nonempty and n == 0:
        raise ValueError("%s must not be empty" % what)
    if max_bytes is not None and n > max_bytes:
        raise ValueError("%s is %d bytes, at most %d allowed" % (what, n, max_bytes))
    return value


def check_int(value: Any, what: str, lo: int, hi: int) -> int:
    # bool is an int subclass; True as max_tokens is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError("%s must be an int, got %s" % (what, type(value).__name__))
    v = int(value)
    if not lo <= v <= hi:
        raise ValueError("%s = %d is outside [%d, %d]" % (what, v, lo, hi))
    return v


def check_number(value: Any, what: str, lo: float, hi: float) -> Union[int, float]:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError("%s must be a number, got %s" % (what, type(value).__name__))
    v = float(value)
    if not math.isfinite(v):
        raise ValueError("%s must be finite, got %r" % (what, value))
    if not lo <= v <= hi:
        raise ValueError("%s = %r is outside [%g, %g]" % (what, value, lo, hi))
    return int(value) if isinstance(value, numbers.Integral) else v


def check_bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError("%s must be a bool, got %s" % (what, type(value).__name__))
    return value


def check_choice(value: Any, what: str, choices: Tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise TypeError("%s must be a str" % what)
    if value not in choices:
        raise ValueError("%s must be one of %s, not %r" % (what, ", ".join(choices), value))
    return value


def check_name(value: Any, what: str = "name") -> str:
    check_str(value, what)
    if not _NAME.match(value):
        raise ValueError("%s %r must be 1-%d characters of [A-Za-z0-9._:-]" % (what, value, MAX_NAME_BYTES))
    return value


def check_path(value: Any) -> str:
    """A model file path, made absolute here: the daemon resolves paths in its own working
    directory, so a relative path means the caller's (as `tandem load` does)."""
    try:
        p = os.fspath(value)
    except TypeError:
        raise TypeError("path must be a str or os.PathLike, got %s" % type(value).__name__) from None
    if isinstance(p, bytes):
        try:
            p = p.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("path %r is not valid UTF-8 (the protocol sends paths as text)" % (p,)) from None
    if not p:
        raise ValueError("path must not be empty")
    if "\0" in p:
        raise ValueError("path contains a NUL character")
    p = os.path.abspath(p)
    check_str(p, "path", MAX_PATH_BYTES)
    return p


def _put_model(msg: Msg, model: Optional[str]) -> None:
    # None (or "") leaves the key out: the daemon then uses its default alias.
    if model is not None and model != "":
        msg["model"] = check_name(model, "model")


def _messages(messages: Any) -> List[Dict[str, str]]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError("messages must be a list of {'role': ..., 'content': ...} dicts")
    if not messages:
        raise ValueError("messages must not be empty")
    if len(messages) > MAX_MESSAGES:
        raise ValueError("messages has %d entries, at most %d allowed" % (len(messages), MAX_MESSAGES))
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise TypeError("messages[%d] must be a dict with 'role' and 'content'" % i)
        extra = set(m) - {"role", "content"}
        if extra or "role" not in m or "content" not in m:
            raise ValueError("messages[%d] must have exactly the keys 'role' and 'content', has %s"
                             % (i, sorted(map(str, m))))
        out.append({"role": check_str(m["role"], "messages[%d]['role']" % i, MAX_ROLE_BYTES),
                    "content": check_str(m["content"], "messages[%d]['content']" % i)})
    return out


def _stop(stop: Any) -> List[str]:
    if isinstance(stop, str):  # one stop string is the common case
        stop = [stop]
    if not isinstance(stop, Iterable):
        raise TypeError("stop must be a str or a list of str, got %s" % type(stop).__name__)
    stop = list(stop)
    if len(stop) > MAX_STOP:
        raise ValueError("stop has %d strings, at most %d allowed" % (len(stop), MAX_STOP))
    return [check_str(s, "stop[%d]" % i, MAX_STOP_BYTES, nonempty=True) for i, s in enumerate(stop)]


def generate(model: Optional[str], prompt: Optional[str], messages: Optional[Sequence[dict]], stream: bool,
             max_tokens: Optional[int] = None, temperature: Optional[float] = None, top_k: Optional[int] = None,
             top_p: Optional[float] = None, min_p: Optional[float] = None,
             repeat_penalty: Optional[float] = None, seed: Optional[int] = None,
             stop: Union[None, str, Sequence[str]] = None) -> Msg:
    """A generate request. Parameters left None are not sent, so the daemon's defaults apply."""
    msg: Msg = {"op": "generate"}
    _put_model(msg, model)
    if messages is None:
        msg["prompt"] = check_str(prompt, "prompt")
    else:
        msg["messages"] = _messages(messages)
    if max_tokens is not None:
        msg["max_tokens"] = check_int(max_tokens, "max_tokens", 1, MAX_TOKENS)
    if temperature is not None:
        msg["temperature"] = check_number(temperature, "temperature", 0, 100)
    if top_k is not None:
        msg["top_k"] = check_int(top_k, "top_k", 0, MAX_TOP_K)
    if top_p is not None:
        msg["top_p"] = check_number(top_p, "top_p", 0, 1)
    if min_p is not None:
        msg["min_p"] = check_number(min_p, "min_p", 0, 1)
    if repeat_penalty is not None:
        msg["repeat_penalty"] = check_number(repeat_penalty, "repeat_penalty", 0.01, 100)
    if seed is not None:
        msg["seed"] = check_int(seed, "seed", 0, MAX_U64)
    if stop is not None:
        msg["stop"] = _stop(stop)
    msg["stream"] = stream
    return msg


def hello(client: str) -> Msg:
    return {"op": "hello", "client": check_str(client, "client_name", 256)}


def cancel(request_id: int) -> Msg:
    return {"op": "cancel", "target": check_int(request_id, "request_id", 0, MAX_U64)}


def tokenize(model: Optional[str], text: str, add_special: Optional[bool]) -> Msg:
    msg: Msg = {"op": "tokenize"}
    _put_model(msg, model)
    msg["text"] = check_str(text, "text")
    if add_special is not None:
        msg["add_special"] = check_bool(add_special, "add_special")
    return msg


def detokenize(model: Optional[str], tokens: Any) -> Msg:
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, Iterable):
        raise TypeError("tokens must be a list of int token ids")
    msg: Msg = {"op": "detokenize"}
    _put_model(msg, model)
    msg["tokens"] = [check_int(t, "tokens[%d]" % i, 0, MAX_TOKEN_ID) for i, t in enumerate(tokens)]
    return msg


def model_settings(msg: Msg, settings: Dict[str, Any]) -> Msg:
    """The per-model options of load and swap (tandem-protocol(7)); None leaves one to the
    daemon's [model.NAME] table or its global setting. Device lists and ratios are checked there."""
    for key, value in settings.items():
        if value is None:
            continue
        if key == "keep_alive":
            msg[key] = check_number(value, key, 0, MAX_KEEP_ALIVE)
        elif key == "context":
            msg[key] = check_int(value, key, MIN_CONTEXT, MAX_CONTEXT)
        elif key == "parallel":
            msg[key] = check_int(value, key, 1, MAX_PARALLEL)
        elif key == "kv_type":
            msg[key] = check_choice(value, key, ("f16", "q8_0", "f32"))
        elif key == "split":
            msg[key] = check_choice(value, key, ("layer", "tensor"))
        elif key in ("gpus", "ratios"):
            msg[key] = check_str(value, key, 1024, nonempty=True)
        else:
            raise TypeError("unknown model setting %r" % key)
    return msg


def load(name: str, path: Any, **settings: Any) -> Msg:
    return model_settings({"op": "load", "name": check_name(name), "path": check_path(path)}, settings)


def swap(name: str, path: Any, **settings: Any) -> Msg:
    return model_settings({"op": "swap", "name": check_name(name), "path": check_path(path)}, settings)


def unload(name: str) -> Msg:
    return {"op": "unload", "name": check_name(name)}


# --- replies ----------------------------------------------------------------------------------

def check_hello(result: Msg) -> int:
    """The daemon's max_frame from a hello result, after checking that it speaks our protocol."""
    if result.get("protocol") != PROTOCOL_VERSION:
        raise ProtocolError("tandemd speaks protocol %r, this client protocol %d"
                            % (result.get("protocol"), PROTOCOL_VERSION))
    max_frame = result.get("max_frame")
    return max_frame if isinstance(max_frame, int) and max_frame > 0 else DEFAULT_MAX_FRAME


def frame_for(msg: Msg, max_frame: int) -> bytes:
    """The encoded frame; one over the daemon's cap is refused here, because the daemon would
    answer it by closing the connection, failing every other request on it."""
    frame = encode(msg)
    if len(frame) - HEADER.size > max_frame:
        raise ValueError("the %s request is %d bytes, over the daemon's max-frame of %d"
                         % (msg.get("op"), len(frame) - HEADER.size, max_frame))
    return frame


def result_of(reply: Msg) -> Msg:
    """The result map of a final reply; an error reply raises its DaemonError."""
    if "error" in reply:
        raise daemon_error(reply["error"], reply.get("id"))
    result = reply.get("result")
    if not isinstance(result, dict):
        raise ProtocolError("tandemd sent a reply with neither a result map nor an error: %r" % (reply,))
    return result


def chunk_of(reply: Msg) -> Optional[str]:
    """The text of a streamed chunk, or None for a final reply."""
    if is_final(reply):
        return None
    chunk = reply.get("chunk")
    if not isinstance(chunk, str):
        raise ProtocolError("tandemd sent a reply that is neither a chunk nor final: %r" % (reply,))
    return chunk


def generate_result(reply: Msg, streamed: List[str]) -> GenerateResult:
    return GenerateResult.from_result(result_of(reply), "".join(streamed))
