"""The asyncio client: concurrent requests multiplexed over one Unix socket by their ids."""
from __future__ import annotations

import asyncio
import copy
import itertools
import os
import socket
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Sequence, Union

from . import _requests as rq
from ._frame import HEADER, body_length, decode
from ._requests import Msg
from ._version import __version__
from .client import Stop
from .errors import ProtocolError, TandemConnectionError, TandemError, TandemTimeoutError, daemon_error
from .results import GenerateResult

_FAILED = object()  # queued to every waiting request when the connection fails


class _AsyncConnection:
    """One socket; a reader task sorts the reply frames into per-request queues, so any number of
    requests (streams included) can be in flight at once, as tandem-protocol(7) allows. A writer
    task sends the frames in order: a caller cancelled in the middle of a send cannot leave half a
    frame on the socket, and starting a request needs no await. The socket is ours, not an
    asyncio transport's, because a transport that fails to write stops reading, and the daemon's
    refusal of a connection (busy, forbidden) is a frame sent just before it closes."""

    def __init__(self, path: str, timeout: Optional[float], sock: socket.socket):
        self.path = path
        self.timeout = timeout
        self.max_frame = rq.DEFAULT_MAX_FRAME
        self.server: Dict[str, Any] = {}
        self.loop = asyncio.get_running_loop()
        self._sock = sock
        self._ids = itertools.count(1)  # never reused: a late frame of an abandoned request is dropped
        self._queues: Dict[int, asyncio.Queue] = {}
        self._failure: Optional[TandemError] = None
        self._rbuf = bytearray()
        self._out: Deque[bytes] = deque()
        self._out_ready = asyncio.Event()
        self._reader = self.loop.create_task(self._read_loop())
        self._writer = self.loop.create_task(self._write_loop())
        for t in (self._reader, self._writer):
            t.add_done_callback(self._task_done)

    @classmethod
    async def open(cls, path: str, timeout: Optional[float]) -> "_AsyncConnection":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, path), timeout)
        except (OSError, asyncio.TimeoutError) as e:
            sock.close()
            why = "timed out" if isinstance(e, asyncio.TimeoutError) else (e.strerror or str(e))
            raise TandemConnectionError("cannot connect to tandemd at %s: %s" % (path, why)) from e
        except BaseException:
            sock.close()
            raise
        return cls(path, timeout, sock)

    @property
    def failed(self) -> bool:
        return self._failure is not None

    async def handshake(self, client_name: str) -> None:
        self.server = await self.call(rq.hello(client_name))
        self.max_frame = rq.check_hello(self.server)

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self.loop.sock_recv(self._sock, 1 << 16)
                if not data:
                    raise TandemConnectionError("tandemd closed the connection")
                self._rbuf += data
                while len(self._rbuf) >= HEADER.size:
                    n = body_length(bytes(self._rbuf[:HEADER.size]))
                    if len(self._rbuf) < HEADER.size + n:
                        break
                    body = bytes(self._rbuf[HEADER.size:HEADER.size + n])
                    del self._rbuf[:HEADER.size + n]
                    self._route(decode(body))
        except TandemError as e:
            self._fail(e)
        except OSError as e:
            self._fail(TandemConnectionError("reading from tandemd at %s failed: %s" % (self.path, e)))
        except asyncio.CancelledError:
            self._fail(TandemConnectionError("the client was closed"))
            raise

    async def _write_loop(self) -> None:
        try:
            while True:
                while not self._out:
                    self._out_ready.clear()
                    await self._out_ready.wait()
                await self.loop.sock_sendall(self._sock, self._out.popleft())
        except OSError as e:
            # A refusal frame may be waiting to be read: let the reader report it first.
            try:
                await asyncio.wait_for(asyncio.shield(self._reader), 1.0)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pass
            self._fail(TandemConnectionError("sending to tandemd at %s failed: %s" % (self.path, e)))
        except asyncio.CancelledError:
            self._fail(TandemConnectionError("the client was closed"))
            raise

    def _route(self, frame: Msg) -> None:
        rid = frame.get("id")
        if rid is None:
            # A nil id: a framing error, or the daemon refusing the connection (busy, forbidden);
            # it closes the connection after it.
            if "error" in frame:
                raise daemon_error(frame["error"], None)
            raise ProtocolError("tandemd sent a frame without an id: %r" % (frame,))
        q = self._queues.get(rid)
        if q is not None:
            q.put_nowait(frame)

    def _fail(self, err: TandemError) -> None:
        if self._failure is not None:
            return
        self._failure = err
        for q in self._queues.values():
            q.put_nowait(_FAILED)
        current = asyncio.current_task()
        for t in (self._reader, self._writer):
            if t is not current:
                t.cancel()

    def _task_done(self, _: "asyncio.Task[None]") -> None:
        # Closed only when neither task can still be waiting on the descriptor.
        if self._reader.done() and self._writer.done():
            self._sock.close()

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise copy.copy(self._failure) from self._failure

    def _send(self, frame: bytes) -> None:
        self._out.append(frame)
        self._out_ready.set()

    def start(self, msg: Msg) -> int:
        """Queues msg as a new request and returns its id; its replies are queued from now on."""
        self._raise_if_failed()
        rid = next(self._ids)
        frame = rq.frame_for(dict(msg, id=rid), self.max_frame)
        self._queues[rid] = asyncio.Queue()
        self._send(frame)
        return rid

    async def reply(self, rid: int) -> Msg:
        """The next frame of request rid: a chunk or its final reply."""
        q = self._queues.get(rid)
        if q is None:
            raise TandemError("request %d is not in flight on this connection" % rid)
        if q.empty():
            self._raise_if_failed()
        try:
            item = await asyncio.wait_for(q.get(), self.timeout)
        except asyncio.TimeoutError:
            raise TandemTimeoutError("no reply from tandemd within %g s" % self.timeout) from None
        if item is _FAILED:
            self._raise_if_failed()
        return item

    def finish(self, rid: int) -> None:
        self._queues.pop(rid, None)

    def abandon(self, rid: int) -> None:
        """Stops waiting for rid: cancels it on the daemon and drops its frames from now on."""
        self.finish(rid)
        if self._failure is None:
            # The cancel's own reply is dropped too: its id has no queue.
            self._send(rq.frame_for(dict(rq.cancel(rid), id=next(self._ids)), self.max_frame))

    async def call(self, msg: Msg) -> Msg:
        """One request with one reply; returns its result map."""
        rid = self.start(msg)
        try:
            reply = await self.reply(rid)
        except (TandemTimeoutError, asyncio.CancelledError):
            self.abandon(rid)
            raise
        except BaseException:
            self.finish(rid)
            raise
        self.finish(rid)
        return rq.result_of(reply)

    async def close(self) -> None:
        self._fail(TandemConnectionError("the client was closed"))
        await asyncio.gather(self._reader, self._writer, return_exceptions=True)


class AsyncGenerateStream:
    """A streaming generation: `async for piece in stream` gives the text pieces as they come;
    afterwards `result` holds the GenerateResult. The request is sent on the first iteration
    (or by `async with`, or await start()). An error reply is raised from the iteration; a task
    cancelled while reading cancels the generation on the daemon."""

    def __init__(self, client: "AsyncClient", msg: Msg):
        self._client = client
        self._msg = msg
        self._conn: Optional[_AsyncConnection] = None
        self.request_id: Optional[int] = None
        self.result: Optional[GenerateResult] = None
        self._pieces: List[str] = []
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    @property
    def text(self) -> str:
        """The text received so far."""
        return "".join(self._pieces)

    async def start(self) -> "AsyncGenerateStream":
        if self._conn is None and not self._done:
            conn = await self._client._connection()
            self.request_id = conn.start(self._msg)
            self._conn = conn
        return self

    def __aiter__(self) -> "AsyncGenerateStream":
        return self

    async def __anext__(self) -> str:
        if self._done:
            raise StopAsyncIteration
        await self.start()
        assert self._conn is not None and self.request_id is not None
        try:
            reply = await self._conn.reply(self.request_id)
            piece = rq.chunk_of(reply)
        except TandemTimeoutError:
            raise  # still in flight: the caller may read on or cancel
        except BaseException:
            self._done = True
            self._conn.abandon(self.request_id)
            raise
        if piece is not None:
            self._pieces.append(piece)
            return piece
        self._done = True
        self._conn.finish(self.request_id)
        self.result = rq.generate_result(reply, self._pieces)
        raise StopAsyncIteration

    async def wait(self) -> GenerateResult:
        """Reads the rest of the stream and returns the result."""
        async for _ in self:
            pass
        if self.result is None:
            raise TandemError("the stream was closed before its final reply")
        return self.result

    async def cancel(self) -> bool:
        """Asks the daemon to end the generation; it then ends with finish_reason "cancelled"
        (read on, or wait(), for the result). False when it had finished or was never sent."""
        if self._done:
            return False
        if self._conn is None or self.request_id is None:
            self._done = True  # never sent: nothing will be
            return False
        return bool((await self._conn.call(rq.cancel(self.request_id))).get("cancelled"))

    async def aclose(self) -> None:
        """Cancels the generation if unfinished and stops reading it."""
        if not self._done:
            self._done = True
            if self._conn is not None and self.request_id is not None:
                self._conn.abandon(self.request_id)

    async def __aenter__(self) -> "AsyncGenerateStream":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class AsyncClient:
    """The asyncio twin of Client: the same methods, as coroutines (generate_stream and
    chat_stream return an AsyncGenerateStream at once). Requests from any number of tasks share
    one connection. Use it from one event loop; `async with AsyncClient() as c:` closes it."""

    def __init__(self, socket_path: Union[None, str, "os.PathLike[str]"] = None, *, timeout: Optional[float] = None,
                 client_name: str = "tandem-client/" + __version__):
        self.socket_path = os.fspath(socket_path) if socket_path else rq.default_socket_path()
        self.timeout = timeout
        self.client_name = rq.check_str(client_name, "client_name", 256)
        self._lock: Optional[asyncio.Lock] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._conn: Optional[_AsyncConnection] = None

    async def _connection(self) -> _AsyncConnection:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._lock is None:
            # A new event loop (a second asyncio.run): the old connection's tasks died with the
            # old one, and before 3.10 a Lock binds to the loop it was made in.
            if self._conn is not None:
                self._conn._sock.close()
            self._conn, self._lock, self._loop = None, asyncio.Lock(), loop
        async with self._lock:
            if self._conn is None or self._conn.failed:
                conn = await _AsyncConnection.open(self.socket_path, self.timeout)
                try:
                    await conn.handshake(self.client_name)
                except BaseException:
                    await conn.close()
                    raise
                self._conn = conn
            return self._conn

    async def connect(self) -> "AsyncClient":
        await self._connection()
        return self

    async def close(self) -> None:
        """Closes the connection; the daemon cancels whatever was still running on it."""
        conn, self._conn = self._conn, None
        if conn is not None and conn.loop is asyncio.get_running_loop():
            await conn.close()

    async def __aenter__(self) -> "AsyncClient":
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _call(self, msg: Msg) -> Msg:
        return await (await self._connection()).call(msg)

    async def hello(self) -> Dict[str, Any]:
        return await self._call(rq.hello(self.client_name))

    async def generate(self, model: Optional[str], prompt: str, *, max_tokens: Optional[int] = None,
                       temperature: Optional[float] = None, top_k: Optional[int] = None,
                       top_p: Optional[float] = None, min_p: Optional[float] = None,
                       repeat_penalty: Optional[float] = None, seed: Optional[int] = None,
                       stop: Stop = None) -> GenerateResult:
        msg = rq.generate(model, prompt, None, False, max_tokens, temperature, top_k, top_p, min_p,
                          repeat_penalty, seed, stop)
        return GenerateResult.from_result(await self._call(msg), "")

    def generate_stream(self, model: Optional[str], prompt: str, *, max_tokens: Optional[int] = None,
                        temperature: Optional[float] = None, top_k: Optional[int] = None,
                        top_p: Optional[float] = None, min_p: Optional[float] = None,
                        repeat_penalty: Optional[float] = None, seed: Optional[int] = None,
                        stop: Stop = None) -> AsyncGenerateStream:
        # Arguments are checked now, so a bad one raises here rather than at the first iteration.
        msg = rq.generate(model, prompt, None, True, max_tokens, temperature, top_k, top_p, min_p,
                          repeat_penalty, seed, stop)
        return AsyncGenerateStream(self, msg)

    async def chat(self, model: Optional[str], messages: Sequence[Dict[str, str]], *,
                   max_tokens: Optional[int] = None, temperature: Optional[float] = None,
                   top_k: Optional[int] = None, top_p: Optional[float] = None, min_p: Optional[float] = None,
                   repeat_penalty: Optional[float] = None, seed: Optional[int] = None,
                   stop: Stop = None) -> GenerateResult:
        msg = rq.generate(model, None, messages, False, max_tokens, temperature, top_k, top_p, min_p,
                          repeat_penalty, seed, stop)
        return GenerateResult.from_result(await self._call(msg), "")

    def chat_stream(self, model: Optional[str], messages: Sequence[Dict[str, str]], *,
                    max_tokens: Optional[int] = None, temperature: Optional[float] = None,
                    top_k: Optional[int] = None, top_p: Optional[float] = None, min_p: Optional[float] = None,
                    repeat_penalty: Optional[float] = None, seed: Optional[int] = None,
                    stop: Stop = None) -> AsyncGenerateStream:
        msg = rq.generate(model, None, messages, True, max_tokens, temperature, top_k, top_p, min_p,
                          repeat_penalty, seed, stop)
        return AsyncGenerateStream(self, msg)

    async def cancel(self, request_id: int) -> bool:
        """Cancels an in-flight request of this client (a stream's request_id); False when it is
        not in flight."""
        msg = rq.cancel(request_id)
        conn = self._conn
        if conn is None or conn.failed or conn.loop is not asyncio.get_running_loop():
            return False
        return bool((await conn.call(msg)).get("cancelled"))

    async def tokenize(self, model: Optional[str], text: str, *, add_special: Optional[bool] = None) -> List[int]:
        return list((await self._call(rq.tokenize(model, text, add_special))).get("tokens", []))

    async def detokenize(self, model: Optional[str], tokens: Sequence[int]) -> str:
        return str((await self._call(rq.detokenize(model, tokens))).get("text", ""))

    async def models(self) -> List[Dict[str, Any]]:
        return list((await self._call({"op": "models"})).get("models", []))

    async def load(self, name: str, path: Any, *, keep_alive: Optional[float] = None, context: Optional[int] = None,
                   kv_type: Optional[str] = None, gpus: Optional[str] = None, split: Optional[str] = None,
                   ratios: Optional[str] = None, parallel: Optional[int] = None) -> Dict[str, Any]:
        return await self._call(rq.load(name, path, keep_alive=keep_alive, context=context, kv_type=kv_type,
                                        gpus=gpus, split=split, ratios=ratios, parallel=parallel))

    async def unload(self, name: str) -> Dict[str, Any]:
        return await self._call(rq.unload(name))

    async def swap(self, name: str, path: Any, *, keep_alive: Optional[float] = None, context: Optional[int] = None,
                   kv_type: Optional[str] = None, gpus: Optional[str] = None, split: Optional[str] = None,
                   ratios: Optional[str] = None, parallel: Optional[int] = None) -> Dict[str, Any]:
        return await self._call(rq.swap(name, path, keep_alive=keep_alive, context=context, kv_type=kv_type,
                                        gpus=gpus, split=split, ratios=ratios, parallel=parallel))

    async def status(self) -> Dict[str, Any]:
        return await self._call({"op": "status"})
