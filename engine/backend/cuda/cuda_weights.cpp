// Weight upload for the CUDA backend: one device allocation for all matrices, filled by
// upload_pieces (several threads, each copying out of the mapping into its own pinned buffers
// while the previous copies cross the bus).
#include "backend/cuda/cuda_weights.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "kernels/cuda_check.h"
#include "kernels/dequant.h"
#include "quant/quant.h"

namespace tandem {
namespace {

constexpr uint64_t k_align = 256;

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

status check_matrix(const gguf_tensor* t) {
  if (!t) return make_error("CUDA backend: a required weight is missing");
  if (!gpu_can_dequantize(t->type))
    return make_error("CUDA backend: tensor ", t->name, " has type ", type_name(t->type),
                      ", which the CUDA kernels do not compute with");
  if (!row_bytes(t->type, t->dims[0]))
    return make_error("CUDA backend: tensor ", t->name, " rows are not whole blocks");
  return {};
}

// The part of a matrix a device holds: all of it, rows [begin, end) (outputs) or columns
// [begin, end) of every row (inputs), as the tensor split cuts them.
enum class cut_kind { whole, rows, columns };
struct matrix_cut {
  cut_kind kind = cut_kind::whole;
  uint64_t begin = 0, end = 0;
  uint64_t offset = 0;  // in the device allocation
};

uint64_t n_rows_of(const gguf_tensor& t) { return t.n_elements / t.dims[0]; }

status check_cut(const gguf_tensor& t, const matrix_cut& c) {
  const uint64_t limit = c.kind == cut_kind::rows ? n_rows_of(t) : t.dims[0];
  if (c.kind != cut_kind::whole && (c.begin >= c.end || c.end > limit))
    return make_error("CUDA backend: tensor ", t.name, " cannot be cut at ", c.begin, "..", c.end);
  if (c.kind == cut_kind::columns) {
    const uint64_t block = type_info(t.type).block_size;
    const uint64_t n = c.end - c.begin;
    if (c.begin % block || n % block || n % 32 || !row_bytes(t.type, n))
      return make_error("CUDA backend: tensor ", t.name, " (", type_name(t.type), ") cannot be cut at columns ",
                        c.begin, "..", c.end, ": not whole blocks of ", std::max<uint64_t>(block, 32));
  }
  return {};
}

uint64_t cut_bytes(const gguf_tensor& t, const matrix_cut& c) {
  const uint64_t rb = row_bytes(t.type, t.dims[0]).value_or(0);
  switch (c.kind) {
    case cut_kind::rows: return (c.end - c.begin) * rb;
    case cut_kind::columns: return n_rows_of(t) * row_bytes(t.type, c.end - c.begin).value_or(0);
    case cut_kind::whole: break;
  }
  return t.n_bytes;
}

// The host bytes of a matrix's cut and where they go.
upload_piece piece_of(const gguf_tensor& t, const matrix_cut& c, uint8_t* base) {
  const uint64_t rb = row_bytes(t.type, t.dims[0]).value_or(0);
  switch (c.kind) {
    case cut_kind::rows: return {base + c.offset, t.data + c.begin * rb, 1, 0, (c.end - c.begin) * rb};
    case cut_kind::columns:
      return {base + c.offset, t.data + row_bytes(t.type, c.begin).value_or(0), n_rows_of(t), rb,
              row_bytes(t.type, c.end - c.begin).value_or(0)};
    case cut_kind::whole: break;
  }
  return {base + c.offset, t.data, 1, 0, t.n_bytes};
}

device_matrix matrix_at(const gguf_tensor& t, const uint8_t* base, const matrix_cut& c) {
  device_matrix m;
  m.type = t.type;
  m.data = base + c.offset;
  m.n_in = static_cast<int64_t>(t.dims[0]);
  m.n_out = static_cast<int64_t>(n_rows_of(t));
  if (c.kind == cut_kind::rows) m.n_out = static_cast<int64_t>(c.end - c.begin);
  if (c.kind == cut_kind::columns) m.n_in = static_cast<int64_t>(c.end - c.begin);
  m.row_bytes = row_bytes(t.type, uint64_t(m.n_in)).value_or(0);
  return m;
}

// Float copies of the small tensors (or elements [begin, end) of one: a tensor split's share of
// a bias), packed with 256-byte alignment; returns each one's offset.
struct vector_pack {
  std::vector<float> data;
  std::map<const gguf_tensor*, uint64_t> offsets;  // in floats

  void add(const gguf_tensor* t, uint64_t begin = 0, uint64_t end = UINT64_MAX) {
    if (!t || offsets.count(t)) return;
    end = std::min<uint64_t>(end, t->n_elements);
    std::vector<float> all(t->n_elements);
    dequantize_row(t->type, t->data, all.data(), static_cast<int64_t>(t->n_elements));
    const uint64_t off = align_up(data.size(), k_align / sizeof(float));
    data.resize(off + (end - begin));
    std::copy(all.begin() + int64_t(begin), all.begin() + int64_t(end), data.begin() + int64_t(off));
    offsets[t] = off;
  }
  const float* at(const gguf_tensor* t, const float* base) const {
    return t ? base + offsets.at(t) : nullptr;
  }
};

}  // namespace

namespace {

// Every matrix this device holds with its cut, in upload order.
struct cut_list {
  std::vector<std::pair<const gguf_tensor*, matrix_cut>> items;
  std::map<const gguf_tensor*, size_t> index;
  uint64_t total = 0, last_end = 0;

  status add(const gguf_tensor* t, cut_kind kind = cut_kind::whole, uint64_t begin = 0, uint64_t end = 0) {
    return place(t, kind, begin, end, total);
  }
  // A whole matrix right after the previous one with no padding: the two read as one matrix of
  // both row sets (rows need no alignment of their own; the previous one's start has it).
  status add_after_previous(const gguf_tensor* t) { return place(t, cut_kind::whole, 0, 0, last_end); }
  device_matrix at(const gguf_tensor* t, const uint8_t* base) const {
    if (!index.count(t)) return {};
    return matrix_at(*t, base, items[index.at(t)].second);
  }

 private:
  status place(const gguf_tensor* t, cut_kind kind, uint64_t begin, uint64_t end, uint64_t offset) {
    TANDEM_TRY(check_matrix(t));
    if (index.count(t)) return {};  // the tied output head shares token_embd's copy
    matrix_cut c{kind, begin, end, offset};
    TANDEM_TRY(check_cut(*t, c));
    index[t] = items.size();
    items.emplace_back(t, c);
    last_end = offset + cut_bytes(*t, c);
    total = align_up(last_end, k_align);
    return {};
  }
};

// The heads and FFN columns of `range`, clipped to the model.
struct layer_cut {
  uint64_t q0, q1, k0, k1, f0, f1;
  bool all_heads, all_ffn;
};
layer_cut cut_of(const hparams& hp, const weight_range& r) {
  const uint64_t D = hp.head_dim, grp = hp.n_head / hp.n_head_kv;
  const uint64_t kb = std::min<uint64_t>(r.kv_head_begin, hp.n_head_kv), ke = std::min<uint64_t>(r.kv_head_end, hp.n_head_kv);
  const uint64_t fb = std::min<uint64_t>(r.ffn_begin, hp.n_ff), fe = std::min<uint64_t>(r.ffn_end, hp.n_ff);
  return {kb * grp * D, std::max(kb, ke) * grp * D, kb * D, std::max(kb, ke) * D, fb, std::max(fb, fe),
          kb == 0 && ke == hp.n_head_kv, fb == 0 && fe == hp.n_ff};
}

bool same_layout(const gguf_tensor& a, const gguf_tensor& b) { return a.type == b.type && a.dims[0] == b.dims[0]; }

status add_layer(const layer_weights& l, layer_kind kind, const layer_cut& c, cut_list& m, vector_pack& v) {
  v.add(l.attn_norm);
  v.add(l.ffn_norm);
  if (kind == layer_kind::delta_net) {  // never cut: make_cuda_backend refuses splits of hybrid models
    for (const gguf_tensor* t : {l.dn_qkv, l.dn_gate, l.dn_beta}) TANDEM_TRY(m.add(t));
    // alpha's rows straight after beta's: one mat-vec job computes both gate inputs.
    if (l.dn_beta && l.dn_alpha && same_layout(*l.dn_beta, *l.dn_alpha)) TANDEM_TRY(m.add_after_previous(l.dn_alpha));
    for (const gguf_tensor* t : {l.dn_alpha, l.dn_out}) TANDEM_TRY(m.add(t));
    for (const gguf_tensor* t : {l.dn_conv, l.dn_dt_bias, l.dn_a, l.dn_norm}) {
      if (!t) return make_error("CUDA backend: a DeltaNet weight of the layer is missing");
      v.add(t);
    }
  } else if (c.q1 > c.q0) {
    const auto rows = c.all_heads ? cut_kind::whole : cut_kind::rows;
    TANDEM_TRY(m.add(l.wq, rows, c.q0, c.q1));
    TANDEM_TRY(m.add(l.wk, rows, c.k0, c.k1));
    TANDEM_TRY(m.add(l.wv, rows, c.k0, c.k1));
    TANDEM_TRY(m.add(l.wo, c.all_heads ? cut_kind::whole : cut_kind::columns, c.q0, c.q1));
    v.add(l.q_norm);
    v.add(l.k_norm);
    v.add(l.bq, c.q0, c.q1);
    v.add(l.bk, c.k0, c.k1);
    v.add(l.bv, c.k0, c.k1);
  }
  if (l.ffn_gate_exps) {  // never cut: make_cuda_backend refuses splits of MoE models
    for (const gguf_tensor* t : {l.ffn_gate_inp, l.ffn_gate_exps, l.ffn_up_exps, l.ffn_down_exps}) TANDEM_TRY(m.add(t));
    for (const gguf_tensor* t : {l.ffn_gate_inp_shexp, l.ffn_gate_shexp, l.ffn_up_shexp, l.ffn_down_shexp})
      if (t) TANDEM_TRY(m.add(t));
  } else if (c.f1 > c.f0) {
    const auto rows = c.all_ffn ? cut_kind::whole : cut_kind::rows;
    TANDEM_TRY(m.add(l.ffn_gate, rows, c.f0, c.f1));
    TANDEM_TRY(m.add(l.ffn_up, rows, c.f0, c.f1));
    TANDEM_TRY(m.add(l.ffn_down, c.all_ffn ? cut_kind::whole : cut_kind::columns, c.f0, c.f1));
  }
  return {};
}

}  // namespace

status upload_weights(const model_desc& desc, const cuda_context& ctx, const upload_options& up,
                      const weight_range& range, device_weights& w, cuda_load_stats& stats) {
  const auto t0 = std::chrono::steady_clock::now();
  const uint32_t lb = range.layer_begin, le = std::min<uint32_t>(range.layer_end, uint32_t(desc.layers.size()));
  if (lb > le) return make_error("CUDA backend: empty layer range ", lb, "..", le);
  if (!desc.output_norm) return make_error("CUDA backend: output_norm is missing");
  const layer_cut lc = cut_of(desc.hp, range);
  cut_list mats;
  vector_pack vecs;
  if (range.embedding) TANDEM_TRY(mats.add(desc.token_embd));
  if (range.head) {
    TANDEM_TRY(mats.add(desc.output));
    vecs.add(desc.output_norm);
  }
  for (uint32_t il = lb; il < le; ++il) TANDEM_TRY(add_layer(desc.layers[il], desc.hp.kind(il), lc, mats, vecs));

  TANDEM_TRY(w.matrices.alloc(mats.total));
  TANDEM_TRY(w.vectors.alloc(vecs.data.size() * sizeof(float)));
  auto* base = w.matrices.get<uint8_t>();
  uint64_t copied = 0;
  std::vector<upload_piece> pieces;
  pieces.reserve(mats.items.size());
  for (const auto& [t, c] : mats.items) {
    pieces.push_back(piece_of(*t, c, base));
    copied += pieces.back().bytes();
  }
  upload_options o = up;
  o.device = ctx.device();
  TANDEM_TRY(upload_pieces(pieces, o));
  TANDEM_CUDA_TRY(cudaMemcpyAsync(w.vectors.get(), vecs.data.data(), vecs.data.size() * sizeof(float),
                                  cudaMemcpyHostToDevice, ctx.stream()));
  TANDEM_CUDA_TRY(cudaStreamSynchronize(ctx.stream()));

  const auto* vbase = w.vectors.get<float>();
  const auto vec = [&](const gguf_tensor* t) { return t && vecs.offsets.count(t) ? vecs.at(t, vbase) : nullptr; };
  if (range.embedding) w.token_embd = mats.at(desc.token_embd, base);
  if (range.head) {
    w.output = mats.at(desc.output, base);
    w.output_norm = vec(desc.output_norm);
  }
  w.layers.assign(desc.layers.size(), device_layer{});
  for (uint32_t il = lb; il < le; ++il) {
    const auto& l = desc.layers[il];
    device_layer& d = w.layers[il];
    d.attn_norm = vec(l.attn_norm);
    d.ffn_norm = vec(l.ffn_norm);
    d.q_norm = vec(l.q_norm);
    d.k_norm = vec(l.k_norm);
    d.bq = vec(l.bq);
    d.bk = vec(l.bk);
    d.bv = vec(l.bv);
    d.wq = mats.at(l.wq, base);
    d.wk = mats.at(l.wk, base);
    d.wv = mats.at(l.wv, base);
    d.wo = mats.at(l.wo, base);
    d.gate = mats.at(l.ffn_gate, base);
    d.up = mats.at(l.ffn_up, base);
    d.down = mats.at(l.ffn_down, base);
    d.dn_qkv = mats.at(l.dn_qkv, base);
    d.dn_gate = mats.at(l.dn_gate, base);
    d.dn_beta = mats.at(l.dn_beta, base);
    d.dn_alpha = mats.at(l.dn_alpha, base);
    if (d.dn_beta.data && d.dn_alpha.data == d.dn_beta.data + d.dn_beta.n_out * d.dn_beta.row_bytes) {
      d.dn_ba = d.dn_beta;
      d.dn_ba.n_out += d.dn_alpha.n_out;
    }
    d.dn_out = mats.at(l.dn_out, base);
    d.router = mats.at(l.ffn_gate_inp, base);
    d.gate_exps = mats.at(l.ffn_gate_exps, base);
    d.up_exps = mats.at(l.ffn_up_exps, base);
    d.down_exps = mats.at(l.ffn_down_exps, base);
    d.shexp_gate = mats.at(l.ffn_gate_inp_shexp, base);
    d.gate_shexp = mats.at(l.ffn_gate_shexp, base);
    d.up_shexp = mats.at(l.ffn_up_shexp, base);
    d.down_shexp = mats.at(l.ffn_down_shexp, base);
    d.dn_conv = vec(l.dn_conv);
    d.dn_dt_bias = vec(l.dn_dt_bias);
    d.dn_a = vec(l.dn_a);
    d.dn_norm = vec(l.dn_norm);
  }
  stats.bytes = copied + vecs.data.size() * sizeof(float);
  stats.device_bytes = mats.total + vecs.data.size() * sizeof(float);
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats.device_name = ctx.description();
  return {};
}

}  // namespace tandem
