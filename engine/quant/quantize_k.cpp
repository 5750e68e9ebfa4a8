// float -> K-quants (256-element super-blocks).
//
// Q4_K / Q5_K: each 32-element sub-block gets a (scale, min) from the weighted affine search
// (x ~ scale*q - min, min >= 0); the 8 scales and 8 mins are then quantized to 6 bits against
// the super-block's fp16 d = max scale / 63 and dmin = max min / 63. Q6_K: each 16-element
// sub-block gets a scale from the symmetric search (levels -32..31); the 16 scales are quantized to
// int8 against fp16 d = (scale of largest magnitude) / -128.
// With search on, each sub-block's quantized scale (and min) is then polished by trying the
// neighbouring 6-bit / 8-bit codes, and finally every value is rounded against the scale the
// decoder will actually use.
#include <cmath>
#include <cstring>

#include "quant/half.h"
#include "quant/k_quant_search.h"
#include "quant/quant_impl.h"

namespace tandem::quant_detail {
namespace {

constexpr float tiny = 1e-30f;

// Weighted squared error of a sub-block with effective scale ds and min dm (x ~ ds*q - dm), the
// levels rounded optimally in [0, nmax]; the levels are written to L when L is not null.
float affine_error(int n, int nmax, const float* x, const float* w, float ds, float dm, uint8_t* L) {
  const float ids = ds > 0.0f ? 1.0f / ds : 0.0f;
  float err = 0.0f;
  if (!L) {  // scoring only: vectorizable
    TANDEM_SIMD_SUM(err)
    for (int i = 0; i < n; ++i) {
      const float diff =
          ds * static_cast<float>(clamp_int(round_int((x[i] + dm) * ids), 0, nmax)) - dm - x[i];
      err += w[i] * diff * diff;
    }
    return err;
  }
  for (int i = 0; i < n; ++i) {
    const int q = clamp_int(round_int((x[i] + dm) * ids), 0, nmax);
    const float diff = ds * static_cast<float>(q) - dm - x[i];
    err += w[i] * diff * diff;
    if (L) L[i] = static_cast<uint8_t>(q);
  }
  return err;
}

// As affine_error for a symmetric sub-block, levels in [-nmax, nmax-1].
float symmetric_error(int n, int nmax, const float* x, const float* w, float ds, int8_t* L) {
  const float ids = ds != 0.0f ? 1.0f / ds : 0.0f;
  float err = 0.0f;
  if (!L) {  // scoring only: vectorizable
    TANDEM_SIMD_SUM(err)
    for (int i = 0; i < n; ++i) {
      const float diff = ds * static_cast<float>(clamp_int(round_int(x[i] * ids), -nmax, nmax - 1)) - x[i];
      err += w[i] * diff * diff;
    }
    return err;
  }
  for (int i = 0; i < n; ++i) {
    const int q = clamp_int(round_int(x[i] * ids), -nmax, nmax - 1);
    const float diff = ds * static_cast<float>(q) - x[i];
    err += w[i] * diff * diff;
    if (L) L[i] = static_cast<int8_t>(q);
  }
  return err;
}

// One Q4_K / Q5_K super-block: fills d, dmin, the 12 scale bytes and the 256 levels (0..nmax).
void fit_k_affine(const float* x, int nmax, bool search, uint16_t& d16, uint16_t& dmin16, uint8_t* scales,
                  uint8_t* L) {
  float w[qk_k];
  float sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    default_weights(32, xs, w + 32 * j);
    const affine_fit f =
        search ? search_affine_scale(32, nmax, xs, w + 32 * j, L + 32 * j, true, -1.0f, 0.1f, 20)
               : naive_affine_scale(32, nmax, xs, L + 32 * j, true);
    sc[j] = f.scale;
    mn[j] = -f.offset;
  }
  float max_sc = 0.0f, max_mn = 0.0f;
  for (int j = 0; j < 8; ++j) {
    max_sc = std::fmax(max_sc, sc[j]);
    max_mn = std::fmax(max_mn, mn[j]);
  }
  d16 = fp32_to_fp16(max_sc / 63.0f);
  dmin16 = fp32_to_fp16(max_mn / 63.0f);
  const float d = fp16_to_fp32(d16);
  const float dmin = fp16_to_fp32(dmin16);

  uint8_t qsc[8], qmn[8];
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    const float* ws = w + 32 * j;
    int bs = d > 0.0f ? clamp_int(round_int(sc[j] / d), 0, 63) : 0;
    int bm = dmin > 0.0f ? clamp_int(round_int(mn[j] / dmin), 0, 63) : 0;
    if (search) {
      float best =
          affine_error(32, nmax, xs, ws, d * static_cast<float>(bs), dmin * static_cast<float>(bm), nullptr);
      const int s0 = bs, m0 = bm;
      for (int s = s0 - 1; s <= s0 + 1; ++s) {
        for (int m = m0 - 1; m <= m0 + 1; ++m) {
          if (s < 0 || s > 63 || m < 0 || m > 63 || (s == s0 && m == m0)) continue;
          const float e = affine_error(32, nmax, xs, ws, d * static_cast<float>(s),
                                       dmin * static_cast<float>(m), nullptr);
          if (e < best) {
            best = e;
            bs = s;
            bm = m;
          }
        }
      }
    }
    qsc[j] = static_cast<uint8_t>(bs);
    qmn[j] = static_cast<uint8_t>(bm);
    affine_error(32, nmax, xs, ws, d * static_cast<float>(bs), dmin * static_cast<float>(bm), L + 32 * j);
  }
  k4_pack_scales(qsc, qmn, scales);
}

}  // namespace

void quantize_row_q4_k(const float* x, block_q4_k* y, int64_t n, bool search) {
  for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
    uint8_t L[qk_k];
    fit_k_affine(x, 15, search, y[b].d, y[b].dmin, y[b].scales, L);
    // Chunk c of 64 values: the first 32 in the low nibbles of qs[32c..], the next 32 in the high.
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        y[b].qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
      }
    }
  }
}

void quantize_row_q5_k(const float* x, block_q5_k* y, int64_t n, bool search) {
  for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
    uint8_t L[qk_k];
    fit_k_affine(x, 31, search, y[b].d, y[b].dmin, y[b].scales, L);
    // As Q4_K for the low 4 bits; bit 4 of the value l of chunk c goes to bit 2c (first 32) or
    // bit 2c+1 (next 32) of qh[l].
    std::memset(y[b].qh, 0, sizeof y[b].qh);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
        y[b].qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        y[b].qh[l] = static_cast<uint8_t>(y[b].qh[l] | (((lo >> 4) & 1) << (2 * c)) |
                                          (((hi >> 4) & 1) << (2 * c + 1)));
      }
    }
  }
}

void quantize_row_q6_k(const float* x, block_q6_k* y, int64_t n, bool search) {
  for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
    block_q6_k& blk = y[b];
    float w[qk_k];
    float sc[16];
    int8_t L[qk_k];
    float max_abs = 0.0f, max_sc = 0.0f;
    for (int j = 0; j < 16; ++j) {
      const float* xs = x + 16 * j;
      default_weights(16, xs, w + 16 * j);
      sc[j] = search ? search_symmetric_scale(16, 32, xs, w + 16 * j, L + 16 * j)
                     : naive_symmetric_scale(16, 32, xs, L + 16 * j);
      if (std::fabs(sc[j]) > max_abs) {
        max_abs = std::fabs(sc[j]);
        max_sc = sc[j];
      }
    }
    if (max_abs < tiny) {
      std::memset(&blk, 0, sizeof blk);
      continue;
    }
    blk.d = fp32_to_fp16(max_sc / -128.0f);
    const float d = fp16_to_fp32(blk.d);
    for (int j = 0; j < 16; ++j) {
      const float* xs = x + 16 * j;
      const float* ws = w + 16 * j;
      int bs = d != 0.0f ? clamp_int(round_int(sc[j] / d), -128, 127) : 0;
      if (search && d != 0.0f) {
        float best = symmetric_error(16, 32, xs, ws, d * static_cast<float>(bs), nullptr);
        const int s0 = bs;
        for (int s = s0 - 1; s <= s0 + 1; s += 2) {
          if (s < -128 || s > 127) continue;
          const float e = symmetric_error(16, 32, xs, ws, d * static_cast<float>(s), nullptr);
          if (e < best) {
            best = e;
            bs = s;
          }
        }
      }
      blk.scales[j] = static_cast<int8_t>(bs);
      symmetric_error(16, 32, xs, ws, d * static_cast<float>(bs), L + 16 * j);
    }
    // Per 128-value half h: ql[l] holds values l (low nibble) and l+64 (high), ql[l+32] holds
    // l+32 and l+96; qh[l] holds the top 2 bits of l, l+32, l+64, l+96 at bits 0, 2, 4, 6.
    for (int h = 0; h < 2; ++h) {
      const int8_t* Lh = L + 128 * h;
      uint8_t* ql = blk.ql + 64 * h;
      uint8_t* qh = blk.qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        const int q1 = Lh[l] + 32, q2 = Lh[l + 32] + 32, q3 = Lh[l + 64] + 32, q4 = Lh[l + 96] + 32;
        ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
  }
}

}  // namespace tandem::quant_detail
