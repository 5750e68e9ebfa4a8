// Generation loop with UTF-8-safe streaming and stop-string holdback.
#include "runtime/generator.h"

#include <algorithm>
#include <chrono>

namespace tandem {

std::string_view stop_reason_name(stop_reason r) {
  switch (r) {
    case stop_reason::max_tokens: return "max_tokens";
    case stop_reason::stop_token: return "stop_token";
    case stop_reason::stop_string: return "stop_string";
    case stop_reason::context_limit: return "context_limit";
    case stop_reason::cancelled: return "cancelled";
  }
  return "unknown";
}

size_t utf8_complete_prefix(std::string_view s) {
  // Look back at most 3 bytes for the lead byte of a sequence that is still missing bytes.
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

std::string stop_string_filter::push(std::string_view text, bool& stopped) {
  held_.append(text);
  stopped = false;
  size_t first = std::string::npos;
  for (const auto& s : stops_) {
    if (s.empty()) continue;
    first = std::min(first, held_.find(s));
  }
  if (first != std::string::npos) {
    stopped = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest tail of held_ that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const auto& s : stops_)
    for (size_t len = std::min(s.size() - (s.empty() ? 0 : 1), held_.size()); len > keep; --len)
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string stop_string_filter::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

token_stream::token_stream(const generate_params& params, token_text_fn token_text, std::span<const int32_t> prompt)
    : smp_(params.sampling), filter_(params.stop_strings), stop_tokens_(params.stop_tokens),
      token_text_(std::move(token_text)) {
  for (int32_t t : prompt) smp_.accept(t);
}

token_step token_stream::next(std::span<const float> logits) { return next_token(smp_.sample(logits)); }

token_step token_stream::next_token(int32_t token) {
  token_step st;
  st.token = token;
  smp_.accept(st.token);
  if (std::find(stop_tokens_.begin(), stop_tokens_.end(), st.token) != stop_tokens_.end()) {
    st.stop_token = true;
    return st;
  }
  pending_ += token_text_(st.token);
  const size_t whole = utf8_complete_prefix(pending_);
  st.text = filter_.push(std::string_view(pending_).substr(0, whole), st.stop_string);
  pending_.erase(0, whole);
  return st;
}

std::string token_stream::flush() {
  std::string out = filter_.flush() + pending_;
  pending_.clear();
  return out;
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

result<generate_result> generate(backend& be, kv_cache& cache, int32_t seq,
                                 std::span<const int32_t> prompt, const generate_params& params,
                                 const token_text_fn& token_text, const text_fn& on_text) {
  if (prompt.empty()) return make_error("the prompt is empty");
  if (!cache.valid_seq(seq)) return make_error("sequence id ", seq, " is out of range");
  const uint32_t n_ctx = cache.config().n_ctx;
  if (prompt.size() > n_ctx)
    return make_error("the prompt has ", prompt.size(), " tokens but the context size is ", n_ctx);
  cache.clear(seq);
  generate_result res;
  res.n_prompt = prompt.size();

  token_stream out(params, token_text, prompt);
  // Greedy: the backend picks each token (on a GPU no logits row leaves the device).
  std::vector<float> logits;
  std::vector<int32_t> ids;
  const auto pass = [&](const batch& b) {
    return out.greedy() ? be.forward_argmax(b, cache, ids) : be.forward(b, cache, logits);
  };
  auto t0 = std::chrono::steady_clock::now();
  const size_t chunk = std::max<uint32_t>(1, params.n_batch);
  const auto stop_now = [&] { return params.cancelled && params.cancelled(); };
  for (size_t start = 0; start < prompt.size(); start += chunk) {
    if (stop_now()) {
      cache.clear(seq);
      res.reason = stop_reason::cancelled;
      res.prefill_seconds = seconds_since(t0);
      return res;
    }
    batch b;
    const size_t end = std::min(prompt.size(), start + chunk);
    for (size_t i = start; i < end; ++i) b.add(prompt[i], seq, int32_t(i), i + 1 == prompt.size());
    status s = pass(b);
    if (!s) {
      cache.clear(seq);
      return s.err();
    }
  }
  res.prefill_seconds = res.first_token_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();

  auto emit = [&](const std::string& text) {
    if (text.empty()) return true;
    res.text += text;
    return on_text ? on_text(text) : true;
  };
  res.reason = stop_reason::max_tokens;
  for (int32_t n = 0; params.max_tokens < 0 || n < params.max_tokens; ++n) {
    token_step st = out.greedy() ? out.next_token(ids.at(0)) : out.next(logits);
    res.tokens.push_back(st.token);
    if (st.stop_token) {
      res.reason = stop_reason::stop_token;
      break;
    }
    if (!emit(st.text)) {
      res.reason = stop_reason::cancelled;
      break;
    }
    if (st.stop_string) {
      res.reason = stop_reason::stop_string;
      break;
    }
    if (params.max_tokens >= 0 && n + 1 >= params.max_tokens) break;
    if (cache.length(seq) >= n_ctx) {
      res.reason = stop_reason::context_limit;
      break;
    }
    if (stop_now()) {
      res.reason = stop_reason::cancelled;
      break;
    }
    batch b;
    b.add(st.token, seq, int32_t(cache.length(seq)), true);
    TANDEM_TRY(pass(b));
  }
  if (res.reason != stop_reason::stop_string && res.reason != stop_reason::cancelled) emit(out.flush());
  res.decode_seconds = seconds_since(t0);
  return res;
}

}  // namespace tandem
