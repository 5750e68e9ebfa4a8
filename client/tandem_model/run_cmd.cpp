// `tandem-model run --model F -p PROMPT [sampling flags] [--chat]`: generates on the CPU reference
// backend and streams the text to stdout; timings go to stderr.
#include "run_cmd.h"

#include <cstdio>
#include <memory>

#include "chat/chat_template.h"
#include "cli_common.h"
#include "runtime/generator.h"
#include "open_instance.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace tandem {
namespace {

struct run_options {
  std::string model;
  std::string prompt;
  bool chat = false;
  std::string system;
  std::string chat_format;
  bool no_think = false;
  generate_params gen;
  uint32_t ctx = 4096;
  std::string kv_type = "f16";
  unsigned threads = 0;
  open_args dev;  // --gpu, --gpus, --ratios, --split
};

// The prompt's token ids: plain text (BOS when the model adds one) or a rendered chat turn.
std::vector<int32_t> prompt_ids(const run_options& o, const tokenizer& tok,
                                std::vector<int32_t>& stops) {
  if (!o.chat) {
    auto ids = tok.encode(o.prompt, {.parse_special = false, .add_bos = tok.wants_bos(), .plain = {}});
    if (!ids) fail(ids.message());
    if (tok.vocab().eos_id >= 0) stops.push_back(tok.vocab().eos_id);
    return *ids;
  }
  auto tpl = chat_template_for(tok, o.chat_format);
  if (!tpl) fail(tpl.message());
  if (!tpl->warning.empty()) std::fprintf(stderr, "tandem-model: warning: %s\n", tpl->warning.c_str());
  std::vector<chat_message> msgs;
  if (!o.system.empty()) msgs.push_back({"system", o.system});
  msgs.push_back({"user", o.prompt});
  chat_options co;
  if (o.no_think) co.enable_thinking = false;
  auto chat = render_chat_text(*tpl, msgs, co);
  if (!chat) fail(chat.message());
  auto ids = encode_chat(tok, *chat);
  if (!ids) fail(ids.message());
  for (int32_t s : chat_stop_tokens(*tpl, tok)) stops.push_back(s);
  return *ids;
}

void run_generate(run_options o) {
  auto inst = open_instance({o.model, o.kv_type, o.ctx, o.threads, o.dev.gpu, o.dev.gpus, o.dev.ratios, o.dev.split});
  auto tok = tokenizer::from_gguf(inst->file());
  if (!tok) fail(tok.message());
  auto ids = prompt_ids(o, *tok, o.gen.stop_tokens);
  stream_decoder dec(*tok, /*skip_control=*/true);
  auto token_text = [&](int32_t id) {
    auto t = dec.push(id);
    return t ? *t : std::string();
  };
  auto on_text = [](std::string_view s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  auto r = generate(inst->be(), inst->cache(), 0, ids, o.gen, token_text, on_text);
  if (!r) fail(r.message());
  const std::string tail = dec.finish();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::fputc('\n', stdout);
  const size_t n_gen = r->tokens.size();
  std::fprintf(stderr,
               "\nrun: prompt %zu tokens in %.2f s (%.1f tokens/s); generated %zu tokens in %.2f s "
               "(%.2f tokens/s); stop: %s\n",
               r->n_prompt, r->prefill_seconds, double(r->n_prompt) / r->prefill_seconds, n_gen,
               r->decode_seconds, n_gen > 1 ? double(n_gen - 1) / r->decode_seconds : 0.0,
               std::string(stop_reason_name(r->reason)).c_str());
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<run_options>();
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt (CPU reference backend, or --gpu N)");
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text")->required();
  cmd->add_flag("--chat", o->chat, "Wrap the prompt as a user turn in the model's chat template");
  cmd->add_option("--system", o->system, "System message (with --chat)");
  cmd->add_option("--chat-format", o->chat_format, "Override the template: raw, chatml, qwen3, llama3");
  cmd->add_flag("--no-think", o->no_think, "Qwen3: disable thinking (empty think block)");
  auto& g = o->gen;
  auto& s = g.sampling;
  cmd->add_option("-n,--max-tokens", g.max_tokens, "Tokens to generate (default 256, -1: no limit)");
  cmd->add_option("--temp", s.temperature, "Temperature (default 0.8; 0: greedy)");
  cmd->add_option("--top-k", s.top_k, "Top-k (default 40; 0: off)");
  cmd->add_option("--top-p", s.top_p, "Top-p (default 0.95; 1: off)");
  cmd->add_option("--min-p", s.min_p, "Min-p (default 0.05; 0: off)");
  cmd->add_option("--repeat-penalty", s.repeat_penalty, "Repetition penalty (default 1: off)");
  cmd->add_option("--presence-penalty", s.presence_penalty, "Presence penalty (default 0)");
  cmd->add_option("--frequency-penalty", s.frequency_penalty, "Frequency penalty (default 0)");
  cmd->add_option("--repeat-last-n", s.penalty_last_n, "Penalty window (default 64; -1: all)");
  cmd->add_option("--seed", s.seed, "Sampling seed (default 0)");
  cmd->add_option("--stop", g.stop_strings, "Stop string (repeatable)");
  cmd->add_option("-c,--ctx", o->ctx, "Context size (default 4096)")->check(CLI::Range(1u, 1u << 24));
  cmd->add_option("--kv-type", o->kv_type, "KV cache type: f16 (default), q8_0, f32");
  cmd->add_option("-t,--threads", o->threads, "CPU threads (default all cores)");
  add_device_options(cmd, o->dev);
  cmd->callback([o] { run_generate(*o); });
}

}  // namespace tandem
