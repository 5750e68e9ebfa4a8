// Sampler: the filter chain follows llama.cpp's default order (penalties, top-k, top-p, min-p,
// temperature, draw), so the same settings behave alike in both.
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace tandem {

namespace {
void sort_desc(std::vector<candidate>& c) {
  std::sort(c.begin(), c.end(), [](const candidate& a, const candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  });
}
}  // namespace

void apply_penalties(std::vector<candidate>& c, std::span<const int32_t> recent,
                     const sampling_params& p) {
  if (recent.empty() ||
      (p.repeat_penalty == 1.f && p.presence_penalty == 0.f && p.frequency_penalty == 0.f))
    return;
  std::unordered_map<int32_t, int> count;
  for (int32_t t : recent) ++count[t];
  for (auto& x : c) {
    auto it = count.find(x.id);
    if (it == count.end()) continue;
    // CTRL-style: shrink positive logits, push negative ones further down.
    if (p.repeat_penalty != 1.f)
      x.logit = x.logit > 0 ? x.logit / p.repeat_penalty : x.logit * p.repeat_penalty;
    x.logit -= float(it->second) * p.frequency_penalty + p.presence_penalty;
  }
}

void keep_top_k(std::vector<candidate>& c, int32_t k) {
  if (k <= 0 || size_t(k) >= c.size()) {
    sort_desc(c);
    return;
  }
  std::partial_sort(c.begin(), c.begin() + k, c.end(), [](const candidate& a, const candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  });
  c.resize(size_t(k));
}

void softmax(std::vector<candidate>& c) {
  if (c.empty()) return;
  if (!std::is_sorted(c.begin(), c.end(),
                      [](const candidate& a, const candidate& b) { return a.logit > b.logit; }))
    sort_desc(c);
  const float mx = c.front().logit;
  double sum = 0;
  for (auto& x : c) {
    x.p = std::exp(x.logit - mx);
    sum += x.p;
  }
  for (auto& x : c) x.p = float(x.p / sum);
}

void keep_top_p(std::vector<candidate>& c, float top_p) {
  if (top_p >= 1.f || c.empty()) return;
  softmax(c);
  double cum = 0;
  size_t keep = c.size();
  for (size_t i = 0; i < c.size(); ++i) {
    cum += c[i].p;
    if (cum >= top_p) {
      keep = i + 1;
      break;
    }
  }
  c.resize(keep);
}

void keep_min_p(std::vector<candidate>& c, float min_p) {
  if (min_p <= 0.f || c.empty()) return;
  softmax(c);
  const float cut = min_p * c.front().p;
  size_t keep = 1;
  while (keep < c.size() && c[keep].p >= cut) ++keep;
  c.resize(keep);
}

sampler::sampler(const sampling_params& p) : params_(p), rng_(p.seed) {}

void sampler::reset() {
  recent_.clear();
  rng_.seed(params_.seed);
}

void sampler::accept(int32_t token) {
  recent_.push_back(token);
  if (params_.penalty_last_n >= 0)
    while (recent_.size() > size_t(params_.penalty_last_n)) recent_.pop_front();
}

bool sampler::greedy() const {
  const sampling_params& p = params_;
  // An empty window (penalty_last_n 0) makes apply_penalties return at once, whatever they are.
  const bool no_penalty = p.penalty_last_n == 0 ||
                          (p.repeat_penalty == 1.f && p.presence_penalty == 0.f && p.frequency_penalty == 0.f);
  return p.temperature <= 0.f && no_penalty;
}

double sampler::uniform() { return double(rng_() >> 11) * 0x1.0p-53; }

int32_t sampler::sample(std::span<const float> logits) {
  cands_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) cands_[i] = {int32_t(i), logits[i], 0.f};
  recent_copy_.assign(recent_.begin(), recent_.end());
  apply_penalties(cands_, recent_copy_, params_);
  if (params_.temperature <= 0.f) {
    auto best = std::max_element(cands_.begin(), cands_.end(), [](const candidate& a, const candidate& b) {
      return a.logit < b.logit || (a.logit == b.logit && a.id > b.id);
    });
    return best->id;
  }
  keep_top_k(cands_, params_.top_k);
  keep_top_p(cands_, params_.top_p);
  keep_min_p(cands_, params_.min_p);
  for (auto& x : cands_) x.logit /= params_.temperature;
  softmax(cands_);
  const double r = uniform();
  double cum = 0;
  for (const auto& x : cands_) {
    cum += x.p;
    if (r < cum) return x.id;
  }
  return cands_.back().id;  // rounding left r at the very top
}

}  // namespace tandem
