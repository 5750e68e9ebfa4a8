// A backend for runtime tests: passes everything to a real one, counting forward passes (and
// which entry point ran each) and the largest batch, and can be told to fail or to take longer
// (a slow device).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "backend/backend.h"

namespace tandem::test {

class counting_backend final : public backend {
 public:
  explicit counting_backend(backend& inner) : inner_(inner) {}
  std::string_view name() const override { return inner_.name(); }
  const model_desc& model() const override { return inner_.model(); }
  result<std::unique_ptr<kv_cache>> make_cache(const kv_cache_config& cfg) override { return inner_.make_cache(cfg); }
  status forward(const batch& b, kv_cache& cache, std::vector<float>& logits) override {
    ++logits_passes;
    TANDEM_TRY(enter(b));
    return inner_.forward(b, cache, logits);
  }
  status forward_argmax(const batch& b, kv_cache& cache, std::vector<int32_t>& ids) override {
    ++argmax_passes;
    TANDEM_TRY(enter(b));
    return inner_.forward_argmax(b, cache, ids);
  }
  std::atomic<int> forwards{0};       // passes through either entry point
  std::atomic<int> logits_passes{0};  // forward()
  std::atomic<int> argmax_passes{0};  // forward_argmax()
  std::atomic<size_t> max_batch{0};
  std::atomic<bool> fail{false};
  std::atomic<int> delay_ms{0};

 private:
  status enter(const batch& b) {
    ++forwards;
    max_batch = std::max(max_batch.load(), b.size());
    if (fail) return make_error("injected failure");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms.load()));
    return {};
  }

  backend& inner_;
};

}  // namespace tandem::test
