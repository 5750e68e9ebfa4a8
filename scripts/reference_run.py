"""What scripts/qwen35_reference.py and scripts/moe_reference.py share: one greedy run of a tiny
random model, checked against a no-cache pass, and reference.json written beside its checkpoint.

Imported by those scripts (not run); they hide the fast-kernel packages before importing it.
"""
import json
import os

import torch
import transformers

PROMPT_LEN, N_LOGIT_ROWS, N_NEW = 24, 4, 64


def margin(row):
    top = torch.topk(row, 2).values
    return float(top[0] - top[1])


def forward(model, ids, start, cache):
    """Logits of every position of ids (which start at position `start`), and the grown cache."""
    pos = torch.arange(start, start + ids.shape[1]).unsqueeze(0)
    out = model(input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=True)
    return out.logits[0].float(), out.past_key_values


def greedy_run(model, vocab):
    """reference.json's fields from "prompt" to "min_margin", and the prompt logits' scale.

    The prompt goes in one pass with the cache (chunked rule, one chunk), then greedy decode runs one
    token at a time (recurrent rule, conv state, KV cache); one no-cache pass over prompt +
    continuation (88 tokens, so the chunked rule crosses a chunk of 64) must agree with both. Exits
    when greedy comes near a tie.
    """
    prompt = [(17 * i * i + 31 * i + 7) % vocab for i in range(PROMPT_LEN)]
    logits, cache = forward(model, torch.tensor([prompt]), 0, None)
    assert cache is not None, "the model returned no cache"
    prompt_logits = logits
    margins = [margin(r) for r in prompt_logits]
    greedy, nxt = [], int(prompt_logits[-1].argmax())
    for step in range(N_NEW):
        greedy.append(nxt)
        logits, cache = forward(model, torch.tensor([[nxt]]), PROMPT_LEN + step, cache)
        margins.append(margin(logits[-1]))
        nxt = int(logits[-1].argmax())

    full = torch.tensor([prompt + greedy])
    out = model(input_ids=full, position_ids=torch.arange(full.shape[1]).unsqueeze(0), use_cache=False)
    nocache_argmax = [int(i) for i in out.logits[0].argmax(-1)]
    if nocache_argmax[PROMPT_LEN - 1:PROMPT_LEN - 1 + N_NEW] != greedy:
        raise SystemExit("cached greedy decode and the no-cache pass disagree")
    if nocache_argmax[:PROMPT_LEN] != [int(i) for i in prompt_logits.argmax(-1)]:
        raise SystemExit("the no-cache pass disagrees with the prompt pass")
    scale = float(prompt_logits.abs().max())
    # fp32 CPU logits differ from these by ~1e-5 of the scale: 2e-4 keeps greedy far from a flip.
    if min(margins) < 2e-4 * max(1.0, scale):
        raise SystemExit(f"greedy is within {min(margins):.2e} of a tie; try another --seed")
    rows = list(range(PROMPT_LEN - N_LOGIT_ROWS, PROMPT_LEN))
    run = {
        "prompt": prompt,
        "logits_positions": rows,
        "logits": [[float(x) for x in prompt_logits[r]] for r in rows],
        "prompt_argmax": [int(i) for i in prompt_logits.argmax(-1)],
        "greedy": greedy,
        "nocache_argmax": nocache_argmax,
        "min_margin": min(margins),
    }
    return run, scale


def write_reference(out_dir, model, generator, seed, run, scale, extra=None, extra_note=""):
    """The checkpoint and reference.json (run's fields, then extra's) in out_dir, and a summary line
    (extra_note, e.g. "min routing margin 0.01, ", goes before the logit scale)."""
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    # save_pretrained writes only the fields that differ from the defaults; write them all so
    # the importer reads explicit values.
    model.config.to_json_file(os.path.join(out_dir, "config.json"), use_diff=False)
    ref = {
        "generator": generator,
        "seed": seed,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        **run,
        **(extra or {}),
    }
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(ref, f)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(out_dir, n)) for n in os.listdir(out_dir))
    print(f"wrote {out_dir}: {total / 1e6:.2f} MB, min top-2 margin {run['min_margin']:.3g}, "
          f"{extra_note}logit scale {scale:.3g}, greedy {run['greedy'][:8]}...")
