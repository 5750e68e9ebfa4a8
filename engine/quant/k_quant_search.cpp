// Scale searches for the quantizers. See k_quant_search.h for what they minimise.
#include "quant/k_quant_search.h"

#include <cmath>

#include "quant/quant_impl.h"

namespace tandem::quant_detail {
namespace {

constexpr float tiny = 1e-30f;  // below this a group counts as all zero

// The value of largest magnitude (the first of equals); for an all-zero group (every |x| below
// tiny) 0, with its levels L set to 0, as the symmetric searches return scale 0 then.
float peak_value(int n, const float* x, int8_t* L) {
  float amax = 0.0f, vmax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > amax) {
      amax = a;
      vmax = x[i];
    }
  }
  if (amax < tiny) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  return vmax;
}

}  // namespace

void default_weights(int n, const float* x, float* w) {
  float sum2 = 0.0f;
  for (int i = 0; i < n; ++i) sum2 += x[i] * x[i];
  const float rms = std::sqrt(sum2 / static_cast<float>(n));
  for (int i = 0; i < n; ++i) w[i] = rms + std::fabs(x[i]);
}

// --- symmetric: x ~ scale * L, L in [-nmax, nmax-1] -------------------------------------------
//
// Search (in the manner of llama.cpp's make_qx_quants): let v be the value of largest magnitude.
// For each candidate inverse scale -(nmax + 0.1 k) / v, k = -steps_down..steps_up (the smaller
// candidates clip the largest values, which can pay off for heavy tails), round x*iscale to
// levels L; the weighted least-squares scale for those levels is s = sum(w x L) / sum(w L^2) and
// the error is sum(w x^2) - sum(w x L)^2 / sum(w L^2), so the candidate maximising
// sum(w x L)^2 / sum(w L^2) wins. Then alternate: re-round x / s and re-solve while that improves.

float search_symmetric_scale(int n, int nmax, const float* x, const float* w, int8_t* L, int steps_down,
                             int steps_up) {
  const float vmax = peak_value(n, x, L);
  if (vmax == 0.0f) return 0.0f;
  float best_score = -1.0f;  // sum(wxL)^2 / sum(wL^2); larger is better
  float best_scale = 0.0f;
  float best_iscale = 0.0f;
  // Scores a candidate without storing its levels (keeps the loop vectorizable); the winner's
  // levels are recomputed at the end with the same expression.
  auto try_iscale = [&](float iscale) {
    float sxl = 0.0f, sll = 0.0f;
    TANDEM_SIMD_SUM(sxl, sll)
    for (int i = 0; i < n; ++i) {
      const float l = static_cast<float>(clamp_int(round_int(iscale * x[i]), -nmax, nmax - 1));
      sxl += w[i] * x[i] * l;
      sll += w[i] * l * l;
    }
    if (sll > 0.0f && sxl * sxl > best_score * sll) {
      best_score = sxl * sxl / sll;
      best_scale = sxl / sll;
      best_iscale = iscale;
      return true;
    }
    return false;
  };
  for (int k = -steps_down; k <= steps_up; ++k) {
    try_iscale(-(static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / vmax);
  }
  for (int it = 0; it < 4 && best_scale != 0.0f; ++it) {
    if (!try_iscale(1.0f / best_scale)) break;
  }
  for (int i = 0; i < n; ++i)
    L[i] = static_cast<int8_t>(clamp_int(round_int(best_iscale * x[i]), -nmax, nmax - 1));
  return best_scale;
}

float naive_symmetric_scale(int n, int nmax, const float* x, int8_t* L) {
  const float vmax = peak_value(n, x, L);
  if (vmax == 0.0f) return 0.0f;
  const float scale = vmax / -static_cast<float>(nmax);
  const float iscale = 1.0f / scale;
  for (int i = 0; i < n; ++i)
    L[i] = static_cast<int8_t>(clamp_int(round_int(iscale * x[i]), -nmax, nmax - 1));
  return scale;
}

// --- affine: x ~ scale * L + offset, L in [0, nmax] -----------------------------------------------
//
// Search (in the manner of llama.cpp's make_qkx2_quants): with the range [lo, hi] of the group
// (lo clamped to <= 0 when the offset must be non-positive), try inverse scales
// (nmax + rmin + rdelta k) / (hi - lo), k = 0..nsteps; round (x - lo) * iscale to levels L and
// solve the 2x2 weighted least-squares problem for (scale, offset) given L in closed form
// (offset clamped to 0 with the scale re-solved when it must be non-positive); keep the fit with
// the smallest weighted squared error. Then alternate re-rounding (x - offset) / scale and
// re-solving while that improves.

affine_fit search_affine_scale(int n, int nmax, const float* x, const float* w, uint8_t* L,
                               bool offset_nonpositive, float rmin, float rdelta, int nsteps) {
  float lo = x[0], hi = x[0], sw = 0.0f, swx = 0.0f;
  for (int i = 0; i < n; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
    sw += w[i];
    swx += w[i] * x[i];
  }
  if (offset_nonpositive && lo > 0.0f) lo = 0.0f;
  if (!(hi > lo)) {  // constant group (or NaN): represent it by the offset alone
    for (int i = 0; i < n; ++i) L[i] = 0;
    return {0.0f, lo};
  }

  // Levels of a candidate, recomputed where needed instead of stored (keeps the loops
  // vectorizable); the winner's levels are written to L at the end.
  auto level = [&](float iscale, float origin, int i) {
    return static_cast<float>(clamp_int(round_int(iscale * (x[i] - origin)), 0, nmax));
  };
  auto error_of = [&](float iscale, float origin, float s, float m) {
    float e = 0.0f;
    TANDEM_SIMD_SUM(e)
    for (int i = 0; i < n; ++i) {
      const float diff = s * level(iscale, origin, i) + m - x[i];
      e += w[i] * diff * diff;
    }
    return e;
  };

  // Start from the naive fit.
  affine_fit best{(hi - lo) / static_cast<float>(nmax), lo};
  float best_iscale = static_cast<float>(nmax) / (hi - lo), best_origin = lo;
  float best_err = error_of(best_iscale, best_origin, best.scale, best.offset);

  auto try_fit = [&](float iscale, float origin) {
    float sl = 0.0f, sll = 0.0f, sxl = 0.0f;
    TANDEM_SIMD_SUM(sl, sll, sxl)
    for (int i = 0; i < n; ++i) {
      const float fl = level(iscale, origin, i);
      sl += w[i] * fl;
      sll += w[i] * fl * fl;
      sxl += w[i] * fl * x[i];
    }
    const float det = sw * sll - sl * sl;
    if (!(det > 0.0f)) return false;  // every value on one level: nothing to solve
    float s = (sw * sxl - swx * sl) / det;
    float m = (sll * swx - sl * sxl) / det;
    if (offset_nonpositive && m > 0.0f) {
      m = 0.0f;
      s = sxl / sll;
    }
    if (!(s > 0.0f)) return false;
    const float err = error_of(iscale, origin, s, m);
    if (err < best_err) {
      best_err = err;
      best = {s, m};
      best_iscale = iscale;
      best_origin = origin;
      return true;
    }
    return false;
  };

  for (int k = 0; k <= nsteps; ++k) {
    try_fit((static_cast<float>(nmax) + rmin + rdelta * static_cast<float>(k)) / (hi - lo), lo);
  }
  for (int it = 0; it < 4; ++it) {
    if (!try_fit(1.0f / best.scale, best.offset)) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(level(best_iscale, best_origin, i));
  return best;
}

affine_fit naive_affine_scale(int n, int nmax, const float* x, uint8_t* L, bool offset_nonpositive) {
  float lo = x[0], hi = x[0];
  for (int i = 0; i < n; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
  if (offset_nonpositive && lo > 0.0f) lo = 0.0f;
  if (!(hi > lo)) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return {0.0f, lo};
  }
  const float iscale = static_cast<float>(nmax) / (hi - lo);
  for (int i = 0; i < n; ++i)
    L[i] = static_cast<uint8_t>(clamp_int(round_int(iscale * (x[i] - lo)), 0, nmax));
  return {(hi - lo) / static_cast<float>(nmax), lo};
}

}  // namespace tandem::quant_detail
