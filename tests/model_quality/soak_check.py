#!/usr/bin/env python3
# A bounded soak of tandemd on the default model (SmolLM2-135M-Instruct, CPU, four sequence
# slots): mixed traffic — streamed and whole generations, cancels, clients that vanish mid-prompt
# or mid-answer, tokenize, chat — while the model is hot-swapped between two copies of the file.
# At the end the daemon must be idle with its counters back at zero and its open descriptors and
# resident memory flat against the same point after warm-up (issue 24, item 8).
"""Exit status: 0 pass, 1 failure, 77 skipped (no model, or python3 without msgpack).
TANDEM_SOAK_SECONDS sets the traffic's length (default 60)."""
import os
import random
import shutil
import sys
import threading
import time

import daemon_harness
EXPECTED = {"busy", "cancelled"}  # codes traffic like this may legitimately get


def rss_and_fds(pid):
    with open("/proc/%d/statm" % pid) as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return rss, len(os.listdir("/proc/%d/fd" % pid))


def one_request(e2e, sock, rng, rid, problems):
    """One client's request of a random kind; anything unexpected goes to problems."""
    c = e2e.Client(sock)
    kind = rng.choice(["stream", "whole", "cancel", "vanish_prefill", "vanish_decode", "tokenize", "chat"])
    prompt = "request %d: %s" % (rid, " ".join(["tell me about the sea"] * rng.randint(1, 24)))
    try:
        if kind == "tokenize":
            r = c.call({"id": rid, "op": "tokenize", "text": prompt})
            if "result" not in r:
                problems.append((kind, r))
            return
        msg = {"id": rid, "op": "generate", "max_tokens": rng.randint(1, 16), "stream": kind != "whole"}
        if kind == "chat":
            msg["messages"] = [{"role": "user", "content": prompt}]
        else:
            msg["prompt"] = prompt
        c.send(msg)
        if kind == "vanish_prefill":
            return  # closed before the prompt is read
        if kind == "cancel":
            c.send({"id": rid + 1, "op": "cancel", "target": rid})
        while True:
            r = c.recv()
            if kind == "vanish_decode" and "chunk" in r:
                return
            if r.get("id") == rid and ("result" in r or "error" in r):
                break
        if "error" in r and r["error"].get("code") not in EXPECTED:
            problems.append((kind, r))
    except (EOFError, ConnectionError, OSError) as err:
        problems.append((kind, repr(err)))
    finally:
        c.close()


def main():
    e2e, model = daemon_harness.setup(__doc__, "soak")
    other = os.path.join(e2e.TMP, "copy.gguf")
    shutil.copyfile(model, other)
    seconds = float(os.environ.get("TANDEM_SOAK_SECONDS", "60"))
    d = e2e.Daemon([("default", model)], extra=["--parallel", "4", "--context", "1024", "--prefill-chunk", "32",
                                                "--queue-depth", "64"])
    problems, stop = [], threading.Event()
    counts = [0] * 6

    def client(k):
        rng, rid = random.Random(k), 1
        while not stop.is_set():
            one_request(e2e, d.sock, rng, rid, problems)
            counts[k] += 1
            rid += 2

    try:
        admin = e2e.Client(d.sock)
        threads = [threading.Thread(target=client, args=(k,)) for k in range(len(counts))]
        for t in threads:
            t.start()
        t0, swaps, warm = time.time(), 0, None
        while time.time() - t0 < seconds:
            time.sleep(2.0)
            r = admin.call({"id": 10 + swaps, "op": "swap", "name": "default", "path": [model, other][swaps % 2 == 0]})
            if "result" not in r:
                problems.append(("swap", r))
            swaps += 1
            if warm is None and time.time() - t0 > seconds / 3:
                warm = rss_and_fds(d.p.pid)  # both files have been served by now
        stop.set()
        for t in threads:
            t.join()
        # Idle again: nothing in flight, queued or running, one connection (the admin's), and the
        # last swap's old instance joined (its mapped file would count in the resident memory).
        for _ in range(500):
            st = admin.call({"id": 5, "op": "status"})["result"]
            m = st["models"][0]
            retired_gone = st["memory"]["budget_used_bytes"] == st["memory"]["model_bytes"]
            if st["in_flight"] == 0 and st["queued"] == 0 and m["sequences"]["running"] == 0 and \
                    st["connections"] == 1 and retired_gone:
                break
            time.sleep(0.02)
        # The reaper frees the old instance (and returns the heap's free memory) just after the
        # budget stops counting it: the least of a second's samples is the idle footprint.
        ends = []
        for _ in range(5):
            ends.append(rss_and_fds(d.p.pid))
            time.sleep(0.2)
        end = (min(e[0] for e in ends), ends[-1][1])
        print("%.0f s: %d requests, %d swaps; rss %.1f -> %.1f MiB, fds %d -> %d; status in_flight %d queued %d "
              "sequences %r connections %d" % (seconds, sum(counts), swaps, warm[0] / 2**20, end[0] / 2**20, warm[1],
                                                end[1], st["in_flight"], st["queued"], m["sequences"], st["connections"]))
        e2e.check(not problems, "unexpected replies: %r" % problems[:5])
        e2e.check(st["in_flight"] == 0 and st["queued"] == 0 and st["connections"] == 1, "not idle: %r" % st)
        e2e.check(m["sequences"] == {"running": 0, "waiting": 0} and not m["running"], "model busy: %r" % m)
        e2e.check(end[1] <= warm[1], "descriptors grew: %d -> %d" % (warm[1], end[1]))
        e2e.check(end[0] <= warm[0] + (48 << 20), "resident memory grew: %d -> %d" % (warm[0], end[0]))
        admin.close()
    finally:
        stop.set()
        e2e.check(d.stop() == 0, "tandemd exit status")
    return 0


if __name__ == "__main__":
    sys.exit(main())
