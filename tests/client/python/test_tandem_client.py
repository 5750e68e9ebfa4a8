#!/usr/bin/python3
"""Tests of the Python client module (client/python, tandem_client) against a real tandemd on tiny
generated models: sync and asyncio generation, streaming, multiplexing, cancel, the admin ops, the
errors, and that the package installs with pip and runs from the install.

usage: test_tandem_client.py --tandemd PATH --tandem-model PATH [--tandem PATH] [TEST ...]
"""
import argparse, asyncio, math, os, shutil, signal, subprocess, sys, tempfile, time, traceback

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PACKAGE_DIR = os.path.join(REPO, "client", "python")
sys.path.insert(0, PACKAGE_DIR)  # the package as it is in the tree; test_pip_install checks the installed one

import tandem_client as tc  # noqa: E402

ARGS = None
TMP = None
GREEDY = {"max_tokens": 16, "temperature": 0}


class Daemon:
    def __init__(self, models, extra=(), socket_path=None):
        self.sock = socket_path or os.path.join(TMP, "d%d.sock" % time.monotonic_ns())
        cmd = [ARGS.tandemd, "--socket", self.sock, "--threads", "1", "--gpu", "-1", "--config", os.devnull]
        for alias, path in models:
            cmd += ["--model", "%s=%s" % (alias, path)]
        cmd += list(extra)
        self.log = open(os.path.join(TMP, "tandemd.log"), "ab")
        self.p = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        deadline = time.time() + 60
        while True:
            check(self.p.poll() is None, "tandemd exited with %s" % self.p.returncode)
            try:
                with tc.Client(self.sock, timeout=10) as c:
                    ms = c.models()
                if len(ms) == len(models) and all(m["state"] == "resident" for m in ms):
                    return
            except tc.TandemConnectionError:
                pass
            check(time.time() < deadline, "tandemd did not become ready")
            time.sleep(0.05)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(timeout=60)
        self.log.close()
        return rc


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def raises(exc_type, fn, *args, **kw):
    """Runs fn and returns the exception it raised, which must be an exc_type."""
    try:
        fn(*args, **kw)
    except exc_type as e:
        return e
    except Exception as e:  # noqa: BLE001
        raise AssertionError("%s%r raised %r, not %s" % (getattr(fn, "__name__", fn), args, e, exc_type.__name__))
    raise AssertionError("%s%r raised nothing, not %s" % (getattr(fn, "__name__", fn), args, exc_type.__name__))


def make_model(name, seed):
    path = os.path.join(TMP, name)
    if not os.path.exists(path):
        subprocess.run([ARGS.tandem_model, "make", "--preset", "tiny", "--seed", str(seed), "-o", path],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return path


def tandem_cli(sock, *args):
    r = subprocess.run([ARGS.tandem, "--socket", sock] + list(args), capture_output=True, timeout=60)
    check(r.returncode == 0, "tandem %r: %r" % (args, r))
    return r.stdout.decode()


def cancel_window(c):
    """How long a cancelled 2000-token request may take to be freed: a tenth of what running it
    out would take (200 decode steps, timed here so that a loaded machine gets longer), at least
    0.5 s. A cancel that did not reach the daemon overruns it tenfold."""
    r = c.generate(None, "long", max_tokens=64, temperature=0)
    return max(0.5, 200 * r.decode_seconds / max(1, r.generated_tokens - 1))


def idle(st):
    m = st["models"][0]
    return st["in_flight"] == 0 and not m["running"] and m["sequences"]["running"] == 0


def wait_idle(c, what, within):
    """Polls status until nothing runs: a cancelled request must be freed promptly."""
    deadline = time.time() + within
    while True:
        st = c.status()
        if idle(st):
            return st
        check(time.time() < deadline, "%s: still running after %.2fs: %r" % (what, within, st))
        time.sleep(0.01)


# --- tests --------------------------------------------------------------------------------------

def test_sync_generate_and_stream(model):
    d = Daemon([("default", model)])
    try:
        c = tc.Client(d.sock)
        r = c.generate(None, "hello", **GREEDY)
        check(isinstance(r, tc.GenerateResult) and r.text, "generate: %r" % (r,))
        check(r.model == "default" and r.finish_reason in ("length", "stop"), "result: %r" % (r,))
        check(r.prompt_tokens >= 1 and 1 <= r.generated_tokens <= 16, "counts: %r" % (r,))
        check(isinstance(r.reused_tokens, int) and r.first_token_seconds >= 0 and r.decode_tok_s >= 0,
              "figures: %r" % (r,))
        check(c.generate(None, "hello", **GREEDY).text == r.text, "greedy is not deterministic")
        # The same request streamed: its pieces join to the same text, which is also the result's.
        s = c.generate_stream(None, "hello", **GREEDY)
        check(isinstance(s.request_id, int) and s.result is None, "stream before reading: %r" % vars(s))
        pieces = list(s)
        check(len(pieces) >= 1 and all(isinstance(p, str) and p for p in pieces), "pieces: %r" % pieces)
        check("".join(pieces) == s.result.text == r.text, "stream %r vs %r" % (pieces, r.text))
        check(s.result.generated_tokens == r.generated_tokens and s.done, "stream result: %r" % (s.result,))
        check(list(s) == [], "an exhausted stream yields more")
        # chat renders the messages with the template: what `tandem run` does with a prompt.
        msgs = [{"role": "user", "content": "hello"}]
        chat = c.chat(None, msgs, **GREEDY)
        cs = c.chat_stream(None, msgs, **GREEDY)
        check("".join(cs) == chat.text and cs.result.prompt_tokens == chat.prompt_tokens > r.prompt_tokens,
              "chat %r / stream %r / plain %r" % (chat, cs.result, r))
        if ARGS.tandem:
            raw = tandem_cli(d.sock, "run", "--raw", "-n", "16", "--temp", "0", "hello")
            check(raw == r.text + "\n", "tandem run --raw printed %r, the client got %r" % (raw, r.text))
            templ = tandem_cli(d.sock, "run", "-n", "16", "--temp", "0", "hello")
            check(templ == chat.text + "\n", "tandem run printed %r, chat got %r" % (templ, chat.text))
        else:
            print("  (no --tandem: not compared with the CLI)")
        # A stop string ends the text early.
        stop = r.text[len(r.text) // 2:][:2]
        st = c.generate(None, "hello", stop=stop, **GREEDY)
        check(st.finish_reason == "stop" and len(st.text) < len(r.text), "stop %r: %r" % (stop, st))
        # Two streams read in turn on one Client: their frames are sorted by id.
        a = c.generate_stream(None, "hello", **GREEDY)
        b = c.generate_stream(None, "hello", **GREEDY)
        got_a, got_b = [], []
        for pa, pb in zip(a, b):
            got_a.append(pa)
            got_b.append(pb)
        got_a += list(a)
        got_b += list(b)
        check("".join(got_a) == "".join(got_b) == r.text, "interleaved streams: %r %r" % (got_a, got_b))
        c.close()
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_sync_cancel(model):
    d = Daemon([("default", model)])
    try:
        with tc.Client(d.sock, timeout=30) as c:
            within = cancel_window(c)
            s = c.generate_stream(None, "long", max_tokens=2000, temperature=0)
            first = next(s)
            check(first and s.cancel() is True, "cancel of a running stream")
            res = s.wait()
            check(res.finish_reason == "cancelled" and res.cancelled, "cancelled stream: %r" % (res,))
            check(res.generated_tokens < 2000 and res.text.startswith(first), "after cancel: %r" % (res,))
            check(s.cancel() is False and c.cancel(s.request_id) is False, "cancel of a finished stream")
            wait_idle(c, "after stream.cancel()", within)
            # Client.cancel with the stream's id, and a stream closed unfinished by `with`.
            s2 = c.generate_stream(None, "long", max_tokens=2000, temperature=0)
            next(s2)
            check(c.cancel(s2.request_id) is True, "Client.cancel")
            check(s2.wait().finish_reason == "cancelled", "Client.cancel result: %r" % (s2.result,))
            with c.generate_stream(None, "long", max_tokens=2000, temperature=0) as s3:
                next(s3)
            check(s3.done and s3.result is None, "closed stream: %r" % vars(s3))
            wait_idle(c, "after closing a stream", within)
            # The connection is still in order after the dropped frames of the closed stream.
            check(c.generate(None, "hello", **GREEDY).text, "generate after a closed stream")
        # A generate that times out is cancelled; its client goes on working.
        with tc.Client(d.sock, timeout=within) as c:
            e = raises(tc.TandemTimeoutError, c.generate, None, "long", max_tokens=2000, temperature=0)
            check(isinstance(e, TimeoutError), "timeout: %r" % e)
            wait_idle(c, "after a timeout", within)
            check(c.generate(None, "hello", **GREEDY).text, "generate after a timeout")
    finally:
        check(d.stop() == 0, "tandemd exit status")


async def _consume(stream, events, k):
    async for piece in stream:
        events.append((k, "piece"))
    events.append((k, "end"))
    return stream.result


def test_async_concurrent_and_cancel(model):
    d = Daemon([("default", model)], extra=["--parallel", "4"])

    async def body():
        async with tc.AsyncClient(d.sock, timeout=30) as c:
            prompts = ["one", "two two", "three three three"]
            opts = dict(max_tokens=24, temperature=0)
            alone = [(await c.generate(None, p, **opts)).text for p in prompts]
            check(len(set(alone)) == 3, "the prompts do not tell their texts apart: %r" % alone)
            events = []
            results = await asyncio.gather(*(_consume(c.generate_stream(None, p, **opts), events, k)
                                             for k, p in enumerate(prompts)))
            together = [r.text for r in results]
            check(together == alone, "concurrent %r, one at a time %r" % (together, alone))
            # The daemon interleaved the replies over the one connection: some stream had pieces
            # before another had ended.
            open_now, most = set(), 0
            for k, what in events:
                (open_now.add if what == "piece" else open_now.discard)(k)
                most = max(most, len(open_now))
            check(most >= 2, "streams were answered one after the other: %r" % events)
            st = await c.status()
            check(st["connections"] == 1, "one AsyncClient, %d connections" % st["connections"])
            # Streamed text equals the non-streamed one, over the async client too.
            s = c.generate_stream(None, prompts[0], **opts)
            check(s.request_id is None, "an async stream is sent at its first iteration")
            check("".join([p async for p in s]) == alone[0] == s.result.text, "async stream text")
            # Cancel mid-stream frees the request.
            r = await c.generate(None, "long", max_tokens=64, temperature=0)
            within = max(0.5, 200 * r.decode_seconds / max(1, r.generated_tokens - 1))
            s = c.generate_stream(None, "long", max_tokens=2000, temperature=0)
            async for first in s:
                break
            check(await s.cancel() is True, "async cancel")
            res = await s.wait()
            check(res.finish_reason == "cancelled" and res.generated_tokens < 2000, "async cancelled: %r" % (res,))
            await wait_idle_async(c, "after an async cancel", within)
            # A task cancelled while it reads a stream cancels the generation on the daemon.
            started = asyncio.Event()

            async def reader():
                async for _ in c.generate_stream(None, "long", max_tokens=2000, temperature=0):
                    started.set()

            task = asyncio.ensure_future(reader())
            await asyncio.wait_for(started.wait(), 30)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            await wait_idle_async(c, "after cancelling the reading task", within)
            async with tc.AsyncClient(d.sock, timeout=within) as short:
                e = None
                try:
                    await short.generate(None, "long", max_tokens=2000, temperature=0)
                except tc.TandemTimeoutError as err:
                    e = err
                check(e is not None, "async generate did not time out")
                await wait_idle_async(short, "after an async timeout", within)
            e = None
            try:
                await c.generate("nosuch", "x")
            except tc.NotFoundError as err:
                e = err
            check(e is not None and e.code == "not_found", "async unknown model: %r" % e)
            toks = await c.tokenize(None, "hello world", add_special=False)
            check(await c.detokenize(None, toks) == "hello world", "async tokenize round trip")
            check((await c.models())[0]["name"] == "default", "async models")
            check((await c.hello())["protocol"] == 1, "async hello")
            # Still usable after all that, and concurrent plain calls work too.
            again = await asyncio.gather(*(c.generate(None, p, **opts) for p in prompts))
            check([r.text for r in again] == alone, "concurrent generate: %r" % again)

    try:
        asyncio.run(body())
    finally:
        check(d.stop() == 0, "tandemd exit status")


async def wait_idle_async(c, what, within):
    deadline = time.time() + within
    while True:
        st = await c.status()
        if idle(st):
            return
        check(time.time() < deadline, "%s: still running after %.2fs: %r" % (what, within, st))
        await asyncio.sleep(0.01)


def test_models_status_tokenize(model):
    d = Daemon([("default", model)])
    try:
        with tc.Client(d.sock) as c:
            h = c.hello()
            check(h["server"] == "tandemd" and h["protocol"] == tc.PROTOCOL_VERSION and h["max_frame"] > 0,
                  "hello: %r" % h)
            ms = c.models()
            check(isinstance(ms, list) and len(ms) == 1, "models: %r" % ms)
            m = ms[0]
            check(m["name"] == "default" and m["state"] == "resident" and m["default"] is True, "model: %r" % m)
            check(m["path"] == model and m["n_vocab"] > 0 and m["parallel"] >= 1, "model fields: %r" % m)
            st = c.status()
            check(st["protocol"] == 1 and st["pid"] == d.p.pid and st["uptime_seconds"] >= 0, "status: %r" % st)
            check(st["connections"] == 1 and st["in_flight"] == 0, "status counts: %r" % st)
            check(isinstance(st["memory"]["rss_bytes"], int) and isinstance(st["devices"], list), "status: %r" % st)
            check([x["name"] for x in st["models"]] == ["default"], "status models: %r" % st["models"])
            plain = c.tokenize(None, "hello world", add_special=False)
            check(plain and all(isinstance(t, int) for t in plain), "tokenize: %r" % plain)
            check(c.detokenize(None, plain) == "hello world", "round trip of %r" % plain)
            special = c.tokenize("default", "hello world")
            check(len(special) >= len(plain) and special[-len(plain):] == plain, "add_special: %r" % special)
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_load_unload_second_model(model):
    second = make_model("tiny_b.gguf", 7)
    d = Daemon([("default", model)])
    try:
        with tc.Client(d.sock) as c:
            r = c.load("second", second, keep_alive=600, context=256, kv_type="q8_0", parallel=2)
            check(r["name"] == "second" and r["model"]["path"] == second, "load: %r" % r)
            check(r["model"]["n_ctx"] == 256 and r["model"]["kv_type"] == "q8_0", "load settings: %r" % r)
            check(sorted(m["name"] for m in c.models()) == ["default", "second"], "models after load")
            # How the load went, in the reply and in status; nothing loads any more.
            check(r["model"]["load"]["bytes"] > 0 and r["model"]["load"]["seconds"] > 0, "load figures: %r" % r)
            st = c.status()
            check(st["loads"] == [] and [m.get("load") for m in st["models"] if m["name"] == "second"] ==
                  [r["model"]["load"]], "status load figures: %r" % st)
            g = c.generate("second", "hello", **GREEDY)
            check(g.model == "second" and g.generated_tokens >= 1, "generate on second: %r" % (g,))
            check(c.tokenize("second", "hi"), "tokenize on second")
            e = raises(tc.ExistsError, c.load, "second", second)
            check(e.code == "exists", "load twice: %r" % e)
            # A relative path means the caller's working directory, as with `tandem load`.
            rel = os.path.relpath(second)
            check(not os.path.isabs(rel), "relpath")
            check(c.load("third", rel)["model"]["path"] == second, "relative load")
            check(c.unload("third")["name"] == "third", "unload third")
            check(c.unload("second") == {"name": "second"}, "unload")
            check([m["name"] for m in c.models()] == ["default"], "models after unload: %r" % c.models())
            e = raises(tc.NotFoundError, c.generate, "second", "hello")
            check(e.code == "not_found" and "second" in e.message, "after unload: %r" % e)
            r = c.swap("default", second, context=192)
            check(r["name"] == "default" and c.models()[0]["path"] == second, "swap: %r" % r)
            check(r["model"]["n_ctx"] == 192, "swap settings: %r" % r)
            e = raises(tc.LoadFailedError, c.swap, "default", os.path.join(TMP, "missing.gguf"))
            check(e.code == "load_failed" and c.models()[0]["path"] == second, "failed swap: %r" % e)
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_errors(model):
    nobody = os.path.join(TMP, "nobody.sock")
    # Bad arguments are refused before anything is sent: this client has no daemon behind it.
    c = tc.Client(nobody)
    bad = [
        (ValueError, c.generate, (None, "x"), {"max_tokens": 0}),
        (ValueError, c.generate, (None, "x"), {"max_tokens": (1 << 20) + 1}),
        (TypeError, c.generate, (None, "x"), {"max_tokens": True}),
        (TypeError, c.generate, (None, "x"), {"max_tokens": 1.5}),
        (ValueError, c.generate, (None, "x"), {"temperature": math.nan}),
        (ValueError, c.generate, (None, "x"), {"temperature": -1}),
        (ValueError, c.generate, (None, "x"), {"top_p": 1.5}),
        (ValueError, c.generate, (None, "x"), {"seed": -1}),
        (ValueError, c.generate, (None, "x"), {"stop": [""]}),
        (ValueError, c.generate, (None, "x"), {"stop": ["s"] * 17}),
        (ValueError, c.generate, (None, "x"), {"stop": ["x" * 257]}),
        (TypeError, c.generate, (None, 123), {}),
        (ValueError, c.generate, (None, "\ud800"), {}),
        (ValueError, c.generate, ("bad name", "x"), {}),
        (TypeError, c.generate, (5, "x"), {}),
        (ValueError, c.chat, (None, []), {}),
        (TypeError, c.chat, (None, "hello"), {}),
        (ValueError, c.chat, (None, [{"role": "user"}]), {}),
        (ValueError, c.chat, (None, [{"role": "user", "content": "x", "name": "y"}]), {}),
        (ValueError, c.chat, (None, [{"role": "r" * 65, "content": "x"}]), {}),
        (ValueError, c.generate_stream, (None, "x"), {"top_k": -1}),
        (ValueError, c.detokenize, (None, [-1]), {}),
        (TypeError, c.detokenize, (None, "abc"), {}),
        (TypeError, c.tokenize, (None, "x"), {"add_special": 1}),
        (ValueError, c.load, ("a/b", "/x.gguf"), {}),
        (ValueError, c.load, ("a", ""), {}),
        (ValueError, c.load, ("a", "/x.gguf"), {"keep_alive": -1}),
        (ValueError, c.load, ("a", "/x.gguf"), {"context": 8}),
        (ValueError, c.load, ("a", "/x.gguf"), {"kv_type": "q4"}),
        (TypeError, c.load, ("a", "/x.gguf"), {"parallel": "2"}),
        (ValueError, c.swap, ("a", "/x.gguf"), {"split": "rows"}),
        (ValueError, c.swap, ("a", "/x.gguf"), {"gpus": ""}),
        (ValueError, c.swap, ("a", "/x\0.gguf"), {}),
        (ValueError, c.unload, ("",), {}),
        (ValueError, c.cancel, (-1,), {}),
    ]
    for exc, fn, args, kw in bad:
        raises(exc, fn, *args, **kw)
    a = tc.AsyncClient(nobody)
    raises(ValueError, a.generate_stream, None, "x", max_tokens=0)  # at the call, not at iteration
    raises(ValueError, a.chat_stream, None, [])

    # No daemon: a connection error, also a builtin ConnectionError.
    e = raises(tc.TandemConnectionError, c.status)
    check(isinstance(e, ConnectionError) and isinstance(e, tc.TandemError) and nobody in str(e), "no daemon: %r" % e)

    async def async_status():
        return await tc.AsyncClient(nobody).status()

    e = raises(ConnectionError, asyncio.run, async_status())
    check(isinstance(e, tc.TandemConnectionError), "async no daemon: %r" % e)

    path = os.path.join(TMP, "restart.sock")
    d = Daemon([("default", model)], socket_path=path)
    try:
        c = tc.Client(path, timeout=30)
        e = raises(tc.NotFoundError, c.generate, "nosuch", "x")
        check(e.code == "not_found" and "nosuch" in e.message and isinstance(e, tc.DaemonError), "unknown: %r" % e)
        check(e.request_id is not None, "error without its request id: %r" % e)
        text = c.generate(None, "hello", **GREEDY).text
        s = c.generate_stream(None, "long", max_tokens=2000, temperature=0)
        next(s)
    finally:
        d.p.kill()  # gone at once, in the middle of the stream (SIGTERM would let it finish)
        d.p.wait(timeout=60)
        d.log.close()
    # The daemon went away under a stream: the stream and the next call fail as connection errors.
    raises(tc.TandemConnectionError, s.wait)
    raises(tc.TandemConnectionError, c.status)
    # A new daemon on the same socket: the same Client connects again.
    d = Daemon([("default", model)], socket_path=path)
    try:
        check(c.generate(None, "hello", **GREEDY).text == text, "after reconnecting")
    finally:
        c.close()
        check(d.stop() == 0, "tandemd exit status")
    # A request over the daemon's max-frame (learnt from hello) is refused before it is sent:
    # sent, the daemon would close the connection, failing the stream that is running on it.
    d = Daemon([("default", model)], extra=["--max-frame", "4096"])
    try:
        with tc.Client(d.sock) as c:
            s = c.generate_stream(None, "hello", **GREEDY)
            e = raises(ValueError, c.generate, None, "x" * 5000)
            check("4096" in str(e), "max-frame message: %r" % e)
            check(s.wait().text == text and c.generate(None, "x" * 200, max_tokens=1).generated_tokens == 1,
                  "after an oversized request")
    finally:
        check(d.stop() == 0, "tandemd exit status")
    # A daemon refusing the connection (past max-connections) says so with its code.
    d = Daemon([("default", model)], extra=["--max-connections", "1"])
    try:
        with tc.Client(d.sock) as held:
            time.sleep(0.2)
            for _ in range(5):  # the refusal races our hello: the error must not depend on who wins
                e = raises(tc.BusyError, tc.Client(d.sock).status)
                check(e.code == "busy" and "max-connections" in e.message, "refused: %r" % e)

            async def refused():
                return await tc.AsyncClient(d.sock).status()

            for _ in range(5):
                e = raises(tc.BusyError, asyncio.run, refused())
                check(e.code == "busy", "async refused: %r" % e)
            check(held.status()["connections"] == 1, "held connection")
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_pip_install(model):
    """pip installs the package offline (no build isolation: the system's setuptools builds it)
    and the installed copy runs a generation."""
    py = sys.executable
    r = subprocess.run([py, "-m", "pip", "--version"], capture_output=True)
    if r.returncode != 0:
        print("  SKIPPED: no pip for %s (Debian: python3-pip)" % py)
        return
    # setuptools builds [project] tables from 61 on, and needs the wheel package before 70.1.
    probe = ("import sys, importlib.util\n"
             "try:\n    import setuptools\nexcept ImportError:\n    sys.exit(1)\n"
             "v = tuple(int(x) for x in setuptools.__version__.split('.')[:2])\n"
             "sys.exit(1 if v < (61, 0) else 2 if v < (70, 1) and not importlib.util.find_spec('wheel') else 0)\n")
    r = subprocess.run([py, "-c", probe], capture_output=True)
    if r.returncode == 1:
        print("  SKIPPED: %s has no setuptools >= 61 to build the package offline (Debian: python3-setuptools)" % py)
        return
    if r.returncode == 2:
        print("  SKIPPED: %s's setuptools needs the wheel package to build (Debian: python3-wheel)" % py)
        return
    check(r.returncode == 0, "setuptools probe: %r" % (r,))
    # The source is copied first: pip builds in the tree, which would leave build/ in the repository.
    src = os.path.join(TMP, "pkg-src")
    target = os.path.join(TMP, "pkg-target")
    shutil.copytree(PACKAGE_DIR, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    r = subprocess.run([py, "-m", "pip", "install", "--no-deps", "--no-index", "--no-build-isolation",
                        "--target", target, src], capture_output=True, env=env, timeout=300)
    check(r.returncode == 0, "pip install failed:\n%s" % (r.stdout + r.stderr).decode(errors="replace"))
    check(os.path.exists(os.path.join(target, "tandem_client", "py.typed")), "py.typed not installed")
    d = Daemon([("default", model)])
    try:
        with tc.Client(d.sock) as c:
            want = c.generate(None, "hello", **GREEDY).text
        code = ("import sys; sys.path.insert(0, sys.argv[1]); import tandem_client, importlib.metadata as md\n"
                "assert tandem_client.__file__.startswith(sys.argv[1]), tandem_client.__file__\n"
                "assert md.version('tandem-client') == tandem_client.__version__\n"
                "with tandem_client.Client(sys.argv[2]) as c:\n"
                "    sys.stdout.write(c.generate(None, 'hello', max_tokens=16, temperature=0).text)\n")
        # Run from TMP, so that the tree's copy is nowhere on the path (the assert checks which one ran).
        r = subprocess.run([py, "-c", code, target, d.sock], capture_output=True, cwd=TMP, timeout=60)
        check(r.returncode == 0, "the installed package: %r" % (r,))
        check(r.stdout.decode() == want, "installed copy %r, tree %r" % (r.stdout, want))
    finally:
        check(d.stop() == 0, "tandemd exit status")


def main():
    global ARGS, TMP
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandemd", required=True)
    ap.add_argument("--tandem-model", required=True)
    ap.add_argument("--tandem")
    ap.add_argument("tests", nargs="*")
    ARGS = ap.parse_args()
    TMP = tempfile.mkdtemp(prefix="tandem-pyclient-")
    model = make_model("tiny.gguf", 1)
    tests = [(n, f) for n, f in globals().items() if n.startswith("test_") and callable(f)]
    if ARGS.tests:
        tests = [(n, f) for n, f in tests if n[5:] in ARGS.tests or n in ARGS.tests]
    failed = 0
    for name, fn in tests:
        t0 = time.time()
        try:
            fn(model)
            print("PASS %s (%.1fs)" % (name, time.time() - t0))
        except Exception:  # noqa: BLE001
            failed += 1
            print("FAIL %s" % name)
            traceback.print_exc()
    if failed:
        print("tandemd log: %s" % os.path.join(TMP, "tandemd.log"))
    else:
        shutil.rmtree(TMP, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
