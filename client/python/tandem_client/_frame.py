"""Framing of tandem-protocol(7): a 4-byte big-endian length, then exactly one msgpack map."""
from __future__ import annotations

import struct

import msgpack

from .errors import ProtocolError

HEADER = struct.Struct(">I")

# The daemon's default max-frame; the hello reply at connect replaces it with the daemon's own.
DEFAULT_MAX_FRAME = 16 * 1024 * 1024

# What this client accepts from the daemon. Replies are small except a non-streamed text or a
# long tokenize list, and the daemon never sends a frame above its own cap, so this only
# bounds what a corrupt length could make us buffer.
MAX_REPLY_FRAME = 1 << 30


def encode(msg: dict) -> bytes:
    """One request frame."""
    body = msgpack.packb(msg, use_bin_type=True)
    return HEADER.pack(len(body)) + body


def body_length(header: bytes) -> int:
    """The body length a reply header announces."""
    (n,) = HEADER.unpack(header)
    if n == 0 or n > MAX_REPLY_FRAME:
        raise ProtocolError("tandemd sent a frame length of %d bytes" % n)
    return n


def decode(body: bytes) -> dict:
    """One reply map. Text is valid UTF-8 by the protocol; "replace" keeps a stray byte in, say,
    a model path from turning into an exception."""
    try:
        msg = msgpack.unpackb(body, raw=False, unicode_errors="replace")
    except Exception as e:  # msgpack raises several unrelated types for bad input
        raise ProtocolError("tandemd sent a frame that is not valid msgpack: %s" % e) from e
    if not isinstance(msg, dict):
        raise ProtocolError("tandemd sent a frame that is not a map: %r" % (msg,))
    return msg


def is_final(reply: dict) -> bool:
    """Whether a reply ends its request: a result or an error (chunks come before it)."""
    return "result" in reply or "error" in reply
