#!/usr/bin/env python3
# The default model (SmolLM2-135M-Instruct) served by tandemd on the CPU with four sequence slots:
# eight greedy chat requests at once give exactly the texts they give one at a time; a client
# that disconnects mid-prefill frees its slot within a pass; a chat's second turn reuses the
# first turn's KV (issue 23's CPU figures).
"""Exit status: 0 pass, 1 failure, 77 skipped (no model, or python3 without msgpack)."""
import sys
import time

import daemon_harness


def chat(c, rid, messages, n=32):
    r = c.call({"id": rid, "op": "generate", "messages": messages, "max_tokens": n, "temperature": 0,
                "stream": False})
    if "result" not in r:
        raise AssertionError("request %d: %r" % (rid, r))
    return r["result"]


def main():
    e2e, model = daemon_harness.setup(__doc__, "serving")
    d = e2e.Daemon([("default", model)], extra=["--parallel", "4", "--prefill-chunk", "32"])
    try:
        c = e2e.Client(d.sock)
        questions = ["What is the capital of France?", "Name three colours.", "What is 2 + 2?",
                     "Say hello in Spanish.", "What do bees make?", "Name a large ocean.",
                     "What is water made of?", "Why is the sky blue? Answer briefly."]
        t0 = time.time()
        alone = [chat(c, 10 + i, [{"role": "user", "content": q}])["text"] for i, q in enumerate(questions)]
        t_alone = time.time() - t0
        clients = [e2e.Client(d.sock) for _ in questions]
        t0 = time.time()
        for i, (cl, q) in enumerate(zip(clients, questions)):
            cl.send({"id": 100 + i, "op": "generate", "messages": [{"role": "user", "content": q}],
                     "max_tokens": 32, "temperature": 0, "stream": False})
        together = []
        for cl in clients:
            while True:
                r = cl.recv()
                if "result" in r or "error" in r:
                    break
            e2e.check("result" in r, "batched: %r" % r)
            together.append(r["result"]["text"])
            cl.close()
        t_together = time.time() - t0
        for i, (x, y) in enumerate(zip(alone, together)):
            e2e.check(x == y, "request %d: batched %r, alone %r" % (i, y, x))
        print("8 greedy requests: one at a time %.2fs, four slots %.2fs; texts identical" % (t_alone, t_together))
        # A disconnect during a long prompt's prefill frees the slot within a pass or two.
        long_text = " ".join("word%d" % i for i in range(600))
        gone = e2e.Client(d.sock)
        gone.send({"id": 1, "op": "generate", "prompt": long_text, "max_tokens": 8})
        seen_busy = False
        for _ in range(200):
            m = c.call({"id": 2, "op": "models"})["result"]["models"][0]
            if m["sequences"]["running"] > 0:
                seen_busy = True
                break
            time.sleep(0.005)
        gone.close()
        t1 = time.time()
        while time.time() - t1 < 30:
            m = c.call({"id": 3, "op": "models"})["result"]["models"][0]
            if m["sequences"]["running"] == 0:
                break
            time.sleep(0.005)
        freed = time.time() - t1
        e2e.check(seen_busy and m["sequences"]["running"] == 0, "slot not freed: %r" % m)
        print("disconnect mid-prefill: slot freed after %.3fs" % freed)
        # A second chat turn prefills only what the history does not already hold.
        turn1 = [{"role": "user", "content": "Tell me about Paris in two sentences."}]
        r1 = chat(c, 20, turn1)
        turn2 = turn1 + [{"role": "assistant", "content": r1["text"]},
                         {"role": "user", "content": "And about Rome?"}]
        r2 = chat(c, 21, turn2)
        e2e.check(r2["reused_tokens"] >= r1["prompt_tokens"], "second turn: %r after %r" % (r2, r1))
        print("second chat turn: %d of %d prompt tokens reused" % (r2["reused_tokens"], r2["prompt_tokens"]))
    finally:
        e2e.check(d.stop() == 0, "tandemd exit status")
    return 0


if __name__ == "__main__":
    sys.exit(main())
