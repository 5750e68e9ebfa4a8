// Token sampling: repetition/presence/frequency penalties, then top-k, top-p and min-p filters on
// the logits, then temperature and a seeded draw (or argmax when greedy). Deterministic per seed.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <vector>

namespace tandem {

struct sampling_params {
  float temperature = 0.8f;       // <= 0: greedy (argmax after penalties)
  int32_t top_k = 40;             // <= 0: off
  float top_p = 0.95f;            // >= 1: off
  float min_p = 0.05f;            // <= 0: off
  float repeat_penalty = 1.0f;    // 1: off; >1 discourages tokens seen in the window
  float presence_penalty = 0.0f;  // subtracted once from tokens seen in the window
  float frequency_penalty = 0.0f; // subtracted per occurrence in the window
  int32_t penalty_last_n = 64;    // window of recent tokens the penalties look at; <0: all
  uint64_t seed = 0;
};

struct candidate {
  int32_t id;
  float logit;
  float p;  // filled by softmax()
};

// The steps, exposed so tests can check each one's effect.
void apply_penalties(std::vector<candidate>& c, std::span<const int32_t> recent,
                     const sampling_params& p);
void keep_top_k(std::vector<candidate>& c, int32_t k);  // sorts by logit, descending
void softmax(std::vector<candidate>& c);                // sorts by logit and fills p
void keep_top_p(std::vector<candidate>& c, float top_p);  // smallest prefix with mass >= top_p
void keep_min_p(std::vector<candidate>& c, float min_p);  // p >= min_p * max p

class sampler {
 public:
  explicit sampler(const sampling_params& p);

  // Picks a token from one row of logits. Does not record it; call accept().
  int32_t sample(std::span<const float> logits);
  void accept(int32_t token);  // adds to the penalty window
  void reset();                // clears the window and reseeds
  // True when sample() is the argmax of the raw logits for every token of the generation
  // (temperature <= 0 and no penalty that could move a logit), so a backend may pick the token
  // itself (backend::forward_argmax; the two differ only on broken rows: a NaN at id 0, which
  // sample() keeps and argmax_logits skips, or nothing above -FLT_MAX). Decided by the
  // parameters alone, never by the window.
  bool greedy() const;

  const sampling_params& params() const { return params_; }

 private:
  double uniform();  // [0, 1) from 53 random bits, the same on every platform

  sampling_params params_;
  std::mt19937_64 rng_;
  std::deque<int32_t> recent_;
  std::vector<candidate> cands_;
  std::vector<int32_t> recent_copy_;
};

}  // namespace tandem
