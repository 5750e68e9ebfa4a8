#!/usr/bin/python3
"""End-to-end tests of tandemd with the real engine and a tiny generated model, spoken to by a
raw-protocol client (python3-msgpack) and, when given, the real `tandem` client.

usage: e2e_test.py --tandemd PATH --tandem-model PATH [--tandem PATH] [TEST ...]
"""
import argparse, os, re, signal, socket, struct, subprocess, sys, tempfile, threading, time, traceback

import msgpack

ARGS = None
TMP = None


class Client:
    """A raw tandem-protocol(7) client: u32 big-endian length + one msgpack map."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(60)
        self.s.connect(path)

    def send(self, msg):
        body = msgpack.packb(msg)
        self.s.sendall(struct.pack(">I", len(body)) + body)

    def send_raw(self, data):
        self.s.sendall(data)

    def _read(self, n):
        b = b""
        while len(b) < n:
            chunk = self.s.recv(n - len(b))
            if not chunk:
                raise EOFError("daemon closed the connection")
            b += chunk
        return b

    def recv(self):
        (n,) = struct.unpack(">I", self._read(4))
        return msgpack.unpackb(self._read(n), raw=False)

    def call(self, msg):
        self.send(msg)
        while True:
            r = self.recv()
            if r.get("id") == msg["id"] and ("result" in r or "error" in r):
                return r

    def close(self):
        self.s.close()


class Daemon:
    def __init__(self, models, extra=(), env=None, socket_path=None, pass_fds=(), preexec=None, wait=True,
                 wrapper=(), config=os.devnull, n_models=None):
        self.sock = socket_path or os.path.join(TMP, "d%d.sock" % time.monotonic_ns())
        cmd = list(wrapper) + [ARGS.tandemd, "--socket", self.sock, "--threads", "1", "--config", config]
        for alias, path in models:
            cmd += ["--model", "%s=%s" % (alias, path)]
        # The CPU backend unless a test names devices (gpu = auto would take a GPU where there is one).
        if not any(a in ("--gpu", "--gpus") for a in extra):
            cmd += ["--gpu", "-1"]
        cmd += list(extra)
        self.n_models = len(models) if n_models is None else n_models  # those a config file names count too
        self.log = open(os.path.join(TMP, "tandemd.log"), "ab")
        self.p = subprocess.Popen(cmd, stdout=self.log, stderr=self.log, env=env, pass_fds=pass_fds,
                                  preexec_fn=preexec)
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.p.poll() is not None:
                raise AssertionError("tandemd exited with %s" % self.p.returncode)
            try:
                c = Client(self.sock)
                r = c.call({"id": 1, "op": "models"})
                c.close()
                ms = r["result"]["models"]
                if len(ms) == self.n_models and all(m["state"] == "resident" for m in ms):
                    return
            except (FileNotFoundError, ConnectionRefusedError):
                pass
            time.sleep(0.05)
        raise AssertionError("tandemd did not become ready")

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(timeout=60)
        self.log.close()
        return rc


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def make_model(name, seed, preset="tiny"):
    path = os.path.join(TMP, name)
    if not os.path.exists(path):
        subprocess.run([ARGS.tandem_model, "make", "--preset", preset, "--seed", str(seed), "-o", path],
                       check=True, stdout=subprocess.DEVNULL)
    return path


def generate(c, rid, prompt="hello", n=8, stream=True, **kw):
    """Runs one generation; returns (chunks, final reply)."""
    msg = {"id": rid, "op": "generate", "prompt": prompt, "max_tokens": n, "stream": stream, **kw}
    c.send(msg)
    chunks = []
    while True:
        r = c.recv()
        check(r.get("id") == rid, "reply for another id: %r" % r)
        if "chunk" in r:
            chunks.append(r["chunk"])
        else:
            return chunks, r


METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*$")
METRIC_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
METRIC_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(?:,|$)')


def parse_metrics(text):
    """Prometheus text format 0.0.4 -> {(name, ((label, value), ...)): value}, checking it on the
    way: every line a HELP/TYPE comment or `name{labels} value`; valid names; HELP and TYPE once per
    family and before its samples, which stay together; counters end in _total; each histogram's
    buckets ascend in le with counts that never decrease, ending with +Inf equal to _count."""
    check(text.endswith("\n"), "the metrics text does not end with a newline")
    helps, types, samples, done, current = {}, {}, {}, set(), None
    for line in text[:-1].split("\n"):
        check(line, "an empty line in the metrics text")
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) < 3 or parts[1] not in ("HELP", "TYPE"):
                continue
            name, table = parts[2], helps if parts[1] == "HELP" else types
            check(METRIC_NAME.match(name) and name not in table and name not in done, "misplaced: %r" % line)
            table[name] = parts[3] if len(parts) > 3 else ""
            check(parts[1] == "HELP" or table[name] in ("counter", "gauge", "histogram"), "type: %r" % line)
            check(table[name] != "counter" or name.endswith("_total"), "counter name: %r" % line)
            continue
        m = METRIC_SAMPLE.match(line)
        check(m, "not a sample: %r" % line)
        name, body, labels, pos = m.group(1), m.group(2) or "", [], 0
        while pos < len(body):
            lm = METRIC_LABEL.match(body, pos)
            check(lm and not lm.group(1).startswith("__"), "bad labels: %r" % line)
            value = re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), lm.group(2))
            labels.append((lm.group(1), value))
            pos = lm.end()
        fam = name
        if name not in types:
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            fam = base if types.get(base) == "histogram" else name
        check(fam in types and fam in helps, "sample before its HELP and TYPE: %r" % line)
        check(fam == current or fam not in done, "the samples of %s are not together" % fam)
        current = fam
        done.add(fam)
        key = (name, tuple(labels))
        check(key not in samples, "a second sample %r" % (key,))
        samples[key] = float(m.group(3))
    for fam, t in types.items():
        if t != "histogram":
            continue
        series = {}
        for (name, labels), v in samples.items():
            rest = tuple(l for l in labels if l[0] != "le")
            if name == fam + "_bucket":
                series.setdefault(rest, []).append((float(dict(labels)["le"]), v))
        for rest, buckets in series.items():
            les = [b[0] for b in buckets]
            counts = [b[1] for b in buckets]
            check(les == sorted(les) and len(set(les)) == len(les) and les[-1] == float("inf"), "%s le: %r" % (fam, les))
            check(counts == sorted(counts), "%s bucket counts decrease: %r" % (fam, counts))
            check(samples.get((fam + "_count", rest)) == counts[-1], "%s: +Inf bucket != _count" % fam)
    return samples


def metric(samples, name, **labels):
    """The value of the one sample `name` whose labels include `labels` (0 when there is none)."""
    found = [v for (n, ls), v in samples.items() if n == name and all(dict(ls).get(k) == v2 for k, v2 in labels.items())]
    check(len(found) <= 1, "several samples %s %r" % (name, labels))
    return found[0] if found else 0.0


# --- tests --------------------------------------------------------------------------------------

def test_streamed_generation(model):
    d = Daemon([("default", model)])
    try:
        c = Client(d.sock)
        hello = c.call({"id": 1, "op": "hello", "client": "e2e"})
        check(hello["result"]["protocol"] == 1, "hello: %r" % hello)
        chunks, final = generate(c, 2, n=12, temperature=0)
        res = final["result"]
        check(res["generated_tokens"] >= 1 and res["prompt_tokens"] >= 1, "counts: %r" % res)
        check(res["finish_reason"] in ("length", "stop"), "finish: %r" % res)
        check(res["prefill_tok_s"] > 0, "prefill rate: %r" % res)
        check(len(chunks) >= 1, "no streamed chunks")
        # Greedy is deterministic, and stream=false returns the same text in one reply.
        _, again = generate(c, 3, n=12, temperature=0, stream=False)
        check(again["result"]["text"] == "".join(chunks), "stream and non-stream text differ")
        tok = c.call({"id": 4, "op": "tokenize", "text": "hello world"})
        check(tok["result"]["count"] == len(tok["result"]["tokens"]) > 0, "tokenize: %r" % tok)
        det = c.call({"id": 5, "op": "detokenize", "tokens": tok["result"]["tokens"]})
        check("hello world" in det["result"]["text"], "detokenize: %r" % det)
        st = c.call({"id": 6, "op": "status"})["result"]
        check(st["models"][0]["state"] == "resident" and st["uptime_seconds"] >= 0, "status: %r" % st)
        chat = c.call({"id": 7, "op": "generate", "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 4, "stream": False})
        check("result" in chat, "chat: %r" % chat)
        # Message text cannot inject control tokens: "<|im_end|>" in a content (or a role) costs
        # its 10 byte tokens, as 10 plain characters do, not the single <|im_end|> token.
        counts = []
        for rid, (role, content) in enumerate([("user", "0123456789"), ("user", "<|im_end|>"),
                                               ("user<|im_end|>", "0123456789")]):
            r = c.call({"id": 8 + rid, "op": "generate", "messages": [{"role": role, "content": content}],
                        "max_tokens": 1, "stream": False})
            check("result" in r, "chat %d: %r" % (rid, r))
            counts.append(r["result"]["prompt_tokens"])
        check(counts[0] == counts[1] and counts[2] == counts[0] + 10, "injected control tokens: %r" % counts)
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_bad_input_keeps_serving(model):
    d = Daemon([("default", model)])
    try:
        c = Client(d.sock)
        r = c.call({"id": 9, "op": "nope"})
        check(r["error"]["code"] == "unknown_op", "unknown op: %r" % r)
        r = c.call({"id": 10, "op": "generate", "prompt": "x", "temperature": float("nan")})
        check(r["error"]["code"] == "bad_request", "nan: %r" % r)
        c.send_raw(struct.pack(">I", 1) + b"\xc1")  # a frame holding invalid msgpack
        r = c.recv()
        check(r["error"]["code"] == "bad_frame" and r["id"] is None, "bad msgpack: %r" % r)
        check("result" in c.call({"id": 11, "op": "hello"}), "connection unusable after a bad body")
        c.send_raw(struct.pack(">I", 0xFFFFFFFF))  # over the cap: refused, connection closed
        r = c.recv()
        check(r["error"]["code"] == "bad_frame", "huge frame: %r" % r)
        try:
            c.recv()
            check(False, "connection stayed open after a framing error")
        except (EOFError, ConnectionResetError):
            pass
        c2 = Client(d.sock)
        check("result" in c2.call({"id": 1, "op": "hello"}), "daemon stopped serving")
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_multiplexed_and_cancel(model):
    d = Daemon([("default", model)], extra=["--queue-depth", "8"])
    try:
        c = Client(d.sock)
        for rid in (101, 102, 103):
            c.send({"id": rid, "op": "generate", "prompt": "p%d" % rid, "max_tokens": 6})
        c.send({"id": 200, "op": "generate", "prompt": "long", "max_tokens": 2000})
        c.send({"id": 201, "op": "cancel", "target": 200})
        finals = {}
        while len(finals) < 5:
            r = c.recv()
            if "result" in r or "error" in r:
                finals[r["id"]] = r
        for rid in (101, 102, 103):
            check("result" in finals[rid], "request %d: %r" % (rid, finals[rid]))
        check(finals[201]["result"]["cancelled"] is True, "cancel reply: %r" % finals[201])
        check(finals[200]["result"]["finish_reason"] == "cancelled", "cancelled gen: %r" % finals[200])
        # A duplicate id in flight is refused. The first request's prompt is long enough that its
        # prefill outlasts the second send (a one-token prompt could finish, EOS first, before
        # the duplicate arrives on a busy machine, freeing the id: seen once in CI).
        c.send({"id": 300, "op": "generate", "prompt": "a b " * 150, "max_tokens": 50})
        c.send({"id": 300, "op": "generate", "prompt": "b", "max_tokens": 5})
        seen = []
        while len(seen) < 2:
            r = c.recv()
            if "result" in r or "error" in r:
                seen.append(r)
        check(any(r.get("error", {}).get("code") == "duplicate_id" for r in seen), "dup id: %r" % seen)
        # A client that disconnects has its generation cancelled promptly.
        c2 = Client(d.sock)
        c2.send({"id": 1, "op": "generate", "prompt": "bye", "max_tokens": 2000})
        time.sleep(0.2)
        c2.close()
        deadline = time.time() + 10
        while time.time() < deadline:
            st = c.call({"id": 400, "op": "status"})["result"]
            if st["in_flight"] == 0 and not st["models"][0]["running"]:
                break
            time.sleep(0.05)
        check(st["in_flight"] == 0, "disconnected request still running: %r" % st)
    finally:
        check(d.stop() == 0, "tandemd exit status")


def swaps_under_load(d, paths, after_swap=None):
    """Four clients generate on `default` while an admin swaps it to each of `paths` in turn
    (after_swap(admin, i) checks more after swap i); returns the admin client, the failed
    requests and the completed ones once at least 8 completed (or 120 s passed)."""
    failures, done = [], []
    stop = threading.Event()

    def worker(k):
        try:
            c = Client(d.sock)
            rid = 1
            while not stop.is_set():
                _, final = generate(c, rid, prompt="client %d" % k, n=6)
                (done if "result" in final else failures).append(final)
                rid += 1
            c.close()
        except Exception as e:  # noqa: BLE001 - any failure counts
            failures.append(repr(e))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    try:
        for t in threads:
            t.start()
        admin = Client(d.sock)
        for i, path in enumerate(paths):
            time.sleep(0.3)
            r = admin.call({"id": 1000 + i, "op": "swap", "name": "default", "path": path})
            check("result" in r, "swap %d: %r" % (i, r))
            if after_swap:
                after_swap(admin, i)
        # Debug builds generate slowly: keep the load on until enough requests went through.
        deadline = time.time() + 120
        while len(done) < 8 and time.time() < deadline and not failures:
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    return admin, failures, done


def test_hot_swap_under_load(model):
    other = make_model("tiny_b.gguf", 7)
    corrupt = os.path.join(TMP, "corrupt.gguf")
    with open(corrupt, "wb") as f:
        f.write(b"GGUF" + os.urandom(4096))
    d = Daemon([("default", model)], extra=["--queue-depth", "64"])

    def corrupt_swap_fails(admin, i):
        if i == 2:  # a failed load in the middle of the load changes nothing
            r = admin.call({"id": 2000, "op": "swap", "name": "default", "path": corrupt})
            check(r.get("error", {}).get("code") == "load_failed", "corrupt swap: %r" % r)

    try:
        admin, failures, done = swaps_under_load(d, [other, model, other], corrupt_swap_fails)
        models = admin.call({"id": 3000, "op": "models"})["result"]["models"]
        check(models[0]["path"] == other and models[0]["swaps"] == 3, "after swaps: %r" % models)
        check(not failures, "failed requests during swaps: %r" % failures[:3])
        check(len(done) >= 8, "too few requests completed: %d" % len(done))
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_hybrid_swap_under_load(model):
    """A qwen35 (Gated DeltaNet hybrid) model served, swapped with a qwen3 one under streaming
    load and back, then unloaded: no request fails, and its status counts the recurrent state."""
    hybrid = make_model("tiny_qwen35.gguf", 3, preset="qwen3.5-tiny")
    d = Daemon([("default", model)], extra=["--queue-depth", "64"])
    try:
        admin, failures, done = swaps_under_load(d, [hybrid, model, hybrid])
        check(not failures, "failed requests during qwen3/qwen35 swaps: %r" % failures[:3])
        check(len(done) >= 8, "too few requests completed: %d" % len(done))
        models = admin.call({"id": 3000, "op": "models"})["result"]["models"]
        check(models[0]["path"] == hybrid and models[0]["swaps"] == 3, "after swaps: %r" % models)
        check(0 < models[0].get("state_bytes", 0) < models[0]["cache_bytes"], "qwen35 state bytes: %r" % models)
        _, final = generate(admin, 3001, prompt="state", n=4, stream=False)
        check("result" in final, "qwen35 generate: %r" % final)
        r = admin.call({"id": 3002, "op": "unload", "name": "default"})
        check("result" in r, "unload qwen35: %r" % r)
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_moe_swap_under_load(model):
    """Mixture-of-experts models (qwen3moe, and qwen35moe with its DeltaNet layers and shared expert)
    swapped in under streaming load and out again: no request fails, and each one generates."""
    moe = make_model("tiny_qwen3moe.gguf", 4, preset="qwen3moe-tiny")
    moe35 = make_model("tiny_qwen35moe.gguf", 5, preset="qwen3.5moe-tiny")
    d = Daemon([("default", model)], extra=["--queue-depth", "64"])
    try:
        admin, failures, done = swaps_under_load(d, [moe, moe35, model, moe])
        check(not failures, "failed requests during MoE swaps: %r" % failures[:3])
        check(len(done) >= 8, "too few requests completed: %d" % len(done))
        models = admin.call({"id": 3000, "op": "models"})["result"]["models"]
        check(models[0]["path"] == moe and models[0]["swaps"] == 4, "after swaps: %r" % models)
        check(models[0]["arch"] == "qwen3moe", "arch: %r" % models)
        _, final = generate(admin, 3001, prompt="experts", n=4, stream=False)
        check("result" in final, "qwen3moe generate: %r" % final)
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_admin_ops(model):
    d = Daemon([])
    try:
        c = Client(d.sock)
        r = c.call({"id": 1, "op": "generate", "prompt": "x"})
        check(r["error"]["code"] == "not_found", "no model: %r" % r)
        r = c.call({"id": 2, "op": "load", "name": "m", "path": model})
        check(r["result"]["model"]["arch"] != "", "load: %r" % r)
        r = c.call({"id": 3, "op": "load", "name": "m", "path": model})
        check(r["error"]["code"] == "exists", "load twice: %r" % r)
        r = c.call({"id": 4, "op": "load", "name": "x", "path": os.path.join(TMP, "missing.gguf")})
        check(r["error"]["code"] == "load_failed", "load missing: %r" % r)
        _, final = generate(c, 5, n=3)
        check(final["result"]["model"] == "m", "default alias: %r" % final)
        r = c.call({"id": 6, "op": "unload", "name": "m"})
        check("result" in r, "unload: %r" % r)
        r = c.call({"id": 7, "op": "models"})
        check(r["result"]["models"] == [], "models after unload: %r" % r)
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_metrics_op(model):
    """The metrics op's text moves by what the requests did: requests by outcome, tokens, the
    time-to-first-token and inter-token histograms, swaps; gauges from status."""
    d = Daemon([("default", model)])
    try:
        c = Client(d.sock)
        before = parse_metrics(c.call({"id": 1, "op": "metrics"})["result"]["text"])
        gens = []
        for rid, stream in ((2, True), (3, False), (4, True)):
            _, final = generate(c, rid, n=10, stream=stream, temperature=0)
            gens.append(final["result"])
        c.send({"id": 5, "op": "generate", "prompt": "long", "max_tokens": 2000})
        c.send({"id": 6, "op": "cancel", "target": 5})
        finals = {}
        while len(finals) < 2:
            r = c.recv()
            if "result" in r or "error" in r:
                finals[r["id"]] = r
        check(finals[5]["result"]["finish_reason"] == "cancelled", "cancel: %r" % finals)
        check(c.call({"id": 7, "op": "nope"})["error"]["code"] == "unknown_op", "unknown op")
        check("result" in c.call({"id": 8, "op": "tokenize", "text": "hello"}), "tokenize")
        check(c.call({"id": 9, "op": "generate", "model": "absent", "prompt": "x"})["error"]["code"] == "not_found", "absent")
        check("result" in c.call({"id": 10, "op": "swap", "name": "default", "path": model}), "swap")
        r = c.call({"id": 11, "op": "swap", "name": "default", "path": os.path.join(TMP, "missing.gguf")})
        check(r["error"]["code"] == "load_failed", "failed swap: %r" % r)
        reply = c.call({"id": 12, "op": "metrics"})["result"]
        check(reply["content_type"].startswith("text/plain; version=0.0.4"), "content type: %r" % reply)
        after = parse_metrics(reply["text"])

        def delta(name, **labels):
            return metric(after, name, **labels) - metric(before, name, **labels)
        gens.append(finals[5]["result"])  # its tokens count too
        out = sum(g["generated_tokens"] for g in gens)
        check(delta("tandem_generated_tokens_total", model="default") == out, "tokens out vs %d" % out)
        check(delta("tandem_prompt_tokens_total", model="default") == sum(g["prompt_tokens"] for g in gens), "tokens in")
        check(delta("tandem_requests_total", op="generate", outcome="ok") == 3, "ok count")
        check(delta("tandem_requests_total", op="generate", outcome="cancelled") == 1, "cancelled count")
        check(delta("tandem_requests_total", op="generate", outcome="not_found") == 1, "not_found count")
        check(delta("tandem_requests_total", op="invalid", outcome="unknown_op") == 1, "undecodable count")
        check(delta("tandem_requests_total", op="tokenize", outcome="ok") == 1, "tokenize count")
        check(delta("tandem_requests_total", op="swap", outcome="load_failed") == 1, "failed swap count")
        with_tokens = [g for g in gens if g["generated_tokens"] > 0]
        check(delta("tandem_time_to_first_token_seconds_count", model="default") == len(with_tokens), "TTFT count")
        gaps = sum(g["generated_tokens"] - 1 for g in with_tokens)
        check(delta("tandem_inter_token_latency_seconds_count", model="default") == gaps, "ITL count vs %d" % gaps)
        check(0 < delta("tandem_inter_token_latency_seconds_sum", model="default") < 60, "ITL sum")
        check(metric(after, "tandem_swaps_total", model="default", outcome="ok") == 1, "swaps ok")
        check(metric(after, "tandem_swaps_total", model="default", outcome="load_failed") == 1, "swaps failed")
        check(metric(after, "tandem_swap_duration_seconds_count", model="default") == 1, "only ok swaps are timed")
        check(metric(after, "tandem_models_resident") == 1 and metric(after, "tandem_queue_depth", model="default") == 0,
              "gauges: models, queue")
        check(metric(after, "tandem_model_info", model="default", device="cpu") == 1, "model info")
        check(metric(after, "tandem_device_memory_total_bytes", device="cpu") > 0, "host memory")
        # No series for an alias that does not exist: a client cannot make them at will.
        check(not any(dict(ls).get("model") == "absent" for (_, ls) in after), "a series for a missing alias")
        check("error" in c.call({"id": 13, "op": "metrics", "format": "json"}), "metrics takes no fields")
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_per_model_devices(model):
    # Without a usable GPU here, an alias given its own devices fails to load with a clear error
    # while the others load on the CPU as before (the GPU path itself: tests/engine/backend/cuda).
    d = Daemon([], extra=["--model-gpus", "split=0=16GiB,1=32GiB", "--model-ratios", "split=1,1.75"])
    try:
        c = Client(d.sock)
        r = c.call({"id": 1, "op": "load", "name": "split", "path": model})
        if "result" in r:  # a machine with two GPUs: the split loaded
            check("cuda" in r["result"]["model"]["backend"], "split backend: %r" % r)
        else:
            check(r["error"]["code"] == "load_failed" and "CUDA" in r["error"]["message"], "split load: %r" % r)
        r = c.call({"id": 2, "op": "load", "name": "plain", "path": model})
        check(r["result"]["model"]["backend"] == "cpu", "plain load: %r" % r)
        _, final = generate(c, 3, n=2, model="plain")
        check(final["result"]["generated_tokens"] >= 1, "plain generates: %r" % final)
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_model_tables(model):
    """Two [model.NAME] tables give their models their own context and KV type over the global
    keys; status shows what each got; load options (tandem load --context --kv) sit over a table;
    bad options are bad_request and the daemon keeps serving."""
    other = make_model("tiny2.gguf", 2)
    conf = os.path.join(TMP, "tables.toml")
    with open(conf, "w") as f:
        f.write('context = 128\nkv-type = "f16"\n\n'
                '[model.alpha]\npath = "%s"\ncontext = 256\nkv-type = "q8_0"\n\n'
                '[model.beta]  # the second\npath = "%s"\ncontext = 512\nkv-type = "f32"\nparallel = 2\n\n'
                '[model.later]\ncontext = 384\nkv-type = "q8_0"\n' % (model, other))
    d = Daemon([], config=conf, n_models=2)
    try:
        c = Client(d.sock)
        st = c.call({"id": 1, "op": "status"})["result"]
        got = {m["name"]: (m["n_ctx"], m["kv_type"], m["device"], m["parallel"]) for m in st["models"]}
        check(got == {"alpha": (256, "q8_0", "cpu", 4), "beta": (512, "f32", "cpu", 2)}, "status: %r" % got)
        check(any(dev["device"] == "cpu" and sorted(dev["models"]) == ["alpha", "beta"] for dev in st["devices"]),
              "devices: %r" % st["devices"])
        _, final = generate(c, 2, n=2, model="beta")
        check(final["result"]["generated_tokens"] >= 1, "beta generates: %r" % final)
        # Options of a load over the table of its alias, and the global keys under both.
        r = c.call({"id": 3, "op": "load", "name": "later", "path": model, "context": 192})
        check(r["result"]["model"]["n_ctx"] == 192 and r["result"]["model"]["kv_type"] == "q8_0", "load: %r" % r)
        r = c.call({"id": 4, "op": "load", "name": "plain", "path": model})
        check(r["result"]["model"]["n_ctx"] == 128 and r["result"]["model"]["kv_type"] == "f16", "plain: %r" % r)
        for rid, bad, says in ((5, {"context": 8}, "'context'"), (6, {"kv_type": "q4"}, "'kv_type'"),
                               (7, {"gpus": "0,x"}, "gpus '0,x'"), (8, {"ratios": "1,-1"}, "ratios")):
            r = c.call(dict({"id": rid, "op": "load", "name": "bad%d" % rid, "path": model}, **bad))
            check(r.get("error", {}).get("code") == "bad_request" and says in r["error"]["message"],
                  "bad %r: %r" % (bad, r))
        if ARGS.tandem:
            env = dict(os.environ, TANDEM_SOCKET=d.sock)
            r = subprocess.run([ARGS.tandem, "load", "cli", model, "--context", "320", "--kv", "f32",
                                "--keep-alive", "600"], env=env, capture_output=True, timeout=60)
            check(r.returncode == 0 and b"f32 cache" in r.stdout and b"320 tokens" in r.stdout, "tandem load: %r" % (r,))
            r = subprocess.run([ARGS.tandem, "swap", "cli", other, "--context", "160"], env=env,
                               capture_output=True, timeout=60)
            check(r.returncode == 0 and b"160 tokens" in r.stdout, "tandem swap: %r" % (r,))
            r = subprocess.run([ARGS.tandem, "ps"], env=env, capture_output=True, timeout=60)
            check(r.returncode == 0 and b"q8_0" in r.stdout and b"KV" in r.stdout, "tandem ps: %r" % (r,))
            r = subprocess.run([ARGS.tandem, "load", "x", model, "--kv", "q4"], env=env, capture_output=True,
                               timeout=60)
            check(r.returncode == 2, "tandem load --kv q4 is a usage error: %r" % (r,))
        ms = {m["name"]: m for m in c.call({"id": 9, "op": "models"})["result"]["models"]}
        check(ms["alpha"]["state"] == "resident" and ms["beta"]["state"] == "resident", "still serving: %r" % ms)
        if ARGS.tandem:
            # The swap took the table's (none for cli) and its own settings, not the earlier load's.
            check(ms["cli"]["n_ctx"] == 160 and ms["cli"]["kv_type"] == "f16" and ms["cli"]["keep_alive"] == 0,
                  "swapped: %r" % ms["cli"])
    finally:
        check(d.stop() == 0, "tandemd exit status")
    # A bad table stops tandemd at startup with the file, line, table and key.
    with open(conf, "w") as f:
        f.write('[model.alpha]\npath = "%s"\ncontxt = 64\n' % model)
    r = subprocess.run([ARGS.tandemd, "--config", conf, "--gpu", "-1", "--socket", os.path.join(TMP, "bad.sock")],
                       capture_output=True, timeout=60)
    check(r.returncode == 2 and ("%s:3: [model.alpha]: unknown key 'contxt'" % conf).encode() in r.stderr,
          "bad table: %r" % (r,))


def human(b):
    """The daemon's size format (memory_budget.cpp)."""
    if b < 1024:
        return "%d B" % b
    v, units = float(b), ["KiB", "MiB", "GiB", "TiB"]
    u = -1
    while v >= 1024 and u < 3:
        v /= 1024
        u += 1
    return "%.1f %s" % (v, units[u])


def model_bytes(model):
    """Resident bytes of `model` as the daemon reports them (weights + KV cache)."""
    d = Daemon([("m", model)])
    try:
        c = Client(d.sock)
        return c.call({"id": 1, "op": "models"})["result"]["models"][0]["bytes"]
    finally:
        check(d.stop() == 0, "tandemd exit status")


def states(c, rid=900):
    return {m["name"]: m["state"] for m in c.call({"id": rid, "op": "models"})["result"]["models"]}


def test_memory_budget_evicts_and_refuses(model):
    b = model_bytes(model)
    d = Daemon([], extra=["--memory-budget", str(int(b * 2.5))])
    try:
        c = Client(d.sock)
        for rid, name in ((1, "a"), (2, "b")):
            check("result" in c.call({"id": rid, "op": "load", "name": name, "path": model}), "load " + name)
        _, final = generate(c, 3, n=2, model="a")  # b is now the least recently used
        check("result" in final, "generate on a: %r" % final)
        r = c.call({"id": 4, "op": "load", "name": "c", "path": model})
        check("result" in r, "load c: %r" % r)
        check(states(c) == {"a": "resident", "b": "unloaded", "c": "resident"}, "eviction: %r" % states(c))
        # a and c serving (long prompts keep them busy): nothing may be evicted, so d is refused
        # with the sizes named.
        prompt = long_prompt(c, 1900)
        c.send({"id": 10, "op": "generate", "model": "a", "prompt": prompt, "max_tokens": 1000})
        c.send({"id": 11, "op": "generate", "model": "c", "prompt": prompt, "max_tokens": 1000})
        time.sleep(0.2)
        r = c.call({"id": 12, "op": "load", "name": "d", "path": model})
        msg = r.get("error", {}).get("message", "")
        check(r.get("error", {}).get("code") == "load_failed", "refusal: %r" % r)
        # The estimate made before loading equals what a loaded copy holds.
        check("'d' needs %s but memory-budget is %s" % (human(b), human(int(b * 2.5))) in msg, "message: %r" % msg)
        check("serving or loading: a %s, c %s" % (human(b), human(b)) in msg, "message: %r" % msg)
        for rid in (10, 11):
            c.send({"id": 100 + rid, "op": "cancel", "target": rid})
        finals = {}
        while len(finals) < 4:
            r = c.recv()
            if "result" in r or "error" in r:
                finals[r["id"]] = r
        check("result" in finals[10] and "result" in finals[11], "a and c kept serving: %r" % finals)
        check(states(c) == {"a": "resident", "b": "unloaded", "c": "resident"}, "after refusal: %r" % states(c))
        # The evicted alias still answers: it is loaded again in place of the least recently used.
        _, final = generate(c, 20, n=2, model="b")
        check("result" in final, "evicted model reloads: %r" % final)
        st = c.call({"id": 21, "op": "status"})["result"]
        check(st["memory"]["budget_used_bytes"] <= int(b * 2.5), "over budget: %r" % st["memory"])
        cpu = [x for x in st["devices"] if x["device"] == "cpu"][0]
        check(cpu["model_bytes"] == 2 * b and cpu["total_bytes"] > 0, "devices: %r" % st["devices"])
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_drain_first_swap_under_load(model):
    other = make_model("tiny_b.gguf", 7)
    b = model_bytes(model)
    d = Daemon([("default", model)], extra=["--queue-depth", "64", "--memory-budget", str(int(b * 1.5))])

    def within_budget(admin, i):
        used = admin.call({"id": 1100 + i, "op": "status"})["result"]["memory"]["budget_used_bytes"]
        check(used <= int(b * 1.5), "over budget after swap %d: %d" % (i, used))

    try:
        admin, failures, _ = swaps_under_load(d, [other, model, other], within_budget)
        m = admin.call({"id": 3000, "op": "models"})["result"]["models"][0]
        check(m["path"] == other and m["swaps"] == 3 and m["state"] == "resident", "after swaps: %r" % m)
        check(not failures, "failed requests during drain-first swaps: %r" % failures[:3])
    finally:
        check(d.stop() == 0, "tandemd exit status")


def long_prompt(c, tokens):
    """A prompt of about `tokens` tokens for the loaded model."""
    unit = "the quick brown fox jumps over the lazy dog "
    n = c.call({"id": 990, "op": "tokenize", "text": unit * 10})["result"]["count"]
    return unit * max(1, int(tokens * 10 / n))


def test_client_cli(model):
    if not ARGS.tandem:
        print("  (skipped: no --tandem)")
        return
    d = Daemon([("default", model)])
    try:
        env = dict(os.environ, TANDEM_SOCKET=d.sock)
        r = subprocess.run([ARGS.tandem, "run", "hello", "--max-tokens", "5"], env=env, capture_output=True, timeout=60)
        check(r.returncode == 0, "tandem run: %r" % (r,))
        r = subprocess.run([ARGS.tandem, "run", "default", "--max-tokens", "5"], input=b"from stdin", env=env,
                           capture_output=True, timeout=60)
        check(r.returncode == 0, "tandem run (stdin): %r" % (r,))
        r = subprocess.run([ARGS.tandem, "--json", "status"], env=env, capture_output=True, timeout=60)
        check(r.returncode == 0 and b'"models"' in r.stdout, "tandem status: %r" % (r,))
        r = subprocess.run([ARGS.tandem, "models"], env=env, capture_output=True, timeout=60)
        check(r.returncode == 0 and b"default" in r.stdout, "tandem models: %r" % (r,))
        r = subprocess.run([ARGS.tandem, "swap", "default", os.path.join(TMP, "missing.gguf")], env=env,
                           capture_output=True, timeout=60)
        check(r.returncode != 0 and b"load_failed" in r.stderr, "tandem swap missing: %r" % (r,))
        r = subprocess.run([ARGS.tandem, "--socket", os.path.join(TMP, "nobody.sock"), "status"],
                           capture_output=True, timeout=60)
        check(r.returncode == 1, "no daemon: exit status 1 (tandem(1); usage errors are 2): %r" % (r,))
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_loadgen(model):
    if not ARGS.tandem:
        print("  (skipped: no --tandem)")
        return
    import json
    d = Daemon([("default", model)])
    try:
        env = dict(os.environ, TANDEM_SOCKET=d.sock)
        r = subprocess.run([ARGS.tandem, "loadgen", "-c", "4", "-r", "8", "-n", "8", "--json"], env=env,
                           capture_output=True, timeout=120)
        check(r.returncode == 0, "tandem loadgen: %r" % (r,))
        j = json.loads(r.stdout)
        check(j["requests"] == 8 and j["failures"] == 0 and j["clients"] == 4, "loadgen: %r" % j)
        check(8 <= j["generated_tokens"] <= 64 and j["prompt_tokens"] > 0, "loadgen tokens: %r" % j)
        check(j["aggregate_decode_tok_s"] > 0 and j["ttft_p50_ms"] <= j["ttft_p99_ms"], "loadgen figures: %r" % j)
        print("  %.1f tok/s aggregate, TTFT p50 %.1f ms" % (j["aggregate_decode_tok_s"], j["ttft_p50_ms"]))
        # A request that fails (no such model) makes the exit status that of its error.
        r = subprocess.run([ARGS.tandem, "loadgen", "-m", "nosuch", "-c", "2", "-r", "3", "-n", "2"], env=env,
                           capture_output=True, timeout=60)
        check(r.returncode == 5 and b"failures 3" in r.stdout and b"not_found" in r.stderr, "loadgen fail: %r" % (r,))
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
    TMP = tempfile.mkdtemp(prefix="tandem-e2e-")
    model = make_model("tiny.gguf", 1)
    # The hardening, load progress, swap-load and serving cases live in their own files and use this module's
    # Client, Daemon and ARGS: they must import this very module, not a second copy of it under its file name.
    sys.modules.setdefault("e2e_test", sys.modules[__name__])
    import e2e_hardening_test, e2e_load_progress_test, e2e_serving_test, e2e_swap_load_test
    tests = [(n, f) for mod in (globals(), vars(e2e_hardening_test), vars(e2e_load_progress_test),
                                vars(e2e_serving_test), vars(e2e_swap_load_test))
             for n, f in mod.items() if n.startswith("test_")]
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
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
