"""Python client for tandemd, the tandem LLM inference daemon: tandem-protocol(7) over its Unix socket.

    from tandem_client import Client
    with Client() as c:                       # $TANDEM_SOCKET, else /run/tandem/tandemd.sock
        print(c.generate(None, "Hello", max_tokens=32, temperature=0).text)

AsyncClient has the same methods as coroutines and runs many requests at once over one connection.
"""
from ._requests import DEFAULT_SOCKET, PROTOCOL_VERSION, default_socket_path
from ._version import __version__
from .aio import AsyncClient, AsyncGenerateStream
from .client import Client, GenerateStream
from .errors import (BadFrameError, BadRequestError, BusyError, DaemonError, DuplicateIdError, EngineError,
                     ExistsError, ForbiddenError, InternalError, LoadFailedError, NotFoundError, ProtocolError,
                     ShuttingDownError, TandemConnectionError, TandemError, TandemTimeoutError, UnknownOpError)
from .results import GenerateResult

__all__ = [
    "AsyncClient", "AsyncGenerateStream", "Client", "GenerateStream", "GenerateResult",
    "TandemError", "TandemConnectionError", "TandemTimeoutError", "ProtocolError", "DaemonError",
    "BadFrameError", "BadRequestError", "UnknownOpError", "DuplicateIdError", "NotFoundError", "ExistsError",
    "BusyError", "LoadFailedError", "ForbiddenError", "ShuttingDownError", "EngineError", "InternalError",
    "DEFAULT_SOCKET", "PROTOCOL_VERSION", "default_socket_path", "__version__",
]
