"""The synchronous client: one Unix socket to tandemd, requests multiplexed over it by id."""
from __future__ import annotations

import copy
import itertools
import os
import socket
import threading
import time
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Sequence, Union

from . import _requests as rq
from ._frame import HEADER, body_length, decode
from ._requests import Msg
from ._version import __version__
from .errors import ProtocolError, TandemConnectionError, TandemError, TandemTimeoutError, daemon_error
from .results import GenerateResult

Stop = Union[None, str, Sequence[str]]


class _Connection:
    """One socket and the replies read from it, sorted by request id.

    Whichever thread waits for a reply reads the socket for everybody: a frame for another
    request goes to that request's queue. So one thread can interleave several streams (and a
    cancel in the middle of one), and several threads can share a connection. The read buffer
    lives here, not in a local, so a timeout or KeyboardInterrupt in the middle of a frame leaves
    the stream position intact.
    """

    def __init__(self, path: str, timeout: Optional[float]):
        self.path = path
        self.timeout = timeout
        self.max_frame = rq.DEFAULT_MAX_FRAME
        self.server: Dict[str, Any] = {}
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except OSError as e:
            sock.close()
            raise TandemConnectionError("cannot connect to tandemd at %s: %s" % (path, e.strerror or e)) from e
        self._sock = sock
        self._ids = itertools.count(1)  # never reused, so a late frame of an abandoned request is just dropped
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._queues: Dict[int, Deque[Msg]] = {}
        self._reading = False
        self._failure: Optional[TandemError] = None
        self._rbuf = bytearray()

    @property
    def failed(self) -> bool:
        return self._failure is not None

    def handshake(self, client_name: str) -> None:
        self.server = self.call(rq.hello(client_name))
        self.max_frame = rq.check_hello(self.server)

    # --- sending ---------------------------------------------------------------------------

    def start(self, msg: Msg) -> int:
        """Sends msg as a new request and returns its id; its replies are queued from now on."""
        with self._cond:
            self._raise_if_failed()
            rid = next(self._ids)
            frame = rq.frame_for(dict(msg, id=rid), self.max_frame)
            self._queues[rid] = deque()
        try:
            self._send(frame)
        except BaseException:
            self.finish(rid)
            raise
        return rid

    def _send(self, frame: bytes) -> None:
        with self._send_lock:
            self._raise_if_failed()
            try:
                self._sock.sendall(frame)
            except OSError as e:
                # A partly sent frame (a timeout included) leaves the daemon mid-frame: unusable.
                self._salvage()
                self._fail(TandemConnectionError("sending to tandemd at %s failed: %s" % (self.path, e)))
                self._raise_if_failed()

    def _salvage(self) -> None:
        """After a failed send: the daemon may have refused the connection with a frame (busy,
        forbidden) before closing it; reading what is left gives the caller that error rather
        than a broken pipe."""
        with self._cond:
            if self._reading or self._failure is not None:
                return
            self._reading = True
        try:
            self._sock.settimeout(1.0)
            while self._failure is None:
                frame = self._read_frame()
                with self._cond:
                    self._route(frame)
        except (OSError, TandemError):
            pass
        finally:
            with self._cond:
                self._reading = False
                self._cond.notify_all()

    # --- receiving -------------------------------------------------------------------------

    def reply(self, rid: int) -> Msg:
        """The next frame of request rid (a chunk or its final reply), reading the socket as needed."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            with self._cond:
                while True:
                    q = self._queues.get(rid)
                    if q:
                        return q.popleft()
                    if q is None:
                        raise TandemError("request %d is not in flight on this connection" % rid)
                    self._raise_if_failed()
                    if not self._reading:
                        self._reading = True
                        break
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TandemTimeoutError("no reply from tandemd within %g s" % self.timeout)
                    self._cond.wait(remaining)
            frame = None
            try:
                frame = self._read_frame()
            except socket.timeout:
                raise TandemTimeoutError("no reply from tandemd within %g s" % self.timeout) from None
            except TandemError as e:
                self._fail(e)
                raise
            except OSError as e:
                self._fail(TandemConnectionError("reading from tandemd at %s failed: %s" % (self.path, e)))
                self._raise_if_failed()
            finally:
                # Routed before another thread may read: two frames of one request keep their order.
                with self._cond:
                    if frame is not None:
                        self._route(frame)
                    self._reading = False
                    self._cond.notify_all()

    def _read_frame(self) -> Msg:
        while True:
            if len(self._rbuf) >= HEADER.size:
                n = body_length(bytes(self._rbuf[:HEADER.size]))
                if len(self._rbuf) >= HEADER.size + n:
                    body = bytes(self._rbuf[HEADER.size:HEADER.size + n])
                    del self._rbuf[:HEADER.size + n]
                    return decode(body)
            data = self._sock.recv(1 << 16)
            if not data:
                raise TandemConnectionError("tandemd closed the connection")
            self._rbuf += data

    def _route(self, frame: Msg) -> None:
        rid = frame.get("id")
        if rid is None:
            # A nil id: the daemon could not tell which request (a framing error) or refuses the
            # whole connection (busy, forbidden); it closes the connection after it.
            if "error" in frame:
                self._fail(daemon_error(frame["error"], None))
            else:
                self._fail(ProtocolError("tandemd sent a frame without an id: %r" % (frame,)))
            return
        q = self._queues.get(rid)
        if q is not None:
            q.append(frame)
        # else: a late frame of an abandoned request.

    def finish(self, rid: int) -> None:
        with self._cond:
            self._queues.pop(rid, None)

    def abandon(self, rid: int) -> None:
        """Stops waiting for rid: cancels it on the daemon, and drops its frames from now on."""
        self.finish(rid)
        if self.failed:
            return
        try:
            # The cancel's own reply is dropped too: its id has no queue.
            with self._cond:
                cid = next(self._ids)
            self._send(rq.frame_for(dict(rq.cancel(rid), id=cid), self.max_frame))
        except TandemError:
            pass

    def call(self, msg: Msg) -> Msg:
        """One request with one reply; returns its result map."""
        rid = self.start(msg)
        try:
            reply = self.reply(rid)
        except TandemTimeoutError:
            self.abandon(rid)
            raise
        except BaseException:
            self.finish(rid)
            raise
        self.finish(rid)
        return rq.result_of(reply)

    # --- failure ---------------------------------------------------------------------------

    def _fail(self, err: TandemError) -> None:
        with self._cond:
            if self._failure is None:
                self._failure = err
                try:
                    self._sock.shutdown(socket.SHUT_RDWR)  # wakes a reader in another thread
                except OSError:
                    pass
                self._sock.close()
            self._cond.notify_all()

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            # A copy per raise: threads raising one instance would share (and extend) its traceback.
            raise copy.copy(self._failure) from self._failure

    def close(self) -> None:
        self._fail(TandemConnectionError("the client was closed"))


class GenerateStream:
    """A streaming generation: iterate it for the text pieces as they come; afterwards `result`
    holds the GenerateResult (its text is the pieces joined). An error reply is raised from the
    iteration. Use it as a context manager (or call close()) to cancel it if left unfinished."""

    def __init__(self, conn: _Connection, request_id: int):
        self._conn = conn
        self.request_id = request_id
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

    def __iter__(self) -> "GenerateStream":
        return self

    def __next__(self) -> str:
        if self._done:
            raise StopIteration
        try:
            reply = self._conn.reply(self.request_id)
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
        raise StopIteration

    def wait(self) -> GenerateResult:
        """Reads the rest of the stream and returns the result."""
        for _ in self:
            pass
        if self.result is None:
            raise TandemError("the stream was closed before its final reply")
        return self.result

    def cancel(self) -> bool:
        """Asks the daemon to end the generation; it then ends with finish_reason "cancelled"
        (read on, or wait(), for the result). False when it had already finished."""
        if self._done:
            return False
        return bool(self._conn.call(rq.cancel(self.request_id)).get("cancelled"))

    def close(self) -> None:
        """Cancels the generation if unfinished and stops reading it."""
        if not self._done:
            self._done = True
            self._conn.abandon(self.request_id)

    def __enter__(self) -> "GenerateStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Client:
    """A synchronous tandemd client. It connects on first use (or on connect() / `with`), says
    hello, and keeps the connection; when that breaks, the requests on it fail with
    TandemConnectionError and the next call connects again. A Client may be shared by threads.

    socket_path: default $TANDEM_SOCKET, else /run/tandem/tandemd.sock (as tandem(1)).
    timeout: seconds to wait for connecting and for each reply frame (None: no limit).
    model: every method takes the model alias first; None means the daemon's default alias.
    """

    def __init__(self, socket_path: Union[None, str, "os.PathLike[str]"] = None, *, timeout: Optional[float] = None,
                 client_name: str = "tandem-client/" + __version__):
        self.socket_path = os.fspath(socket_path) if socket_path else rq.default_socket_path()
        self.timeout = timeout
        self.client_name = rq.check_str(client_name, "client_name", 256)
        self._lock = threading.Lock()
        self._conn: Optional[_Connection] = None

    # --- connection ------------------------------------------------------------------------

    def _connection(self) -> _Connection:
        with self._lock:
            if self._conn is None or self._conn.failed:
                conn = _Connection(self.socket_path, self.timeout)
                try:
                    conn.handshake(self.client_name)
                except BaseException:
                    conn.close()
                    raise
                self._conn = conn
            return self._conn

    def connect(self) -> "Client":
        self._connection()
        return self

    def close(self) -> None:
        """Closes the connection; the daemon cancels whatever was still running on it."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "Client":
        return self.connect()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, msg: Msg) -> Msg:
        return self._connection().call(msg)

    # --- ops -------------------------------------------------------------------------------

    def hello(self) -> Dict[str, Any]:
        """{server, version, protocol, max_frame}."""
        return self._call(rq.hello(self.client_name))

    def generate(self, model: Optional[str], prompt: str, *, max_tokens: Optional[int] = None,
                 temperature: Optional[float] = None, top_k: Optional[int] = None, top_p: Optional[float] = None,
                 min_p: Optional[float] = None, repeat_penalty: Optional[float] = None,
                 seed: Optional[int] = None, stop: Stop = None) -> GenerateResult:
        """Completes a plain prompt (no chat template). Options left None take the daemon's defaults."""
        msg = rq.generate(model, prompt, None, False, max_tokens, temperature, top_k, top_p, min_p,
                          repeat_penalty, seed, stop)
        return self._whole(msg)

    def generate_stream(self, model: Optional[str], prompt: str, *, max_tokens: Optional[int] = None,
                        temperature: Optional[float] = None, top_k: Optional[int] = None,
                        top_p: Optional[float] = None, min_p: Optional[float] = None,
                        repeat_penalty: Optional[float] = None, seed: Optional[int] = None,
                        stop: Stop = None) -> GenerateStream:
        """As generate(), streamed: the request is sent now; iterate the stream for its pieces."""
        msg = rq.generate(model, prompt, None, True, max_tokens, temperature, top_k, top_p, min_p,
                          repeat_penalty, seed, stop)
        conn = self._connection()
        return GenerateStream(conn, conn.start(msg))

    def chat(self, model: Optional[str], messages: Sequence[Dict[str, str]], *, max_tokens: Optional[int] = None,
             temperature: Optional[float] = None, top_k: Optional[int] = None, top_p: Optional[float] = None,
             min_p: Optional[float] = None, repeat_penalty: Optional[float] = None,
             seed: Optional[int] = None, stop: Stop = None) -> GenerateResult:
        """Generates the next turn of [{role, content}, ...], rendered with the model's chat template."""
        msg = rq.generate(model, None, messages, False, max_tokens, temperature, top_k, top_p, min_p,
                          repeat_penalty, seed, stop)
        return self._whole(msg)

    def chat_stream(self, model: Optional[str], messages: Sequence[Dict[str, str]], *,
                    max_tokens: Optional[int] = None, temperature: Optional[float] = None,
                    top_k: Optional[int] = None, top_p: Optional[float] = None, min_p: Optional[float] = None,
                    repeat_penalty: Optional[float] = None, seed: Optional[int] = None,
                    stop: Stop = None) -> GenerateStream:
        """As chat(), streamed."""
        msg = rq.generate(model, None, messages, True, max_tokens, temperature, top_k, top_p, min_p,
                          repeat_penalty, seed, stop)
        conn = self._connection()
        return GenerateStream(conn, conn.start(msg))

    def _whole(self, msg: Msg) -> GenerateResult:
        return GenerateResult.from_result(self._call(msg), "")

    def cancel(self, request_id: int) -> bool:
        """Cancels an in-flight request of this client (a stream's request_id); False when it is
        not in flight. Requests live on one connection, so after a reconnect there is nothing to cancel."""
        msg = rq.cancel(request_id)
        with self._lock:
            conn = self._conn
        if conn is None or conn.failed:
            return False
        return bool(conn.call(msg).get("cancelled"))

    def tokenize(self, model: Optional[str], text: str, *, add_special: Optional[bool] = None) -> List[int]:
        """Token ids of text (add_special: BOS when the model wants it; daemon default true)."""
        return list(self._call(rq.tokenize(model, text, add_special)).get("tokens", []))

    def detokenize(self, model: Optional[str], tokens: Sequence[int]) -> str:
        return str(self._call(rq.detokenize(model, tokens)).get("text", ""))

    def models(self) -> List[Dict[str, Any]]:
        """One map per alias: name, path, state, default, queued, running, ... (tandem-protocol(7))."""
        return list(self._call({"op": "models"}).get("models", []))

    def load(self, name: str, path: Any, *, keep_alive: Optional[float] = None, context: Optional[int] = None,
             kv_type: Optional[str] = None, gpus: Optional[str] = None, split: Optional[str] = None,
             ratios: Optional[str] = None, parallel: Optional[int] = None) -> Dict[str, Any]:
        """Loads a GGUF file (relative paths are taken from here) under a new alias; {name, model}.
        The settings left None come from the daemon's [model.NAME] table or its globals."""
        return self._call(rq.load(name, path, keep_alive=keep_alive, context=context, kv_type=kv_type, gpus=gpus,
                                  split=split, ratios=ratios, parallel=parallel))

    def unload(self, name: str) -> Dict[str, Any]:
        return self._call(rq.unload(name))

    def swap(self, name: str, path: Any, *, keep_alive: Optional[float] = None, context: Optional[int] = None,
             kv_type: Optional[str] = None, gpus: Optional[str] = None, split: Optional[str] = None,
             ratios: Optional[str] = None, parallel: Optional[int] = None) -> Dict[str, Any]:
        """Repoints an alias at a new GGUF file without dropping requests; {name, model}. Settings
        as load's (nothing carries over from the alias's earlier load)."""
        return self._call(rq.swap(name, path, keep_alive=keep_alive, context=context, kv_type=kv_type, gpus=gpus,
                                  split=split, ratios=ratios, parallel=parallel))

    def status(self) -> Dict[str, Any]:
        """version, pid, uptime, connections, in_flight, memory, devices, models (each resident one
        with its `load` figures: bytes, seconds, bytes_per_second), loads (those in progress)."""
        return self._call({"op": "status"})
