#!/usr/bin/env python3
"""Streaming decode through tandemd's socket (`tandem loadgen --raw`) versus through tandem-http
(/v1/completions, stream, the same raw prompts), at each client count; one table of aggregate
tokens/s, time to first chunk and inter-chunk gap (p50, nearest rank, as loadgen computes them).
Only the standard library: the GPU machine has no pip packages for HTTP or msgpack.

usage: http_load.py --tandem PATH --socket SOCK --http-port PORT [--clients "1 4"] [--tokens 128]
                    [--requests N]   (default per client count c: max(8, 2c))
Every request on both paths sends the same prompt (loadgen --same-prompt), which a warm-up
request put in tandemd's prefix cache first: both paths then prefill the same (the reused column
shows it) and, greedy, generate the same tokens, so the difference is the path's. TTFT is
therefore one decode step plus the path's overhead, not a cold prefill.
"""
import argparse, http.client, json, math, subprocess, sys, threading, time

PROMPT = "Once upon a time, in a lighthouse by the sea, there lived"


def percentile(values, p):
    """Nearest rank: the smallest value with at least p% of the values at or below it."""
    if not values:
        return None
    v = sorted(values)
    return v[max(0, math.ceil(p / 100 * len(v)) - 1)]


def stream_one(conn, prompt, tokens):
    """One streamed completion on a kept-alive connection: (ttft_s, gaps_s, usage)."""
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError("HTTP %d: %s" % (resp.status, resp.read()[:300]))
    ttft, last, gaps, usage = None, None, [], None
    while True:
        line = resp.readline()
        if not line:
            raise RuntimeError("the stream ended without [DONE]")
        if not line.startswith(b"data: "):
            continue
        data = line[6:].strip()
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        if "error" in ev:
            raise RuntimeError("stream error: %r" % ev["error"])
        if ev.get("usage"):
            usage = ev["usage"]
        if ev["choices"] and ev["choices"][0]["text"]:
            now = time.perf_counter()
            if ttft is None:
                ttft = now - t0
            else:
                gaps.append(now - last)
            last = now
    resp.read()  # the chunked body's end, so the connection can take the next request
    return ttft, gaps, usage


def http_run(port, clients, requests, tokens):
    """`clients` threads, each on its own connection, share `requests` requests, as loadgen does."""
    conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=600) for _ in range(clients)]
    for c in conns:
        c.connect()  # before the clock, as loadgen connects first
    lock, samples, errors = threading.Lock(), [], []
    next_i = iter(range(requests))

    def client(conn):
        while True:
            with lock:
                i = next(next_i, None)
            if i is None:
                return
            try:
                s = stream_one(conn, PROMPT, tokens)
            except Exception as e:  # noqa: BLE001  reported with the row
                with lock:
                    errors.append(str(e))
                return
            with lock:
                samples.append(s)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    for c in conns:
        c.close()
    if errors:
        raise RuntimeError("%d HTTP request(s) failed; the first: %s" % (len(errors), errors[0]))
    generated = sum(s[2]["completion_tokens"] for s in samples)
    ttft, itl = percentile([s[0] for s in samples if s[0] is not None], 50), percentile([g for s in samples for g in s[1]], 50)
    return {"requests": len(samples), "tok_s": generated / wall,
            "ttft_ms": None if ttft is None else 1000 * ttft, "itl_ms": None if itl is None else 1000 * itl,
            "prompt": sum(s[2]["prompt_tokens"] for s in samples) / len(samples),
            "reused": sum(s[2].get("prompt_tokens_details", {}).get("cached_tokens", 0) for s in samples) / len(samples),
            "generated": generated / len(samples)}


def socket_run(tandem, sock, clients, requests, tokens):
    out = subprocess.run([tandem, "--socket", sock, "--json", "loadgen", "-c", str(clients), "-r", str(requests),
                          "-n", str(tokens), "--raw", "--temp", "0", "--same-prompt", "-p", PROMPT],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("tandem loadgen failed (%d): %s%s" % (out.returncode, out.stdout, out.stderr))
    j = json.loads(out.stdout.strip().splitlines()[-1])
    return {"requests": j["requests"], "tok_s": j["aggregate_decode_tok_s"], "ttft_ms": j["ttft_p50_ms"],
            "itl_ms": j["itl_p50_ms"], "prompt": j["prompt_tokens"] / j["requests"],
            "reused": j.get("reused_tokens", 0) / j["requests"], "generated": j["generated_tokens"] / j["requests"]}


def fmt(v, spec):
    return "-" if v is None else spec % v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--clients", default="1 4")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--requests", type=int, default=0)
    a = ap.parse_args()
    # Warm-up on both paths: first-use costs (graphs, allocations, the front's link to tandemd)
    # and the prompt into the prefix cache.
    socket_run(a.tandem, a.socket, 1, 1, a.tokens)
    http_run(a.http_port, 1, 1, 8)
    rows = []
    for c in [int(x) for x in a.clients.split()]:
        n = a.requests or max(8, 2 * c)
        # An untimed round at this client count on each path first: concurrent requests for one
        # prompt share the prefix cache differently from one at a time (seen: 27.5 of 45 prompt
        # tokens reused on the first 4-client socket round, 44 on the http one after it).
        socket_run(a.tandem, a.socket, c, c, a.tokens)
        http_run(a.http_port, c, c, a.tokens)
        for path in ("socket", "http"):
            r = socket_run(a.tandem, a.socket, c, n, a.tokens) if path == "socket" else http_run(a.http_port, c, n, a.tokens)
            rows.append((path, c, r))
            print("# %s, %d client(s): %r" % (path, c, r), file=sys.stderr, flush=True)
    print("| path | clients | requests | prompt tok | reused tok | generated tok | tok/s | vs socket | TTFT p50 ms | ITL p50 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = {}
    for path, c, r in rows:
        if path == "socket":
            base[c] = r
        rel = "%+.1f %%" % (100 * (r["tok_s"] / base[c]["tok_s"] - 1)) if path == "http" else ""
        print("| %s | %d | %d | %.1f | %.1f | %.1f | %.1f | %s | %s | %s |" % (
            path, c, r["requests"], r["prompt"], r["reused"], r["generated"], r["tok_s"], rel,
            fmt(r["ttft_ms"], "%.1f"), fmt(r["itl_ms"], "%.2f")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
