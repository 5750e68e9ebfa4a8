#!/usr/bin/python3
"""Tests of the `tandem` client as a program: argument errors and exit statuses, no daemon,
--json output, stdin prompts, sampling flags, error codes and Ctrl-C → cancel. A scripted fake
daemon (raw tandem-protocol(7) over a Unix socket) records what the client sends, so these
tests need neither the engine nor a model.

usage: cli_test.py --tandem PATH [TEST ...]
"""
import argparse, json, os, shutil, signal, socket, struct, subprocess, sys, tempfile, threading, time, traceback

import msgpack

ARGS = None
TMP = None


class FakeDaemon:
    """Accepts connections and answers each request with `script(request, conn)`."""

    def __init__(self, script):
        self.path = os.path.join(TMP, "fake%d.sock" % time.monotonic_ns())
        self.script = script
        self.requests = []
        self.ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ls.bind(self.path)
        self.ls.listen(8)
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    def _serve(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            threading.Thread(target=self._conn, args=(c,), daemon=True).start()

    def _conn(self, c):
        buf = b""
        try:
            while True:
                while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                (n,) = struct.unpack(">I", buf[:4])
                req = msgpack.unpackb(buf[4:4 + n], raw=False)
                buf = buf[4 + n:]
                self.requests.append(req)
                if self.script(req, Conn(c)) == "close":
                    c.close()
                    return
        except OSError:
            return

    def ops(self, op):
        return [r for r in self.requests if r.get("op") == op]

    def close(self):
        self.ls.close()


class Conn:
    def __init__(self, s):
        self.s = s

    def send(self, msg):
        body = msgpack.packb(msg)
        self.s.sendall(struct.pack(">I", len(body)) + body)


def stats(text=None):
    r = {"model": "m", "finish_reason": "length", "prompt_tokens": 3, "generated_tokens": 2,
         "prefill_seconds": 0.1, "decode_seconds": 0.1, "prefill_tok_s": 30.0, "decode_tok_s": 10.0}
    if text is not None:
        r["text"] = text
    return r


MODELS = [{"name": "default", "path": "/m/a.gguf", "state": "resident", "default": True, "queued": 0,
           "running": False, "keep_alive": 0, "swaps": 0, "arch": "llama", "backend": "cpu", "device": "cpu",
           "n_vocab": 256, "n_ctx": 128, "file_bytes": 1048576, "cache_bytes": 65536, "completed": 1}]


def standard(req, c):
    """A well-behaved daemon with one model 'default'."""
    op, rid = req["op"], req["id"]
    if op == "generate":
        if req.get("model", "default") != "default":
            c.send({"id": rid, "error": {"code": "not_found", "message": "no model named '%s'" % req["model"]}})
            return
        for piece in ("Hel", "lo", " world"):
            c.send({"id": rid, "chunk": piece})
        c.send({"id": rid, "result": stats()})
    elif op == "models":
        c.send({"id": rid, "result": {"models": MODELS}})
    elif op == "status":
        c.send({"id": rid, "result": {"version": "0.1.0", "protocol": 1, "pid": 1, "uptime_seconds": 5.0,
                                      "draining": False, "connections": 1, "in_flight": 0, "queued": 0,
                                      "memory": {"rss_bytes": 1 << 20, "model_bytes": 1 << 20,
                                                 "budget_bytes": 8 << 30, "budget_used_bytes": 1 << 20},
                                      "devices": [{"device": "cpu", "models": ["default"], "model_bytes": 1 << 20,
                                                   "total_bytes": 16 << 30, "available_bytes": 12 << 30},
                                                  {"device": "cuda:0", "models": [], "model_bytes": 0}],
                                      "models": MODELS}})
    elif op == "tokenize":
        c.send({"id": rid, "result": {"tokens": [1, 72, 105], "count": 3}})
    elif op in ("load", "swap"):
        if req["path"].endswith("missing.gguf"):
            c.send({"id": rid, "error": {"code": "load_failed", "message": "cannot open " + req["path"]}})
        else:
            c.send({"id": rid, "result": {"name": req["name"], "model": dict(MODELS[0], path=req["path"])}})
    elif op == "unload":
        c.send({"id": rid, "result": {"name": req["name"]}})
    else:
        c.send({"id": rid, "error": {"code": "unknown_op", "message": op}})


def tandem(*args, sock=None, input=None, env=None, timeout=30):
    cmd = [ARGS.tandem] + (["--socket", sock] if sock else []) + list(args)
    e = dict(os.environ) if env is None else env
    e.pop("TANDEM_SOCKET", None) if env is None else None
    return subprocess.run(cmd, input=input, capture_output=True, timeout=timeout, env=e,
                          stdin=None if input is not None else subprocess.DEVNULL)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


# --- tests --------------------------------------------------------------------------------------

def test_usage_errors():
    for args in ([], ["frobnicate"], ["run", "--no-such-flag", "x"], ["run", "a", "b", "c"],
                 ["run", "--temp", "-1", "x"], ["run", "--top-p", "2", "x"], ["run", "bad name!", "x"],
                 ["load", "onlyname"], ["unload"], ["chat", "a", "b"], ["run", "-m", "x", "y", "z"]):
        r = tandem(*args, sock=os.path.join(TMP, "unused.sock"))
        check(r.returncode == 2, "%r: expected usage status 2, got %d: %r" % (args, r.returncode, r.stderr))
        check(r.stderr, "%r: no message on stderr" % (args,))
    for args in (["frobnicate"], ["--json", "--socket", "x", "frob"]):
        r = tandem(*args, sock=os.path.join(TMP, "unused.sock"))
        check(b"unknown command '" in r.stderr and b"loadgen" in r.stderr, "%r: %r" % (args, r.stderr))
    r = tandem("run", sock=os.path.join(TMP, "unused.sock"))  # no prompt, stdin is /dev/null
    check(r.returncode == 2 and b"no prompt" in r.stderr, "run without prompt: %r" % (r,))
    r = tandem("run", input=b"\n", sock=os.path.join(TMP, "unused.sock"))
    check(r.returncode == 2 and b"empty" in r.stderr, "run with empty stdin: %r" % (r,))
    r = tandem("--help")
    check(r.returncode == 0 and b"Exit status" in r.stdout, "--help: %r" % (r,))
    r = tandem("--version")
    check(r.returncode == 0 and r.stdout.startswith(b"tandem "), "--version: %r" % (r,))


def test_no_daemon():
    missing = os.path.join(TMP, "nobody.sock")
    for args in (["status"], ["run", "hi"], ["ps"], ["load", "a", "/x.gguf"], ["chat"]):
        r = tandem(*args, sock=missing)
        check(r.returncode == 1, "%r: expected 1, got %d" % (args, r.returncode))
        check(b"cannot connect to " + missing.encode() in r.stderr and b"tandemd" in r.stderr,
              "%r: message: %r" % (args, r.stderr))
    # A socket file nobody listens on: connection refused, same status.
    dead = os.path.join(TMP, "dead.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(dead)
    s.close()
    r = tandem("status", sock=dead)
    check(r.returncode == 1 and b"refused" in r.stderr, "refused: %r" % (r,))
    # TANDEM_SOCKET is used when --socket is absent.
    env = dict(os.environ, TANDEM_SOCKET=missing)
    r = subprocess.run([ARGS.tandem, "status"], env=env, capture_output=True, timeout=30)
    check(r.returncode == 1 and missing.encode() in r.stderr, "TANDEM_SOCKET: %r" % (r,))
    r = tandem("status", sock="/tmp/" + "x" * 200)
    check(r.returncode == 2 and b"longer than" in r.stderr, "long path: %r" % (r,))


def test_run_streams_and_json():
    d = FakeDaemon(standard)
    try:
        r = tandem("run", "hello there", sock=d.path)
        check(r.returncode == 0 and r.stdout == b"Hello world\n", "run text: %r" % (r,))
        req = d.ops("generate")[-1]
        check(req["messages"] == [{"role": "user", "content": "hello there"}] and req["stream"] is True,
              "request: %r" % req)
        check("model" not in req and "temperature" not in req, "unset options were sent: %r" % req)
        r = tandem("--json", "run", "hi", sock=d.path)
        check(r.returncode == 0, "json run: %r" % (r,))
        lines = [json.loads(l) for l in r.stdout.decode().splitlines()]
        check([l.get("chunk") for l in lines[:3]] == ["Hel", "lo", " world"], "json chunks: %r" % lines)
        check(lines[-1]["result"]["finish_reason"] == "length" and len(lines) == 4, "json final: %r" % lines)
        check(all(l["id"] == lines[0]["id"] for l in lines), "ids: %r" % lines)
        # --json after the subcommand works too; one-shot commands print the result map.
        for cmd in ("status", "models", "ps"):
            r = tandem(cmd, "--json", sock=d.path)
            check(r.returncode == 0, "%s --json: %r" % (cmd, r))
            obj = json.loads(r.stdout)
            check("models" in obj, "%s json: %r" % (cmd, obj))
        # Memory per device, and the budget.
        r = tandem("status", sock=d.path)
        out = r.stdout.decode()
        check(r.returncode == 0 and "budget 8.0 GiB (1.0 MiB used)" in out, "status budget: %r" % (r,))
        check("  cpu: 1.0 MiB in models (default), 12.0 GiB of 16.0 GiB available" in out, "status cpu: %r" % out)
        check("  cuda:0: 0 B in models\n" in out, "status cuda: %r" % out)
        r = tandem("ps", sock=d.path)
        check(r.returncode == 0 and "DEVICE" in r.stdout.decode(), "ps device column: %r" % (r,))
        r = tandem("--json", "tokenize", "Hi", sock=d.path)
        check(json.loads(r.stdout) == {"tokens": [1, 72, 105], "count": 3}, "tokenize json: %r" % (r,))
        r = tandem("tokenize", "--no-special", "Hi", sock=d.path)
        check(r.stdout == b"1 72 105\n" and d.ops("tokenize")[-1]["add_special"] is False, "tokenize: %r" % (r,))
    finally:
        d.close()


def test_sampling_flags_and_model():
    d = FakeDaemon(standard)
    try:
        r = tandem("run", "default", "a prompt", "--temp", "0", "--top-k", "5", "--top-p", "0.5", "--min-p",
                   "0.1", "--repeat-penalty", "1.1", "--seed", "42", "-n", "7", "--stop", "x", "--stop", "y",
                   "--system", "be brief", sock=d.path)
        check(r.returncode == 0, "run: %r" % (r,))
        req = d.ops("generate")[-1]
        want = {"model": "default", "temperature": 0, "top_k": 5, "top_p": 0.5, "min_p": 0.1, "seed": 42,
                "max_tokens": 7, "stop": ["x", "y"]}
        for k, v in want.items():
            check(req.get(k) == v, "%s: %r in %r" % (k, req.get(k), req))
        check(abs(req["repeat_penalty"] - 1.1) < 1e-9, "repeat_penalty: %r" % req)
        check(req["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a prompt"}],
              "messages: %r" % req)
        r = tandem("run", "--raw", "-m", "default", "plain text", sock=d.path)
        req = d.ops("generate")[-1]
        check(r.returncode == 0 and req["prompt"] == "plain text" and "messages" not in req, "raw: %r" % req)
        r = tandem("run", "other", "x", sock=d.path)
        check(r.returncode == 5 and b"not_found" in r.stderr, "unknown model: %r" % (r,))
        r = tandem("run", "-v", "x", sock=d.path)
        check(b"tok/s" in r.stderr and b"finish: length" in r.stderr, "verbose: %r" % (r,))
    finally:
        d.close()


def test_stdin_prompt():
    d = FakeDaemon(standard)
    try:
        r = tandem("run", input=b"from stdin\n", sock=d.path)
        check(r.returncode == 0 and d.ops("generate")[-1]["messages"][-1]["content"] == "from stdin",
              "stdin only: %r" % (d.ops("generate")[-1],))
        r = tandem("run", "default", input=b"piped prompt", sock=d.path)
        req = d.ops("generate")[-1]
        check(r.returncode == 0 and req["model"] == "default" and req["messages"][-1]["content"] == "piped prompt",
              "model + stdin: %r" % req)
        r = tandem("run", "Summarize this:", input=b"some text", sock=d.path)
        req = d.ops("generate")[-1]
        check("model" not in req and req["messages"][-1]["content"] == "Summarize this:\n\nsome text",
              "instruction + stdin: %r" % req)
        r = tandem("run", "a", "b", input=b"ignored", sock=d.path)
        req = d.ops("generate")[-1]
        check(req["model"] == "a" or r.returncode == 5, "two args: %r" % req)
        check(req["messages"][-1]["content"] == "b", "two args ignore stdin: %r" % req)
        r = tandem("tokenize", input=b"tok me", sock=d.path)
        check(r.returncode == 0 and d.ops("tokenize")[-1]["text"] == "tok me", "tokenize stdin: %r" % (r,))
    finally:
        d.close()


def test_admin_commands():
    d = FakeDaemon(standard)
    try:
        r = tandem("load", "m2", "rel/model.gguf", "--keep-alive", "60", sock=d.path)
        req = d.ops("load")[-1]
        check(r.returncode == 0 and b"loaded 'm2'" in r.stdout, "load: %r" % (r,))
        check(req["path"] == os.path.join(os.getcwd(), "rel/model.gguf") and req["keep_alive"] == 60,
              "load made the path absolute: %r" % req)
        r = tandem("swap", "default", "/x/missing.gguf", sock=d.path)
        check(r.returncode == 6 and b"load_failed" in r.stderr, "swap fail: %r" % (r,))
        r = tandem("unload", "default", sock=d.path)
        check(r.returncode == 0 and b"unloaded 'default'" in r.stdout, "unload: %r" % (r,))
        r = tandem("ps", sock=d.path)
        check(r.returncode == 0 and b"default *" in r.stdout and b"1.0 MiB" in r.stdout, "ps: %r" % (r,))
        r = tandem("models", sock=d.path)
        check(r.returncode == 0 and b"/m/a.gguf" in r.stdout, "models: %r" % (r,))
        r = tandem("status", sock=d.path)
        check(r.returncode == 0 and b"tandemd 0.1.0" in r.stdout, "status: %r" % (r,))
        r = tandem("load", "bad/name", "/x.gguf", sock=d.path)
        check(r.returncode == 2, "bad alias: %r" % (r,))
    finally:
        d.close()


def test_load_progress_line():
    """While a load waits for its reply, a terminal's stderr shows the load's bytes and rate from
    status (polled on a second connection), cleared at the end; off a terminal nothing at all."""
    import pty
    figures = {"bytes": 8700000000, "seconds": 0.36, "bytes_per_second": 2.42e10}
    statuses, on_terminal = [0], [True]

    def slow_load(req, c):
        if req["op"] == "status":
            c.send({"id": req["id"], "result": {"models": [], "loads": [
                {"name": "m2", "op": "load", "path": req.get("path", "/m/b.gguf"), "done_bytes": 3100000000,
                 "total_bytes": 8700000000, "seconds": 0.127, "bytes_per_second": 2.45e10}]}})
            statuses[0] += 1
        elif req["op"] in ("load", "swap"):
            # On a terminal the reply waits for two polls from a second connection. The second poll
            # comes only after the first reply was drawn. A fixed 1.2 s load once drew nothing on a
            # busy CI machine. Off a terminal the load takes 1.2 s, long enough for a poll to come
            # if the CLI wrongly made one.
            if on_terminal[0]:
                first, deadline = statuses[0], time.time() + 30
                while statuses[0] < first + 2 and time.time() < deadline:
                    time.sleep(0.01)
            else:
                time.sleep(1.2)
            c.send({"id": req["id"], "result": {"name": req["name"], "model": dict(MODELS[0], load=figures)}})
        else:
            standard(req, c)

    d = FakeDaemon(slow_load)
    try:
        for cmd, word in (("load", "loaded"), ("swap", "swapped")):
            master, slave = pty.openpty()
            p = subprocess.Popen([ARGS.tandem, "--socket", d.path, cmd, "m2", "/m/b.gguf"], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=slave)
            os.close(slave)
            drawn = b""
            while True:  # until tandem exits and the pty reports EOF (EIO on Linux)
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                drawn += chunk
            out = p.stdout.read()
            p.wait(timeout=30)
            os.close(master)
            check(p.returncode == 0, "%s on a terminal: %d %r" % (cmd, p.returncode, drawn))
            check(b"\r\x1b[Kloading m2  3.1 / 8.7 GB  24.5 GB/s" in drawn, "%s: progress line: %r" % (cmd, drawn))
            check(drawn.endswith(b"\r\x1b[K"), "%s: the line is not cleared: %r" % (cmd, drawn))
            check(out.startswith(("%s 'm2' in 0.36 s (24.2 GB/s): llama on cpu" % word).encode()),
                  "%s: reply line: %r" % (cmd, out))
        polls = len(d.ops("status"))
        check(polls >= 4, "status polled %d times in two loads that wait for two polls each" % polls)
        on_terminal[0] = False
        r = tandem("load", "m2", "/m/b.gguf", sock=d.path)
        check(r.returncode == 0 and r.stderr == b"" and r.stdout.startswith(b"loaded 'm2' in 0.36 s"),
              "load off a terminal: %r" % (r,))
        check(len(d.ops("status")) == polls, "status polled although stderr is not a terminal")
        r = tandem("--json", "load", "m2", "/m/b.gguf", sock=d.path)
        check(r.returncode == 0 and json.loads(r.stdout)["model"]["load"] == figures, "load --json: %r" % (r,))
    finally:
        d.close()


def test_status_shows_loads():
    """tandem status: each model's load figures, and every load in progress with its op."""
    def script(req, c):
        if req["op"] != "status":
            return standard(req, c)
        models = [dict(MODELS[0], load={"bytes": 2900000, "seconds": 0.0104, "bytes_per_second": 2.79e8})]
        c.send({"id": req["id"], "result": {"version": "0.1.0", "protocol": 1, "models": models, "loads": [
            {"name": "big", "op": "load", "path": "/m/big.gguf", "done_bytes": 3100000000, "total_bytes": 8700000000,
             "seconds": 2.1, "bytes_per_second": 1.48e9},
            {"name": "default", "op": "swap", "path": "/m/new.gguf", "done_bytes": 0, "total_bytes": 0,
             "seconds": 0.05, "bytes_per_second": 0.0}]}})

    d = FakeDaemon(script)
    try:
        r = tandem("status", sock=d.path)
        out = r.stdout.decode()
        check(r.returncode == 0 and "  default: loaded 2.9 MB in 10 ms (279.0 MB/s)\n" in out, "figures: %r" % out)
        check("  big: loading /m/big.gguf: 3.1 / 8.7 GB, 2.10 s, 1.5 GB/s\n" in out, "load in progress: %r" % out)
        check("  default: swapping to /m/new.gguf: 50 ms\n" in out, "swap in progress: %r" % out)
    finally:
        d.close()


def test_error_statuses():
    def erring(code):
        def script(req, c):
            c.send({"id": req["id"], "error": {"code": code, "message": "scripted " + code}})
        return script

    for code, status in (("busy", 4), ("shutting_down", 4), ("not_found", 5), ("load_failed", 6),
                         ("bad_request", 3), ("engine_error", 3), ("internal", 3), ("bad_frame", 8)):
        d = FakeDaemon(erring(code))
        try:
            r = tandem("run", "x", sock=d.path)
            check(r.returncode == status, "%s: expected %d, got %d" % (code, status, r.returncode))
            check(("tandem: %s: scripted %s" % (code, code)).encode() in r.stderr, "%s message: %r" % (code, r.stderr))
            r = tandem("--json", "run", "x", sock=d.path)
            check(json.loads(r.stdout)["error"]["code"] == code and r.returncode == status, "%s json" % code)
        finally:
            d.close()
    # forbidden: the daemon's nil-id error frame, then the connection closes.
    d = FakeDaemon(lambda req, c: (c.send({"id": None, "error": {"code": "forbidden", "message": "not allowed: uid 1"}}),
                                   "close")[1])
    try:
        r = tandem("status", sock=d.path)
        check(r.returncode == 7 and b"forbidden" in r.stderr, "forbidden: %r" % (r,))
    finally:
        d.close()
    # The daemon drops the connection mid-stream: protocol status 8, partial text kept.
    def dropping(req, c):
        c.send({"id": req["id"], "chunk": "partial"})
        return "close"
    d = FakeDaemon(dropping)
    try:
        r = tandem("run", "x", sock=d.path)
        check(r.returncode == 8 and r.stdout == b"partial\n" and b"closed" in r.stderr, "dropped: %r" % (r,))
    finally:
        d.close()
    # Garbage instead of msgpack.
    def garbage(req, c):
        c.s.sendall(struct.pack(">I", 1) + b"\xc1")
    d = FakeDaemon(garbage)
    try:
        r = tandem("status", sock=d.path)
        check(r.returncode == 8, "garbage reply: %r" % (r,))
    finally:
        d.close()


def test_ctrl_c_cancels():
    cancelled = threading.Event()

    def slow(req, c):
        if req["op"] == "generate":
            def stream(rid=req["id"]):
                for i in range(400):
                    if cancelled.is_set():
                        c.send({"id": rid, "result": dict(stats(), finish_reason="cancelled")})
                        return
                    c.send({"id": rid, "chunk": "t%d " % i})
                    time.sleep(0.05)
            threading.Thread(target=stream, daemon=True).start()
        elif req["op"] == "cancel":
            cancelled.set()
            c.send({"id": req["id"], "result": {"cancelled": True}})

    d = FakeDaemon(slow)
    try:
        p = subprocess.Popen([ARGS.tandem, "--socket", d.path, "run", "-v", "go"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        # Ctrl-C once the first tokens are out, not after a fixed time (a busy machine may not
        # have printed any yet).
        first = b""
        while b"t0 " not in first:
            chunk = os.read(p.stdout.fileno(), 4096)
            if not chunk:
                break
            first += chunk
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=20)
        out = first + out
        check(p.returncode == 130, "status after Ctrl-C: %d %r" % (p.returncode, err))
        check(cancelled.is_set(), "no cancel request was sent")
        cancel = d.ops("cancel")[-1]
        check(cancel["target"] == d.ops("generate")[-1]["id"], "cancel target: %r" % cancel)
        check(out.startswith(b"t0 ") and b"finish: cancelled" in err, "output: %r %r" % (out, err))
    finally:
        d.close()


def test_chat_session():
    d = FakeDaemon(standard)
    try:
        script = b"first\n/model nosuch\n/model default\nsecond\n/clear\nthird\n/bye\nnever sent\n"
        r = tandem("chat", "--system", "sys", input=script, sock=d.path)
        check(r.returncode == 0, "chat: %r" % (r,))
        gens = d.ops("generate")
        check(len(gens) == 3, "turns: %r" % gens)
        check(gens[0]["messages"] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "first"}],
              "turn 1: %r" % gens[0])
        check(gens[1]["model"] == "default" and [m["content"] for m in gens[1]["messages"]] ==
              ["sys", "first", "Hello world", "second"], "turn 2 keeps history: %r" % gens[1])
        check([m["content"] for m in gens[2]["messages"]] == ["sys", "third"], "after /clear: %r" % gens[2])
        check(b"no model named 'nosuch'" in r.stdout and r.stdout.count(b"Hello world\n") == 3, "out: %r" % r.stdout)
        # A script-driven chat ends at the first error with its status.
        r = tandem("chat", "other", input=b"hi\nagain\n", sock=d.path)
        check(r.returncode == 5 and b"not_found" in r.stderr, "chat error: %r" % (r,))
    finally:
        d.close()


def main():
    global ARGS, TMP
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("tests", nargs="*")
    ARGS = ap.parse_args()
    TMP = tempfile.mkdtemp(prefix="tandem-cli-")
    tests = [(n, f) for n, f in globals().items() if n.startswith("test_")]
    if ARGS.tests:
        tests = [(n, f) for n, f in tests if n[5:] in ARGS.tests or n in ARGS.tests]
    failed = 0
    for name, fn in tests:
        t0 = time.time()
        try:
            fn()
            print("PASS %s (%.1fs)" % (name, time.time() - t0))
        except Exception:  # noqa: BLE001 - every failure is reported
            failed += 1
            print("FAIL %s" % name)
            traceback.print_exc()
    shutil.rmtree(TMP, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
