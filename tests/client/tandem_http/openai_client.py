#!/usr/bin/env python3
"""Runs the real `openai` package (from PyPI, in a venv) against tandem-http.

usage: openai_client.py BASE_URL TOKEN — prints one line per check, exits 1 on the first failure.
"""
import sys

import openai


def check(cond, what):
    if not cond:
        print("FAIL: " + what)
        sys.exit(1)
    print("ok: " + what.split(":")[0])


def main():
    base, token = sys.argv[1], sys.argv[2]
    print("openai package %s" % openai.__version__)
    client = openai.OpenAI(base_url=base, api_key=token, max_retries=0, timeout=60)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]

    models = [m.id for m in client.models.list()]
    check("default" in models, "models.list: %r" % models)

    r = client.chat.completions.create(model="default", messages=msgs, max_tokens=12, temperature=0, seed=1)
    text = r.choices[0].message.content
    check(r.object == "chat.completion" and text and r.choices[0].finish_reason in ("stop", "length"),
          "chat.completions.create: %r" % r)
    check(r.usage.completion_tokens >= 1 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens,
          "chat usage: %r" % r.usage)

    stream = client.chat.completions.create(model="default", messages=msgs, max_tokens=12, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    pieces, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            if ch.delta.content:
                pieces.append(ch.delta.content)
            finish = ch.finish_reason or finish
    check("".join(pieces) == text, "chat stream text equals the non-streamed: %r vs %r" % ("".join(pieces), text))
    check(finish in ("stop", "length") and usage and usage.completion_tokens == r.usage.completion_tokens,
          "chat stream finish and usage: %r %r" % (finish, usage))

    c = client.completions.create(model="default", prompt="1, 2, 3,", max_tokens=8, temperature=0)
    check(c.object == "text_completion" and c.choices[0].text and c.usage.completion_tokens == 8 and
          c.choices[0].finish_reason == "length", "completions.create: %r" % c)
    streamed = "".join(ch.choices[0].text for ch in client.completions.create(
        model="default", prompt="1, 2, 3,", max_tokens=8, temperature=0, stream=True) if ch.choices)
    check(streamed == c.choices[0].text, "completions stream: %r vs %r" % (streamed, c.choices[0].text))

    try:
        client.chat.completions.create(model="no-such-model", messages=msgs, max_tokens=4)
        check(False, "unknown model: no error")
    except openai.NotFoundError as e:
        check(e.status_code == 404 and e.code == "model_not_found", "unknown model raises NotFoundError: %r" % e)
    try:
        client.chat.completions.create(model="default", messages=msgs, n=2)
        check(False, "n=2: no error")
    except openai.BadRequestError as e:
        check(e.param == "n", "n=2 raises BadRequestError: %r" % e)
    try:
        openai.OpenAI(base_url=base, api_key="wrong", max_retries=0).models.list()
        check(False, "wrong key: no error")
    except openai.AuthenticationError as e:
        check(e.status_code == 401, "a wrong key raises AuthenticationError: %r" % e)

    aclient = openai.AsyncOpenAI(base_url=base, api_key=token, max_retries=0)

    async def two_at_once():
        import asyncio
        rs = await asyncio.gather(*[aclient.chat.completions.create(
            model="default", messages=[{"role": "user", "content": q}], max_tokens=8, temperature=0)
            for q in ("Name a colour.", "Name a fruit.")])
        return [x.choices[0].message.content for x in rs]

    import asyncio
    both = asyncio.run(two_at_once())
    check(all(both), "AsyncOpenAI, two requests at once: %r" % both)


if __name__ == "__main__":
    main()
