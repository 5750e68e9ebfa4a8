#!/usr/bin/python3
"""The daemon's serving cases: a cancel (or a client gone) inside a long prefill, concurrent
sequences that give the texts they give alone, and a chat turn that reuses the previous turn's
KV. Run by e2e_test.py's main (one CTest entry, daemon_e2e) with its Client, Daemon and arguments.
"""
import time

from e2e_test import Client, Daemon, check, generate, long_prompt


def test_cancel_inside_prefill(model):
    d = Daemon([("default", model)], extra=["--prefill-chunk", "64"])
    try:
        c = Client(d.sock)
        prompt = long_prompt(c, 1900)
        t0 = time.time()
        _, full = generate(c, 1, prompt=prompt, n=1, stream=False)
        prefill = time.time() - t0
        check(full["result"]["prompt_tokens"] > 1000, "prompt: %r" % full)
        # Cancel a quarter into the prefill: it ends at the next chunk, long before the prompt is done.
        # (Each prompt starts differently: a cached prefix would make the prefill instant.)
        c.send({"id": 2, "op": "generate", "prompt": "one " + prompt, "max_tokens": 50})
        time.sleep(prefill / 4)
        t1 = time.time()
        c.send({"id": 3, "op": "cancel", "target": 2})
        finals = {}
        while len(finals) < 2:
            r = c.recv()
            if "result" in r or "error" in r:
                finals[r["id"]] = r
                if r["id"] == 2:
                    stopped = time.time() - t1
        res = finals[2]["result"]
        check(res["finish_reason"] == "cancelled" and res["generated_tokens"] == 0, "cancelled: %r" % res)
        print("  prefill of %d tokens %.2fs; cancel took %.3fs" % (full["result"]["prompt_tokens"], prefill, stopped))
        if prefill > 0.4:  # too fast a machine leaves nothing to measure
            check(stopped < prefill / 2, "cancel took %.2fs of a %.2fs prefill" % (stopped, prefill))
        # A client that goes away mid-prefill frees the model as quickly.
        c2 = Client(d.sock)
        c2.send({"id": 1, "op": "generate", "prompt": "two " + prompt, "max_tokens": 50})
        time.sleep(prefill / 4)
        c2.close()
        t2 = time.time()
        while time.time() - t2 < 30:
            st = c.call({"id": 4, "op": "status"})["result"]
            if not st["models"][0]["running"] and st["in_flight"] == 0 and \
                    st["models"][0]["sequences"]["running"] == 0:
                break
            time.sleep(0.01)
        freed = time.time() - t2
        check(not st["models"][0]["running"], "still prefilling for a gone client")
        if prefill > 0.4:
            check(freed < prefill / 2, "disconnect took %.2fs of a %.2fs prefill" % (freed, prefill))
        _, final = generate(c, 5, n=3)
        check("result" in final, "serving after cancels: %r" % final)
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_concurrent_sequences_match_alone(model):
    """Eight greedy requests at once over four sequence slots give the texts they give one at a
    time; status shows the slots and the requests waiting for one."""
    d = Daemon([("default", model)], extra=["--parallel", "4", "--prefill-chunk", "16"])
    try:
        c = Client(d.sock)
        m = c.call({"id": 1, "op": "models"})["result"]["models"][0]
        check(m["parallel"] == 4 and m["sequences"] == {"running": 0, "waiting": 0}, "models: %r" % m)
        prompts = ["request %d: %s" % (i, "tell me more " * (i + 1)) for i in range(8)]
        alone = []
        for i, p in enumerate(prompts):
            _, r = generate(c, 10 + i, prompt=p, n=24, stream=False, temperature=0)
            alone.append(r["result"]["text"])
        clients = [Client(d.sock) for _ in prompts]
        for i, (cl, p) in enumerate(zip(clients, prompts)):
            cl.send({"id": 100 + i, "op": "generate", "prompt": p, "max_tokens": 24, "stream": True,
                     "temperature": 0})
        busy = c.call({"id": 2, "op": "status"})["result"]["models"][0]
        together = []
        for i, cl in enumerate(clients):
            text = ""
            while True:
                r = cl.recv()
                if "chunk" in r:
                    text += r["chunk"]
                if "result" in r or "error" in r:
                    break
            check("result" in r, "request %d: %r" % (i, r))
            together.append(text)
            cl.close()
        for i in range(8):
            check(together[i] == alone[i], "request %d batched %r alone %r" % (i, together[i], alone[i]))
        check(busy["sequences"]["running"] <= 4, "more sequences than slots: %r" % busy)
        done = c.call({"id": 3, "op": "models"})["result"]["models"][0]
        check(done["sequences"] == {"running": 0, "waiting": 0}, "after: %r" % done)
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_chat_turn_reuses_the_prefix(model):
    """A chat's second turn resends the history: its KV is reused, only the new text is prefilled
    (in a q8_0 KV pool: half the bytes of f16)."""
    d = Daemon([("default", model)], extra=["--kv-type", "q8_0"])
    try:
        c = Client(d.sock)
        turn1 = [{"role": "user", "content": "hello there, how are you today?"}]
        r1 = c.call({"id": 1, "op": "generate", "messages": turn1, "max_tokens": 12, "temperature": 0,
                     "stream": False})["result"]
        check(r1["reused_tokens"] == 0, "first turn: %r" % r1)
        turn2 = turn1 + [{"role": "assistant", "content": r1["text"]}, {"role": "user", "content": "and then?"}]
        r2 = c.call({"id": 2, "op": "generate", "messages": turn2, "max_tokens": 12, "temperature": 0,
                     "stream": False})["result"]
        check(r2["reused_tokens"] >= r1["prompt_tokens"], "second turn reused %r" % r2)
        check(r2["reused_tokens"] < r2["prompt_tokens"], "second turn: %r" % r2)
        m = c.call({"id": 3, "op": "models"})["result"]["models"][0]
        check(m["prefix_hits"] == 1 and m["reused_tokens"] == r2["reused_tokens"], "models: %r" % m)
    finally:
        check(d.stop() == 0, "tandemd exit status")
    d16 = Daemon([("default", model)])
    try:
        m16 = Client(d16.sock).call({"id": 1, "op": "models"})["result"]["models"][0]
    finally:
        check(d16.stop() == 0, "tandemd exit status")
    ratio = m["cache_bytes"] / m16["cache_bytes"]
    check(0.5 < ratio < 0.56, "q8_0 / f16 cache bytes %.3f: %r %r" % (ratio, m, m16))  # 34 bytes per 32 values
