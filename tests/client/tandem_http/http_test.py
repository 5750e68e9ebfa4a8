#!/usr/bin/python3
"""tandem-http against a real tandemd serving the default model (SmolLM2-135M-Instruct) on the CPU:
curl and urllib, the real `openai` package from PyPI (installed into a venv under the build
directory), the bearer token, bad input of every kind (each a clear OpenAI-style error, the server
serving on), a client that goes away mid-generation (its sequence is cancelled on tandemd), and
socket activation (started as systemd starts it, with listening sockets passed as fds 3, 4, ...).

usage: http_test.py --tandemd PATH --tandem-http PATH --venv DIR [TEST ...]
Exit status: 0 pass, 1 failure, 77 skipped (no model, or no network to install `openai`).
"""
import argparse, fcntl, http.client, json, os, re, shutil, signal, socket, subprocess, sys, tempfile, time
import traceback
import urllib.error, urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "daemon"))
import e2e_test as e2e  # noqa: E402  the daemon tests' raw-protocol Client and Daemon (python3-msgpack)

TOKEN = "test-token-1234"
ARGS = None
MODEL = None


def skip(msg):
    print("SKIP: " + msg)
    sys.exit(77)


def find_model():
    env = os.environ.get("TANDEM_SMOLLM2_GGUF")
    if env:
        if not os.path.isfile(env):
            print("FAIL: TANDEM_SMOLLM2_GGUF=%s is not a file" % env)
            sys.exit(1)
        return env
    r = subprocess.run(["bash", os.path.join(SOURCE_DIR, "scripts", "fetch_model.sh")], stdout=subprocess.PIPE, text=True)
    path = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    if r.returncode != 0 or not os.path.isfile(path):
        skip("could not fetch SmolLM2 with scripts/fetch_model.sh (no network?); set TANDEM_SMOLLM2_GGUF=FILE.gguf")
    return path


def openai_python():
    """The venv's python with `openai` installed (made once, reused by later runs)."""
    py = os.path.join(ARGS.venv, "bin", "python3")
    if os.path.exists(py) and subprocess.run([py, "-c", "import openai"], capture_output=True).returncode == 0:
        return py
    shutil.rmtree(ARGS.venv, ignore_errors=True)
    r = subprocess.run([sys.executable, "-m", "venv", ARGS.venv], capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL: python3 -m venv (Debian: python3-venv): %s" % r.stderr.strip())
        sys.exit(1)
    r = subprocess.run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "openai"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        shutil.rmtree(ARGS.venv, ignore_errors=True)
        skip("pip install openai failed (no network to PyPI?): %s" % r.stderr.strip()[-500:])
    return py


class Activated:
    """A process started as systemd starts a socket-activated service: the listening sockets
    `socks` become fds 3, 4, ..., LISTEN_FDS counts them and LISTEN_PID is the process's own pid
    (set between fork and exec), unless `listen_pid` names another. The subset of Popen that
    Front uses."""

    def __init__(self, argv, socks, out, listen_pid=None):
        self.returncode = None
        self.pid = os.fork()
        if self.pid != 0:
            return
        try:  # the child: nothing here may return into the test
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
            # Above the target range first, so that no dup2 overwrites a socket still to be moved.
            high = [fcntl.fcntl(s.fileno(), fcntl.F_DUPFD, 100) for s in socks]
            for i, fd in enumerate(high):
                os.dup2(fd, 3 + i)  # inheritable: survives the exec
            env = dict(os.environ, LISTEN_FDS=str(len(socks)), LISTEN_FDNAMES=":".join(["http"] * len(socks)),
                       LISTEN_PID=str(listen_pid or os.getpid()))
            os.execve(argv[0], argv, env)
        except BaseException:  # noqa: BLE001  said in the log, then the child ends
            traceback.print_exc()
        finally:
            os._exit(127)

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def terminate(self):
        if self.poll() is None:
            os.kill(self.pid, signal.SIGTERM)

    def wait(self, timeout):
        deadline = time.time() + timeout
        while self.poll() is None:
            if time.time() > deadline:
                raise subprocess.TimeoutExpired("tandem-http", timeout)
            time.sleep(0.02)
        return self.returncode


class Front:
    """A tandem-http process; its port is read from its first log line (it listens on port 0).
    With `passed` (listening sockets) it is started socket-activated on them, through `wrapper`
    (a command that execs the rest) if given."""

    def __init__(self, sock, extra=(), listen="127.0.0.1:0", passed=None, listen_pid=None, wrapper=()):
        self.log_path = os.path.join(e2e.TMP, "tandem-http-%d.log" % time.monotonic_ns())
        self.log = open(self.log_path, "wb")
        argv = list(wrapper) + [ARGS.tandem_http, "--socket", sock] + (["--listen", listen] if listen else []) + list(extra)
        if passed is None:
            self.p = subprocess.Popen(argv, stdout=self.log, stderr=self.log)
        else:
            self.p = Activated(argv, passed, self.log, listen_pid)
        deadline = time.time() + 10
        self.port = None
        while time.time() < deadline:
            m = re.search(r"serving HTTP on (\S+)", open(self.log_path).read())
            if m:
                self.port = int(m.group(1).rsplit(":", 1)[1]) if not m.group(1).startswith("unix:") else None
                return
            e2e.check(self.p.poll() is None, "tandem-http exited: %s" % open(self.log_path).read())
            time.sleep(0.02)
        raise AssertionError("tandem-http did not start")

    def log_text(self):
        return open(self.log_path).read()

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def stop(self):
        self.p.terminate()
        rc = self.p.wait(timeout=20)
        self.log.close()
        return rc


def request(front, path, body=None, token=TOKEN, method=None, raw=None, headers=None):
    """(status, parsed JSON or text) of one HTTP request."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(front.url(path), data=data, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, text, ctype = r.status, r.read().decode(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        status, text, ctype = e.code, e.read().decode(), e.headers.get("Content-Type", "")
    return status, json.loads(text) if ctype.startswith("application/json") else text


def sse_events(text):
    """The data fields of an event stream; the last one must be [DONE]."""
    events = [line[6:] for line in text.split("\n") if line.startswith("data: ")]
    e2e.check(events and events[-1] == "[DONE]", "stream does not end with [DONE]: %r" % text[-200:])
    return [json.loads(e) for e in events[:-1]]


def expect_error(front, body, status, param=None, code=None, path="/v1/chat/completions", **kw):
    st, r = request(front, path, body, **kw)
    e2e.check(st == status and isinstance(r, dict) and "error" in r, "expected %d, got %d %r" % (status, st, r))
    err = r["error"]
    e2e.check(err["message"] and err["type"] and set(err) == {"message", "type", "param", "code"}, "error shape: %r" % r)
    if param is not None:
        e2e.check(err["param"] == param, "param %r: %r" % (param, r))
    if code is not None:
        e2e.check(err["code"] == code, "code %r: %r" % (code, r))
    return err


def still_serving(front):
    st, r = request(front, "/v1/completions", {"prompt": "Hello", "max_tokens": 2})
    e2e.check(st == 200 and r["usage"]["completion_tokens"] >= 1, "server stopped serving: %d %r" % (st, r))


def daemon_idle(daemon, within):
    """Whether tandemd has nothing running or in flight within `within` seconds; and how long it took."""
    c = e2e.Client(daemon.sock)
    t0 = time.time()
    try:
        while time.time() - t0 < within:
            st = c.call({"id": 1, "op": "status"})["result"]
            if st["in_flight"] == 0 and all(m.get("sequences", {}).get("running", 0) == 0 for m in st["models"]):
                return True, time.time() - t0
            time.sleep(0.02)
        return False, time.time() - t0
    finally:
        c.close()


CHAT = {"model": "default", "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 12, "temperature": 0}
MSGS = [{"role": "user", "content": "What is the capital of France?"}]


# --- tests (each gets the shared daemon and front) ------------------------------------------------

def test_health_models_token(d, f):
    st, r = request(f, "/health", token=None)
    e2e.check(st == 200 and r["status"] == "ok", "health without a token: %d %r" % (st, r))
    expect_error(f, None, 401, code="invalid_api_key", path="/v1/models", token=None)
    expect_error(f, None, 401, code="invalid_api_key", path="/v1/models", token="wrong")
    expect_error(f, CHAT, 401, code="invalid_api_key", token=TOKEN + "x")
    st, r = request(f, "/v1/models")
    e2e.check(st == 200 and r["object"] == "list" and [m["id"] for m in r["data"]] == ["default"] and
              r["data"][0]["object"] == "model", "models: %r" % r)


def test_chat(d, f):
    st, r = request(f, "/v1/chat/completions", CHAT)
    e2e.check(st == 200 and r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-"), "chat: %r" % r)
    msg, u = r["choices"][0]["message"], r["usage"]
    e2e.check(msg["role"] == "assistant" and "Paris" in msg["content"], "chat answer: %r" % r)
    e2e.check(r["choices"][0]["finish_reason"] in ("stop", "length") and u["completion_tokens"] >= 1 and
              u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], "chat usage: %r" % r)
    st, text = request(f, "/v1/chat/completions", dict(CHAT, stream=True, stream_options={"include_usage": True}))
    ev = sse_events(text)
    e2e.check(st == 200 and ev[0]["choices"][0]["delta"]["role"] == "assistant", "first chunk: %r" % ev[:1])
    streamed = "".join(e["choices"][0]["delta"].get("content", "") for e in ev if e["choices"])
    e2e.check(streamed == msg["content"], "stream %r vs %r" % (streamed, msg["content"]))
    e2e.check(ev[-2]["choices"][0]["finish_reason"] == r["choices"][0]["finish_reason"], "last chunk: %r" % ev[-2])
    e2e.check(ev[-1]["choices"] == [] and ev[-1]["usage"]["completion_tokens"] == u["completion_tokens"],
              "usage chunk: %r" % ev[-1])
    # Without include_usage no chunk carries usage; max_completion_tokens wins over max_tokens.
    st, text = request(f, "/v1/chat/completions", dict(CHAT, stream=True, max_completion_tokens=3, max_tokens=50))
    ev = sse_events(text)
    e2e.check(all("usage" not in e for e in ev) and ev[-1]["choices"][0]["finish_reason"] == "length", "no usage: %r" % ev)


def test_completions(d, f):
    body = {"model": "default", "prompt": "1, 2, 3,", "max_tokens": 8, "temperature": 0}
    st, r = request(f, "/v1/completions", body)
    e2e.check(st == 200 and r["object"] == "text_completion" and r["choices"][0]["finish_reason"] == "length" and
              r["usage"]["completion_tokens"] == 8 and r["choices"][0]["text"].startswith(" 4"), "completion: %r" % r)
    st, text = request(f, "/v1/completions", dict(body, stream=True))
    streamed = "".join(e["choices"][0]["text"] for e in sse_events(text))
    e2e.check(streamed == r["choices"][0]["text"], "stream %r vs %r" % (streamed, r["choices"][0]["text"]))
    # stop as a string and as an array; echo puts the prompt first.
    for stop in (",", [",", "never"]):
        st, s = request(f, "/v1/completions", dict(body, stop=stop))
        e2e.check(st == 200 and s["choices"][0]["text"] == " 4" and s["choices"][0]["finish_reason"] == "stop",
                  "stop %r: %r" % (stop, s))
    st, e = request(f, "/v1/completions", dict(body, echo=True, max_tokens=2))
    e2e.check(e["choices"][0]["text"].startswith("1, 2, 3, 4"), "echo: %r" % e)


def scrape(front, token=TOKEN):
    """The parsed /metrics text (its format checked) of a front."""
    st, text = request(front, "/metrics", token=token)
    e2e.check(st == 200 and isinstance(text, str), "/metrics: %d %r" % (st, text))
    return e2e.parse_metrics(text)


def test_metrics(d, f):
    expect_error(f, None, 401, code="invalid_api_key", path="/metrics", token=None)
    req = urllib.request.Request(f.url("/metrics"), headers={"Authorization": "Bearer " + TOKEN})
    with urllib.request.urlopen(req, timeout=30) as r:
        e2e.check(r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), "type: %r" % r.headers)
    before = scrape(f)
    usages = []
    for body in (CHAT, dict(CHAT, max_tokens=5), {"prompt": "1, 2, 3,", "max_tokens": 6, "temperature": 0}):
        st, r = request(f, "/v1/chat/completions" if "messages" in body else "/v1/completions", body)
        e2e.check(st == 200, "request: %d %r" % (st, r))
        usages.append(r["usage"])
    st, text = request(f, "/v1/chat/completions", dict(CHAT, stream=True, stream_options={"include_usage": True}))
    usages.append(sse_events(text)[-1]["usage"])
    expect_error(f, dict(CHAT, model="gpt-4o"), 404, code="model_not_found")
    after = scrape(f)

    def delta(name, **labels):
        return e2e.metric(after, name, **labels) - e2e.metric(before, name, **labels)
    out = sum(u["completion_tokens"] for u in usages)
    e2e.check(delta("tandem_generated_tokens_total", model="default") == out, "tokens out != %d" % out)
    e2e.check(delta("tandem_prompt_tokens_total", model="default") == sum(u["prompt_tokens"] for u in usages),
              "tokens in")
    e2e.check(delta("tandem_requests_total", op="generate", outcome="ok") == 4, "generate ok")
    e2e.check(delta("tandem_requests_total", op="generate", outcome="not_found") == 1, "generate not_found")
    e2e.check(delta("tandem_time_to_first_token_seconds_count", model="default") == 4, "TTFT count")
    e2e.check(delta("tandem_inter_token_latency_seconds_count", model="default") ==
              sum(u["completion_tokens"] - 1 for u in usages), "ITL count")
    e2e.check(delta("tandem_http_requests_total", endpoint="/v1/chat/completions", code="200") == 3, "HTTP 200s")
    e2e.check(delta("tandem_http_requests_total", endpoint="/v1/completions", code="200") == 1, "HTTP completions")
    e2e.check(delta("tandem_http_requests_total", endpoint="/v1/chat/completions", code="404") == 1, "HTTP 404")
    # The 401 above was counted once its reply was written, before the first scrape came.
    e2e.check(e2e.metric(before, "tandem_http_requests_total", endpoint="/metrics", code="401") == 1, "HTTP 401")
    e2e.check(e2e.metric(after, "tandem_daemon_up") == 1, "tandem_daemon_up with tandemd there")
    e2e.check(e2e.metric(after, "tandem_model_resident", model="default") == 1, "daemon gauges are there")


def test_curl(d, f):
    curl = shutil.which("curl")
    if not curl:
        raise AssertionError("curl is not installed (scripts/install_deps.sh installs it)")
    auth = ["-H", "Authorization: Bearer " + TOKEN]
    out = subprocess.run([curl, "-sS", "-N", f.url("/v1/chat/completions")] + auth +
                         ["-d", json.dumps(dict(CHAT, stream=True))], capture_output=True, text=True, timeout=60)
    ev = sse_events(out.stdout)
    e2e.check("Paris" in "".join(e["choices"][0]["delta"].get("content", "") for e in ev), "curl stream: %r" % out.stdout)
    out = subprocess.run([curl, "-sS", f.url("/v1/completions")] + auth +
                         ["-d", '{"prompt": "1, 2, 3,", "max_tokens": 4, "temperature": 0}'],
                         capture_output=True, text=True, timeout=60)
    e2e.check(json.loads(out.stdout)["usage"]["completion_tokens"] == 4, "curl completion: %r" % out.stdout)
    # A body over --max-body: curl announces it (Expect: 100-continue or not) and gets 413.
    big = os.path.join(e2e.TMP, "big.json")
    with open(big, "w") as fh:
        fh.write('{"prompt": "' + "a" * (200 << 10) + '"}')
    out = subprocess.run([curl, "-sS", "-o", "/dev/null", "-w", "%{http_code}", f.url("/v1/completions")] + auth +
                         ["--data-binary", "@" + big], capture_output=True, text=True, timeout=60)
    e2e.check(out.stdout == "413", "curl huge body: %r %r" % (out.stdout, out.stderr))


def test_openai_package(d, f):
    py = openai_python()
    r = subprocess.run([py, os.path.join(HERE, "openai_client.py"), f.url("/v1"), TOKEN],
                       capture_output=True, text=True, timeout=240)
    print(r.stdout.strip().replace("\n", "\n    "))
    e2e.check(r.returncode == 0, "openai client failed:\n%s%s" % (r.stdout, r.stderr))


def test_bad_json_and_fields(d, f):
    M = [{"role": "user", "content": "hi"}]
    expect_error(f, None, 400, raw=b'{"messages": [')
    expect_error(f, None, 400, raw=b"[1, 2]")
    expect_error(f, None, 400, raw=b"[" * 60000)  # nesting: refused, never built
    expect_error(f, {"messages": "hi"}, 400, param="messages")
    expect_error(f, {"messages": []}, 400, param="messages")
    expect_error(f, {"messages": [{"content": "x"}]}, 400, param="messages[0].role")
    expect_error(f, {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, 400)
    expect_error(f, {"messages": M, "max_tokens": "x"}, 400, param="max_tokens")
    expect_error(f, {"messages": M, "max_tokens": 0}, 400, param="max_tokens")
    expect_error(f, {"messages": M, "temperature": "hot"}, 400, param="temperature")
    expect_error(f, {"messages": M, "top_p": 3}, 400, param="top_p")
    expect_error(f, {"messages": M, "stream": "yes"}, 400, param="stream")
    expect_error(f, {"messages": M, "stop": 5}, 400, param="stop")
    expect_error(f, {"messages": M, "seed": 1.5}, 400, param="seed")
    expect_error(f, {"messages": M, "n": 2}, 400, param="n")
    expect_error(f, {"messages": M, "model": 7}, 400, param="model")
    expect_error(f, {"messages": M, "model": "gpt-4o"}, 404, param="model", code="model_not_found")
    expect_error(f, {"messages": M, "model": "gpt-4o", "stream": True}, 404, code="model_not_found")
    expect_error(f, {"prompt": [1, 2, 3]}, 400, param="prompt", path="/v1/completions")
    expect_error(f, {"prompt": ["a", "b"]}, 400, param="prompt", path="/v1/completions")
    expect_error(f, None, 404, path="/v1/nothing", method="GET")
    expect_error(f, None, 405, path="/v1/chat/completions", method="GET")
    # Unknown fields (and nulls for known ones) are ignored.
    st, r = request(f, "/v1/chat/completions", {"messages": M, "max_tokens": 2, "frobnicate": {"x": [1]},
                                                 "presence_penalty": 0.5, "stop": None, "n": 1, "user": "u"})
    e2e.check(st == 200 and r["usage"]["completion_tokens"] >= 1, "unknown fields: %d %r" % (st, r))
    still_serving(f)


def raw_http(port, data, timeout=10):
    """Sends raw bytes; returns what came back until the server closed (or the timeout)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        if data:
            s.sendall(data)
        out = b""
        while True:
            try:
                b = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not b:
                break
            out += b
        return out
    finally:
        s.close()


def test_limits(d, f):
    auth = "Authorization: Bearer %s\r\n" % TOKEN
    # Content-Length over --max-body: 413 before any of the body is read.
    out = raw_http(f.port, ("POST /v1/completions HTTP/1.1\r\nHost: x\r\n%sContent-Length: 10000000\r\n\r\n{" % auth).encode())
    e2e.check(out.startswith(b"HTTP/1.1 413") and b"request_too_large" in out, "content-length 413: %r" % out[:300])
    # A chunked body that grows past the limit.
    conn = http.client.HTTPConnection("127.0.0.1", f.port, timeout=30)
    try:
        conn.request("POST", "/v1/completions", body=iter([b'{"prompt": "' + b"a" * (40 << 10)] * 4),
                     headers={"Authorization": "Bearer " + TOKEN}, encode_chunked=True)
        resp = conn.getresponse()
        e2e.check(resp.status == 413, "chunked 413: %d" % resp.status)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may close while the client still sends; the next check shows it survived
    finally:
        conn.close()
    # A header block over the limit, and a request line that is not HTTP.
    out = raw_http(f.port, b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * (64 << 10) + b"\r\n\r\n")
    e2e.check(out.startswith(b"HTTP/1.1 431"), "header limit: %r" % out[:200])
    out = raw_http(f.port, b"THIS IS NOT HTTP\r\n\r\n")
    e2e.check(out.startswith(b"HTTP/1.1 400") and b"invalid_request_error" in out, "garbage: %r" % out[:200])
    # A slow body: 408 once --timeout (2 s) has passed since the request began.
    t0 = time.time()
    out = raw_http(f.port, ("POST /v1/completions HTTP/1.1\r\nHost: x\r\n%sContent-Length: 100\r\n\r\n{\"pro" % auth).encode())
    took = time.time() - t0
    e2e.check(out.startswith(b"HTTP/1.1 408") and 1.5 < took < 5, "slow body: %.1fs %r" % (took, out[:200]))
    # An idle keep-alive connection is closed quietly, without a 408.
    out = raw_http(f.port, b"")
    e2e.check(out == b"", "idle connection: %r" % out)
    still_serving(f)


def test_keep_alive(d, f):
    conn = http.client.HTTPConnection("127.0.0.1", f.port, timeout=30)
    try:
        for i in range(3):
            conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "Hi", "max_tokens": 2, "stream": i == 1}),
                         headers={"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"})
            resp = conn.getresponse()
            body = resp.read()
            e2e.check(resp.status == 200 and body, "request %d on one connection: %d %r" % (i, resp.status, body))
        conn.request("GET", "/health")
        r = conn.getresponse()
        r.read()
        e2e.check(r.status == 200, "health on the same connection")
        # A refused request without a body leaves the connection usable.
        conn.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})
        r = conn.getresponse()
        r.read()
        e2e.check(r.status == 401 and not r.will_close, "401 kept the connection: %d" % r.status)
        conn.request("GET", "/v1/models", headers={"Authorization": "Bearer " + TOKEN})
        e2e.check(conn.getresponse().status == 200, "models after a 401 on the same connection")
    finally:
        conn.close()
    # Pipelined: a generation and a health check sent together are answered in order.
    body = json.dumps({"prompt": "Hi", "max_tokens": 2}).encode()
    out = raw_http(f.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() +
                   b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body +
                   b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    e2e.check(out.count(b"HTTP/1.1 200") == 2 and out.index(b"text_completion") < out.index(b'"status":"ok"'),
              "pipelined: %r" % out[:600])


def send_and_leave(port, body, until):
    """Starts a generation on a raw connection, reads until `until(received)` is true, then closes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() +
              b"\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    got = b""
    while not until(got):
        b = s.recv(65536)
        e2e.check(b, "closed before the condition held: %r" % got[-300:])
        got += b
    s.close()
    return got


def test_disconnect_cancels(d, f):
    long_gen = {"prompt": "1, 2, 3,", "max_tokens": 4000, "temperature": 0}
    # Streaming: leave after a few events; tandemd's sequence must be gone within 2 s (the whole
    # generation would take far longer).
    send_and_leave(f.port, dict(long_gen, stream=True), lambda got: got.count(b"data: ") >= 4)
    idle, took = daemon_idle(d, 2.0)
    e2e.check(idle, "a streaming client left, tandemd still runs its sequence after %.1fs" % took)
    print("    streaming client gone: tandemd idle after %.3fs" % took)
    # Not streaming: nothing comes back until the end, the watch on the socket notices the close.
    s = socket.create_connection(("127.0.0.1", f.port), timeout=30)
    data = json.dumps(long_gen).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() +
              b"\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    c = e2e.Client(d.sock)
    deadline = time.time() + 10
    while time.time() < deadline:
        st = c.call({"id": 1, "op": "status"})["result"]
        if st["models"][0]["sequences"]["running"] > 0:
            break
        time.sleep(0.02)
    c.close()
    e2e.check(st["models"][0]["sequences"]["running"] > 0, "the generation never started: %r" % st)
    s.close()
    idle, took = daemon_idle(d, 2.0)
    e2e.check(idle, "a non-streaming client left, tandemd still runs its sequence after %.1fs" % took)
    print("    non-streaming client gone: tandemd idle after %.3fs" % took)
    still_serving(f)


def test_unix_listen_and_connection_limit(d, f):
    path = os.path.join(e2e.TMP, "http.sock")
    g = Front(d.sock, ["--max-connections", "2"], listen="unix:" + path)
    try:
        def unix_get(target):
            return unix_http(path, ("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % target).encode())

        out = unix_get("/v1/models")
        e2e.check(out.startswith(b"HTTP/1.1 200") and b'"default"' in out, "unix socket: %r" % out[:300])
        held = []
        for _ in range(2):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            held.append(s)
        # The front counts a connection once it has accepted it and sees a close once it reads
        # it: ask until it has (a fixed wait could be too short on a busy machine).
        def health_until(status):
            deadline = time.time() + 10
            while True:
                out = unix_get("/health")
                if out.startswith(status) or time.time() > deadline:
                    return out
                time.sleep(0.02)

        out = health_until(b"HTTP/1.1 503")
        e2e.check(out.startswith(b"HTTP/1.1 503") and b"too_many_connections" in out, "third connection: %r" % out[:300])
        held.pop().close()
        e2e.check(health_until(b"HTTP/1.1 200").startswith(b"HTTP/1.1 200"), "after one closed")
        for s in held:
            s.close()
    finally:
        e2e.check(g.stop() == 0, "tandem-http exit status")
    e2e.check(not os.path.exists(path), "the Unix socket is removed at stop")


def listening_sockets(unix_path):
    """A TCP listener on a free loopback port and a Unix one at `unix_path`, as a socket unit makes."""
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(16)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(unix_path)
    unix.listen(16)
    return tcp, unix


def unix_http(path, data):
    """Raw HTTP over a Unix socket; what came back until the server closed."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(path)
    try:
        s.sendall(data)
    except BrokenPipeError:
        pass  # refused at once (a 503): the reply is still there to read
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
    s.close()
    return out


def test_socket_activation(d, f):
    """Started as tandem-http.socket starts it: serves on the passed TCP and Unix sockets (an
    explicit --listen loses; here it names a port in use, so binding it would fail), leaves the
    Unix socket file to its owner, and a second start on the same sockets serves again (what a
    restart under systemd is)."""
    path = os.path.join(e2e.TMP, "activated-http.sock")
    tcp, unix = listening_sockets(path)
    tcp_port = tcp.getsockname()[1]
    try:
        for start in range(2):
            g = Front(d.sock, listen="127.0.0.1:%d" % f.port, passed=[tcp, unix])
            try:
                log = g.log_text()
                e2e.check(g.port == tcp_port, "not the passed port: %s" % log)
                e2e.check("ignored: serving on the socket(s) passed by systemd" in log and
                          "serving HTTP on unix:%s (passed by systemd)" % path in log, "log: %s" % log)
                st, r = request(g, "/v1/chat/completions", CHAT, token=None)
                e2e.check(st == 200 and "Paris" in r["choices"][0]["message"]["content"], "start %d chat: %r" % (start, r))
                body = json.dumps(dict(CHAT, stream=True)).encode()
                out = unix_http(path, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                e2e.check(out.startswith(b"HTTP/1.1 200") and b"Paris" in out and b"data: [DONE]" in out,
                          "start %d stream over the passed Unix socket: %r" % (start, out[:300]))
            finally:
                e2e.check(g.stop() == 0, "tandem-http exit status")
            e2e.check(os.path.exists(path), "the passed Unix socket was removed by tandem-http")
    finally:
        tcp.close()
        unix.close()


def test_socket_activation_private_network(d, f):
    """What the socket-only drop-in (PrivateNetwork=yes) relies on: in a network namespace of its
    own, tandem-http still accepts on a TCP socket bound in the host's namespace and reaches
    tandemd through its socket file. unshare -n execs in place, so LISTEN_PID is tandem-http's."""
    unshare = shutil.which("unshare")
    if not unshare or subprocess.run([unshare, "-n", "true"], capture_output=True).returncode != 0:
        print("    skipped: cannot make a network namespace here (unshare -n)")
        return
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(16)
    try:
        g = Front(d.sock, listen=None, passed=[tcp], wrapper=[unshare, "-n"])
        try:
            e2e.check(g.port == tcp.getsockname()[1], "not the passed port: %s" % g.log_text())
            st, r = request(g, "/v1/chat/completions", CHAT, token=None)
            e2e.check(st == 200 and "Paris" in r["choices"][0]["message"]["content"], "private network: %r" % r)
        finally:
            e2e.check(g.stop() == 0, "tandem-http exit status")
    finally:
        tcp.close()


def test_socket_activation_not_ours_or_unusable(d, f):
    # LISTEN_PID names another process (inherited from an activated parent): bind --listen.
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(4)
    try:
        g = Front(d.sock, passed=[tcp], listen_pid=1)
        try:
            e2e.check(g.port != tcp.getsockname()[1] and "passed by systemd" not in g.log_text(), g.log_text())
            still_serving_open(g)
        finally:
            e2e.check(g.stop() == 0, "tandem-http exit status")
    finally:
        tcp.close()
    # A socket that is not listening (Accept=yes would pass one): exit 1, saying why.
    bound = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    bound.bind(("127.0.0.1", 0))
    log_path = os.path.join(e2e.TMP, "tandem-http-bad-activation.log")
    try:
        with open(log_path, "wb") as log:
            p = Activated([ARGS.tandem_http, "--socket", d.sock], [bound], log)
            rc = p.wait(timeout=20)
        text = open(log_path).read()
        e2e.check(rc == 1 and "socket activation: fd 3 passed by socket activation is not a listening stream socket"
                  in text, "not listening: rc %s, %s" % (rc, text))
    finally:
        bound.close()


def test_daemon_unreachable(d, f):
    g = Front(os.path.join(e2e.TMP, "nobody.sock"))
    try:
        expect_error(g, None, 503, path="/health", code="daemon_unavailable", token=None)
        err = expect_error(g, CHAT, 503, code="daemon_unavailable")
        e2e.check("cannot connect to tandemd" in err["message"], "message: %r" % err)
        # /metrics still answers: tandem-http's own families, and the daemon reported down.
        m = scrape(g, token=None)
        e2e.check(e2e.metric(m, "tandem_daemon_up") == 0, "tandem_daemon_up: %r" % m)
        e2e.check(e2e.metric(m, "tandem_http_requests_total", endpoint="/v1/chat/completions", code="503") == 1,
                  "the 503 is counted: %r" % m)
        e2e.check(not any(n.startswith("tandem_generated") for n, _ in m), "daemon figures without tandemd")
    finally:
        e2e.check(g.stop() == 0, "tandem-http exit status")


def test_daemon_restart(d, f):
    """tandemd restarting under a running front: 503 while it is down, served again after."""
    sock = os.path.join(e2e.TMP, "restart.sock")
    a = e2e.Daemon([("default", MODEL)], socket_path=sock)
    g = Front(sock)
    try:
        still_serving_open(g)
        e2e.check(a.stop() == 0, "tandemd exit status")
        expect_error(g, None, 503, path="/health", code="daemon_unavailable", token=None)
        expect_error(g, CHAT, 503, code="daemon_unavailable")
        e2e.check(e2e.metric(scrape(g, token=None), "tandem_daemon_up") == 0, "up while tandemd is down")
        b = e2e.Daemon([("default", MODEL)], socket_path=sock)
        try:
            still_serving_open(g)
            e2e.check(e2e.metric(scrape(g, token=None), "tandem_daemon_up") == 1, "up after the restart")
        finally:
            e2e.check(b.stop() == 0, "tandemd exit status")
    finally:
        e2e.check(g.stop() == 0, "tandem-http exit status")


def still_serving_open(front):
    st, r = request(front, "/v1/completions", {"prompt": "Hello", "max_tokens": 2}, token=None)
    e2e.check(st == 200 and r["usage"]["completion_tokens"] >= 1, "not serving: %d %r" % (st, r))


def test_exit_statuses(d, f):
    def rc(*args):
        return subprocess.run([ARGS.tandem_http] + list(args), capture_output=True, timeout=20).returncode
    e2e.check(rc("--help") == 0, "--help")
    e2e.check(rc("--no-such-option") == 2, "unknown option")
    e2e.check(rc("--listen", "nowhere") == 2, "bad --listen")
    e2e.check(rc("--timeout", "x") == 2, "bad --timeout")
    e2e.check(rc("--token-file", os.path.join(e2e.TMP, "missing")) == 2, "missing token file")
    e2e.check(rc("--listen", "127.0.0.1:%d" % f.port) == 1, "port in use")


def main():
    global ARGS, MODEL
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandemd", required=True)
    ap.add_argument("--tandem-http", required=True)
    ap.add_argument("--venv", required=True, help="where the venv with the openai package is made (kept)")
    ap.add_argument("tests", nargs="*")
    ARGS = ap.parse_args()
    model = MODEL = find_model()
    e2e.ARGS = ARGS
    e2e.TMP = tempfile.mkdtemp(prefix="tandem-http-test.")
    token_file = os.path.join(e2e.TMP, "token")
    with open(token_file, "w") as fh:
        fh.write(TOKEN + "\n")
    tests = [(n, fn) for n, fn in globals().items() if n.startswith("test_")]
    if ARGS.tests:
        tests = [(n, fn) for n, fn in tests if n[5:] in ARGS.tests or n in ARGS.tests]
    t_all = time.time()
    d = e2e.Daemon([("default", model)], extra=["--parallel", "2"])
    f = Front(d.sock, ["--token-file", token_file, "--timeout", "2", "--max-body", "64KiB"])
    failed = 0
    try:
        for name, fn in tests:
            t0 = time.time()
            try:
                fn(d, f)
                print("PASS %s (%.1fs)" % (name, time.time() - t0))
            except Exception:  # noqa: BLE001
                failed += 1
                print("FAIL %s" % name)
                traceback.print_exc()
    finally:
        rc_front, rc_daemon = f.stop(), d.stop()
    if rc_front != 0 or rc_daemon != 0:
        failed += 1
        print("FAIL exit statuses: tandem-http %s, tandemd %s" % (rc_front, rc_daemon))
    if failed:
        print("logs: %s" % e2e.TMP)
        print("--- tandem-http log ---\n" + open(f.log_path).read()[-4000:])
    print("%d of %d tests failed; %.1fs in all" % (failed, len(tests), time.time() - t_all))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
