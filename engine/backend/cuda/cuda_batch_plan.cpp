// Builds the per-step upload of the CUDA backend (cuda_batch_plan.h).
#include "backend/cuda/cuda_batch_plan.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "backend/cpu/ops.h"
#include "kernels/qgemm.h"

namespace tandem {
namespace {

// Long runs go to the flash-attention prefill kernel; their tokens are masked out of the paged kernel.
void find_runs(const batch& b, const std::map<int32_t, int>& table_of, batch_plan& p) {
  const int T = p.n_tok;
  p.runs.clear();
  for (int t = 0; t < T;) {
    int e = t + 1;
    while (e < T && b.seq_ids[e] == b.seq_ids[t] && b.positions[e] == b.positions[e - 1] + 1) ++e;
    if (e - t >= k_flash_attention_min) {
      p.runs.push_back({t, e - t, table_of.at(b.seq_ids[t]), b.positions[t]});
      for (int i = t; i < e; ++i) p.ints[p.off_paged + i] = -1;
    }
    t = e;
  }
  p.any_paged = false;
  p.paged_max_kv = 0;
  for (int t = 0; t < T; ++t)
    if (p.ints[p.off_paged + t] >= 0) p.any_paged = true, p.paged_max_kv = std::max(p.paged_max_kv, b.positions[t] + 1);
  // Only sizes the attention split (each token's own length comes from its position).
  p.paged_max_kv = (p.paged_max_kv + k_kv_bucket - 1) / k_kv_bucket * k_kv_bucket;
}

// Decode steps (up to a decode batch) take their RoPE rotations from here: the kernels would
// spend microseconds of double-precision arithmetic on them in every layer.
void add_rotations(const batch& b, const hparams& hp, batch_plan& p) {
  p.off_rot = 0;
  if (p.n_tok > k_qgemm_max_tokens) return;
  const int rd = static_cast<int>(hp.rope_dim);
  p.off_rot = (p.ints.size() + 1) / 2 * 2;  // float2-aligned
  p.ints.resize(p.off_rot + size_t(p.n_tok) * rd, 0);
  std::vector<float> cs(static_cast<size_t>(rd));
  for (int t = 0; t < p.n_tok; ++t) {
    rope_rotations(b.positions[t], rd, hp.rope_theta, cs.data());
    std::memcpy(p.ints.data() + p.off_rot + size_t(t) * rd, cs.data(), cs.size() * sizeof(float));
  }
}

// The recurrent layers fold each sequence's tokens in order: one run per stretch of rows of one
// sequence (validate_batch makes that one stretch per sequence).
void add_dn_runs(const batch& b, const hparams& hp, batch_plan& p) {
  p.n_dn_runs = 0;
  p.dn_max_tokens = 0;
  p.off_dn_runs = p.ints.size();
  if (!hp.hybrid()) return;
  for (int t = 0; t < p.n_tok;) {
    int e = t + 1;
    while (e < p.n_tok && b.seq_ids[e] == b.seq_ids[t]) ++e;
    p.ints.insert(p.ints.end(), {t, e - t, b.seq_ids[t], b.positions[t]});
    ++p.n_dn_runs;
    p.dn_max_tokens = std::max(p.dn_max_tokens, e - t);
    t = e;
  }
}

}  // namespace

void plan_batch(const batch& b, const kv_cache& cache, const hparams& hp, batch_plan& p) {
  const int T = static_cast<int>(b.size());
  const uint32_t bs = cache.config().block_size;
  p.n_tok = T;
  p.n_out = static_cast<int>(b.n_logits());
  std::map<int32_t, int> table_of;  // sequence -> table row
  std::vector<int32_t> seqs;
  for (int t = 0; t < T; ++t)
    if (table_of.try_emplace(b.seq_ids[t], static_cast<int>(seqs.size())).second) seqs.push_back(b.seq_ids[t]);
  p.n_tables = static_cast<int>(seqs.size());
  p.max_blocks = 1;
  for (int32_t seq : seqs) p.max_blocks = std::max<int>(p.max_blocks, (cache.length(seq) + bs - 1) / bs);
  // Rounded up (unused entries stay 0) so that consecutive decode steps share a graph.
  p.max_blocks = (p.max_blocks + k_block_bucket - 1) / k_block_bucket * k_block_bucket;

  p.off_tokens = 0;
  p.off_pos = p.off_tokens + T;
  p.off_paged = p.off_pos + T;
  p.off_slots = p.off_paged + T;
  p.off_table = p.off_slots + T;
  p.off_out = p.off_table + T;
  p.off_tables = p.off_out + p.n_out;
  p.ints.assign(p.off_tables + size_t(p.n_tables) * p.max_blocks, 0);
  int32_t* ints = p.ints.data();
  int n_out = 0;
  for (int t = 0; t < T; ++t) {
    const int32_t seq = b.seq_ids[t], pos = b.positions[t];
    ints[p.off_tokens + t] = b.tokens[t];
    ints[p.off_pos + t] = pos;
    ints[p.off_paged + t] = pos;
    ints[p.off_slots + t] = static_cast<int32_t>(cache.slot(seq, uint32_t(pos)));
    ints[p.off_table + t] = table_of[seq];
    if (b.want_logits[t]) ints[p.off_out + n_out++] = t;
  }
  for (int i = 0; i < p.n_tables; ++i) {
    const uint32_t len = cache.length(seqs[i]);
    for (uint32_t k = 0; k * bs < len; ++k)
      ints[p.off_tables + size_t(i) * p.max_blocks + k] = static_cast<int32_t>(cache.slot(seqs[i], k * bs) / bs);
  }
  find_runs(b, table_of, p);
  add_dn_runs(b, hp, p);
  add_rotations(b, hp, p);
}

}  // namespace tandem
