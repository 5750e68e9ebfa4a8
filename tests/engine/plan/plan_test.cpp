// Memory plan tests: option parsing, byte accounting against the model's tensors and a hand
// computation of the CUDA backend's allocations, head / column / layer cuts by ratio, default
// ratios within memory, the Qwen3-32B Q4_K_M shape on a 16 GiB card alone and on 16 + 32 GiB, and
// hybrid (qwen35) shapes: KV of the attention layers only, the recurrent state, the DeltaNet cut by
// key heads, and the Qwen3.5-27B Q6_K shape on 16 + 32 GiB.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <set>

#include "backend/kv_cache.h"
#include "plan/memory_plan.h"
#include "plan/plan_parse.h"
#include "plan/plan_report.h"
#include "plan/shape_model.h"
#include "presets.h"
#include "quant_mix.h"
#include "tiny_model.h"

namespace tandem {
namespace {

constexpr uint64_t GiB = 1ull << 30;

std::unique_ptr<shape_model> preset_shape(std::string_view preset, std::string_view type) {
  const model_preset* p = find_preset(preset);
  EXPECT_NE(p, nullptr);
  const auto target = find_target(type);
  EXPECT_TRUE(target.has_value());
  std::vector<std::string> names;
  for (const auto& s : expected_tensors(*find_arch(p->arch), p->hp)) names.push_back(s.name);
  const mix_context ctx = make_mix_context(names, p->hp.n_layer, 0);
  auto m = make_shape_model(p->arch, p->hp, [&](const tensor_spec& s) {
    if (!is_quantizable(s.name, uint32_t(s.shape.size()))) return ggml_type::f32;
    return choose_type(*target, s.name, s.shape[0], ctx).type;
  });
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.message());
  return std::move(*m);
}

device_spec sized(uint64_t bytes, const std::string& name) {
  device_request r;
  r.bytes = bytes;
  r.text = name;
  return sized_device(r);
}

plan_options two_cards(split_mode split, std::vector<double> ratios = {}) {
  plan_options o;
  o.devices = {sized(16 * GiB, "16GiB"), sized(32 * GiB, "32GiB")};
  o.split = split;
  o.ratios = std::move(ratios);
  o.n_ctx = 4096;
  return o;
}

// ---- parsing ----

TEST(PlanParse, Sizes) {
  EXPECT_EQ(*parse_byte_size("16GiB"), 16 * GiB);
  EXPECT_EQ(*parse_byte_size("512mib"), 512ull << 20);
  EXPECT_EQ(*parse_byte_size("1.5G"), 3 * GiB / 2);
  EXPECT_EQ(*parse_byte_size("24GB"), 24000000000ull);
  EXPECT_EQ(*parse_byte_size("4096"), 4096u);
  for (const char* bad : {"abc", "", "0GiB", "16XB", "-1G", "1e9"}) {
    auto r = parse_byte_size(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_NE(parse_byte_size("16XB").message().find("unknown unit"), std::string::npos);
}

TEST(PlanParse, Devices) {
  auto ids = parse_device_list("0=16GiB,1=32GiB");
  ASSERT_TRUE(ids.ok()) << ids.message();
  ASSERT_EQ(ids->size(), 2u);
  EXPECT_EQ((*ids)[0].cuda_id, 0);
  EXPECT_EQ((*ids)[0].bytes, 16 * GiB);
  EXPECT_EQ((*ids)[1].cuda_id, 1);
  EXPECT_EQ((*ids)[1].bytes, 32 * GiB);
  auto plain = parse_device_list("0,1");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)[1].cuda_id, 1);
  EXPECT_EQ((*plain)[1].bytes, 0u);
  auto sizes = parse_device_list("16GiB, 32GiB");
  ASSERT_TRUE(sizes.ok()) << sizes.message();
  EXPECT_EQ((*sizes)[0].cuda_id, -1);
  EXPECT_EQ((*sizes)[1].bytes, 32 * GiB);

  auto abc = parse_device_list("0=abc");
  ASSERT_FALSE(abc.ok());
  EXPECT_NE(abc.message().find("abc"), std::string::npos) << abc.message();
  EXPECT_NE(abc.message().find("0=abc"), std::string::npos) << abc.message();
  auto dup = parse_device_list("0,0=16GiB");
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.message().find("twice"), std::string::npos);
  for (const char* bad : {"", "0,,1", "x=16GiB", "16QB", "-1"}) EXPECT_FALSE(parse_device_list(bad).ok()) << bad;
}

TEST(PlanParse, RatiosAndSplit) {
  auto r = parse_ratio_list("1,1.75");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<double>{1, 1.75}));
  for (const char* bad : {"1,0", "1,-1", "1,abc", "", "1,", "0"}) {
    auto b = parse_ratio_list(bad);
    EXPECT_FALSE(b.ok()) << bad;
  }
  EXPECT_NE(parse_ratio_list("1,0").message().find("greater than zero"), std::string::npos);
  EXPECT_EQ(*parse_split_mode("Tensor"), split_mode::tensor);
  EXPECT_EQ(*parse_split_mode("layer"), split_mode::layer);
  auto bad = parse_split_mode("diagonal");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("diagonal"), std::string::npos);
}

// ---- byte accounting ----

uint64_t sum_file_bytes(const gguf_file& f) {
  uint64_t s = 0;
  for (const auto& t : f.tensors()) s += t.n_bytes;
  return s;
}

TEST(Plan, TensorBytesAddUpToTheModel) {
  test::tiny_model_options to;
  to.matrix_type = ggml_type::q8_0;
  auto tiny = test::make_tiny_model(to);
  ASSERT_TRUE(tiny.ok()) << tiny.message();
  const model_desc& desc = (*tiny)->desc;
  const uint64_t file_bytes = sum_file_bytes(*(*tiny)->file);

  for (split_mode split : {split_mode::none, split_mode::layer}) {
    plan_options o = two_cards(split, split == split_mode::none ? std::vector<double>{} : std::vector<double>{1, 3});
    auto p = make_memory_plan(desc, o);
    ASSERT_TRUE(p.ok()) << p.message();
    EXPECT_EQ(p->model_tensor_bytes, file_bytes);
    uint64_t sum = 0;
    for (const auto& u : p->usage) sum += u.tensor_bytes;
    EXPECT_EQ(sum, file_bytes) << split_mode_name(split);
    uint64_t placed = 0;
    for (const auto& t : p->tensors) placed += t.file_bytes;
    EXPECT_EQ(placed, file_bytes);
  }
}

// The tensor split's exchange buffers are charged exactly: on every device, per source device two
// 4 MiB float slots and two 0.5 MiB word slots, and the flags (one buffer), and the block counters
// (another), each in whole 2 MiB pages; a layer split has none.
TEST(Plan, TensorSplitChargesTheExchangeBuffers) {
  auto m = preset_shape("qwen3-8b", "Q6_K");
  const auto tensor = make_memory_plan(m->desc, two_cards(split_mode::tensor, {1, 1}));
  const auto layer = make_memory_plan(m->desc, two_cards(split_mode::layer, {1, 1}));
  ASSERT_TRUE(tensor.ok() && layer.ok());
  constexpr uint64_t MiB = 1ull << 20;
  for (int d = 0; d < 2; ++d)
    EXPECT_EQ(tensor->usage[size_t(d)].overhead, layer->usage[size_t(d)].overhead + 20 * MiB + 2 * MiB) << d;
  plan_options three = two_cards(split_mode::tensor, {1, 1, 1});
  three.devices.push_back(sized(32 * GiB, "32GiB"));
  const auto p3 = make_memory_plan(m->desc, three);
  ASSERT_TRUE(p3.ok()) << p3.message();
  // 3 * 2 * (4 + 0.5) MiB = 27 MiB plus 768 bytes of flags: 28 MiB in pages, plus the counters.
  EXPECT_EQ(p3->usage[0].overhead, layer->usage[0].overhead + 28 * MiB + 2 * MiB);
}

TEST(Plan, TensorSplitShardsCoverEveryTensorOnce) {
  auto m = preset_shape("qwen3-8b", "Q6_K");
  plan_options o = two_cards(split_mode::tensor, {1, 1.75});
  auto p = make_memory_plan(m->desc, o);
  ASSERT_TRUE(p.ok()) << p.message();
  // Every sliced tensor's shards add up to it; replicated norms are held once per device.
  std::map<const gguf_tensor*, uint64_t> bytes;
  std::map<const gguf_tensor*, int> copies;
  for (const auto& t : p->tensors) {
    bytes[t.tensor] += t.file_bytes;
    copies[t.tensor]++;
  }
  uint64_t replicated = 0;
  for (const auto& [t, b] : bytes) {
    const bool norm = t->n_dims == 1;
    if (norm && copies[t] == 2) {
      EXPECT_EQ(b, 2 * t->n_bytes) << t->name;
      replicated += t->n_bytes;
    } else {
      EXPECT_EQ(b, t->n_bytes) << t->name;
    }
  }
  EXPECT_EQ(bytes.size(), 3 + 36 * 11u);  // token_embd, output, output_norm on one; 11 per layer
  uint64_t sum = 0;
  for (const auto& u : p->usage) sum += u.tensor_bytes;
  EXPECT_EQ(sum, p->model_tensor_bytes + replicated);
  EXPECT_GT(replicated, 0u);
}

// The single-GPU backend's allocations, computed by hand for a small f32 qwen3 shape (see
// cuda_weights.cpp and cuda_backend.cpp): E 256, 2 layers, F 512, 4 heads / 2 KV heads of 64,
// vocabulary 512, context 256, batch 512, one logit row, f16 KV, no allocation rounding.
TEST(Plan, SplitNoneMatchesHandComputation) {
  hparams hp;
  hp.n_vocab = 512, hp.n_ctx_train = 256, hp.n_embd = 256, hp.n_layer = 2, hp.n_ff = 512;
  hp.n_head = 4, hp.n_head_kv = 2, hp.head_dim = 64, hp.rope_dim = 64;
  auto m = make_shape_model("qwen3", hp, [](const tensor_spec&) { return ggml_type::f32; });
  ASSERT_TRUE(m.ok()) << m.message();
  plan_options o;
  o.devices = {sized(1 * GiB, "1GiB")};
  o.rt.alloc_granularity = 1;
  auto p = make_memory_plan((*m)->desc, o);
  ASSERT_TRUE(p.ok()) << p.message();
  const device_usage& u = p->usage[0];
  // Matrices: embd + output 2·256·512·4; per layer q 256·256·4 ×2 (q, o), k/v 256·128·4 ×2,
  // gate/up/down 256·512·4 ×3. Vectors: output_norm 256 floats at 0, then per layer attn_norm
  // and ffn_norm (256) and q/k norms (64) at 256-byte (64-float) offsets: 1536 floats.
  const uint64_t matrices = 2 * 524288 + 2 * (2 * 262144 + 2 * 131072 + 3 * 524288);
  EXPECT_EQ(u.weights, matrices + 1536 * 4);
  // K and V: 256 slots × 2 KV heads × 64 × 2 bytes per layer, 2 layers each.
  EXPECT_EQ(u.kv_cache, 2 * (2 * 256 * 2 * 64 * 2));
  // x, xn, tmp: 3·512·256·4; q, att: 2·512·256·4; k, v: 2·512·128·4; gate, up: 2·512·512·4;
  // xh: 512·512·2; RoPE rotations 512·64·4; ints: (5·512 + 1 + 16 blocks rounded to 32)·4; xo
  // 256·4, logits 512·4, ids 4.
  EXPECT_EQ(u.activations, 1572864 + 1048576 + 524288 + 2097152 + 524288 + 131072 + 10372 + 1024 + 2048 + 4);
  // Tile: largest matrix (gate, 131072 elements) in fp16. Mat-vec int8 x of 512 inputs × 8
  // tokens + 16 scales × 8 float2. Paged partials 1024 pairs · 32 · 66 floats. Prefill attention
  // (the flash kernel) keeps its tiles in shared memory: no buffer.
  EXPECT_EQ(u.workspace, 262144 + 5120 + 8650752);
  EXPECT_EQ(u.overhead, (512ull << 20) + (32ull << 20));
  EXPECT_EQ(u.total, u.weights + u.kv_cache + u.activations + u.workspace + u.overhead);
  EXPECT_TRUE(p->fits);

  // With 2 MiB pages every allocation rounds up: 2 weight buffers, 2 KV, 3 workspace buffers.
  o.rt.alloc_granularity = 2ull << 20;
  auto q = make_memory_plan((*m)->desc, o);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->usage[0].weights, 3 * (2ull << 20) + (2ull << 20));  // 5.5 MiB → 6 MiB, vectors → 2 MiB
  EXPECT_EQ(q->usage[0].kv_cache, 2 * (2ull << 20));
  EXPECT_EQ(q->usage[0].workspace, (2 * 2 + 10) * (1ull << 20));  // tile, mat-vec x; 8.25 MiB → 10 MiB
}

// ---- cuts by ratio ----

TEST(Plan, TensorSplitEightKvHeadsAtOneToOneSeventyFive) {
  auto m = preset_shape("qwen3-8b", "Q6_K");
  auto p = make_memory_plan(m->desc, two_cards(split_mode::tensor, {1, 1.75}));
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->shares[0].kv_head_begin, 0u);
  EXPECT_EQ(p->shares[0].kv_head_end, 3u);
  EXPECT_EQ(p->shares[1].kv_head_begin, 3u);
  EXPECT_EQ(p->shares[1].kv_head_end, 8u);
  // FFN columns: 12288 / 2.75 = 4468 rounded to Q6_K blocks of 256 → 4352.
  EXPECT_EQ(p->shares[0].ffn_end, 4352u);
  EXPECT_EQ(p->shares[1].ffn_begin, 4352u);
  EXPECT_EQ(p->shares[1].ffn_end, 12288u);
  // Embeddings and the head go to the main device (the larger one by default).
  EXPECT_EQ(p->main_device, 1);
  EXPECT_TRUE(p->shares[1].output && p->shares[1].embeddings);
  EXPECT_FALSE(p->shares[0].output || p->shares[0].embeddings);
  // KV cache per device follows its heads: 36 layers × 4096 slots × heads × 128 × 2 bytes × 2.
  EXPECT_EQ(p->usage[0].kv_cache, 2ull * 36 * 4096 * 3 * 128 * 2);
  EXPECT_EQ(p->usage[1].kv_cache, 2ull * 36 * 4096 * 5 * 128 * 2);
  // wo is cut along its inputs at head-group boundaries (3 KV heads × 4 query heads × 128).
  for (const auto& t : p->tensors)
    if (t.tensor == m->desc.layers[0].wo && t.device == 0) {
      EXPECT_EQ(t.kind, placement_kind::columns);
      EXPECT_EQ(t.end, 3u * 4 * 128);
    }
}

TEST(Plan, LayerSplitRangesByRatio) {
  auto m = preset_shape("qwen3-8b", "Q6_K");
  auto p = make_memory_plan(m->desc, two_cards(split_mode::layer, {1, 1.75}));
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->shares[0].layer_begin, 0u);
  EXPECT_EQ(p->shares[0].layer_end, 13u);  // 36 / 2.75 = 13.09
  EXPECT_EQ(p->shares[1].layer_begin, 13u);
  EXPECT_EQ(p->shares[1].layer_end, 36u);
  EXPECT_EQ(p->usage[0].kv_cache, 2ull * 13 * 4096 * 8 * 128 * 2);

  plan_options three = two_cards(split_mode::layer, {1, 1, 2});
  three.devices.push_back(sized(48 * GiB, "48GiB"));
  auto q = make_memory_plan(m->desc, three);
  ASSERT_TRUE(q.ok()) << q.message();
  EXPECT_EQ(q->shares[0].layer_end, 9u);
  EXPECT_EQ(q->shares[1].layer_begin, 9u);
  EXPECT_EQ(q->shares[1].layer_end, 18u);
  EXPECT_EQ(q->shares[2].layer_end, 36u);
  EXPECT_EQ(q->main_device, 2);
}

// ---- fitting ----

TEST(Plan, Qwen3_32B_Q4KM_NeedsBothCards) {
  auto m = preset_shape("qwen3-32b", "Q4_K_M");
  plan_options one;
  one.devices = {sized(16 * GiB, "16GiB")};
  one.n_ctx = 4096;
  auto alone = make_memory_plan(m->desc, one);
  ASSERT_TRUE(alone.ok()) << alone.message();
  EXPECT_FALSE(alone->fits);
  ASSERT_EQ(alone->reasons.size(), 1u);
  EXPECT_NE(alone->reasons[0].find("device 0 (16GiB)"), std::string::npos) << alone->reasons[0];
  EXPECT_NE(alone->reasons[0].find("short"), std::string::npos);
  EXPECT_GT(alone->usage[0].shortfall, 2 * GiB);
  EXPECT_GT(alone->usage[0].weights, 18 * GiB);  // 18.4 GiB of Q4_K_M tensors

  for (split_mode split : {split_mode::layer, split_mode::tensor}) {
    auto pair = make_memory_plan(m->desc, two_cards(split));
    ASSERT_TRUE(pair.ok()) << pair.message();
    EXPECT_TRUE(pair->fits) << plan_to_text(m->desc, *pair);
    EXPECT_TRUE(pair->default_ratios);
  }
  // A real device read as 139 GiB free but capped at 16 GiB is planned as 16 GiB.
  device_spec h200;
  h200.cuda_id = 0, h200.name = "cuda:0", h200.total_bytes = 140 * GiB, h200.free_bytes = 139 * GiB;
  h200.cap_bytes = 16 * GiB, h200.context_in_free = true;
  one.devices = {h200};
  auto capped = make_memory_plan(m->desc, one);
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->usage[0].capacity, 16 * GiB);
  EXPECT_FALSE(capped->fits);
}

TEST(Plan, DefaultRatiosKeepEqualSharesUnlessTheSmallCardIsFull) {
  auto m = preset_shape("qwen3-32b", "Q4_K_M");
  // 16 + 32 GiB: half the layers fit the 16 GiB card, so the shares stay equal (equal bandwidth).
  auto even = make_memory_plan(m->desc, two_cards(split_mode::layer));
  ASSERT_TRUE(even.ok());
  EXPECT_EQ(even->shares[0].layer_end, 32u);
  // 6 + 32 GiB: the small card cannot hold half; it gets what it can and the rest moves over.
  plan_options o = two_cards(split_mode::layer);
  o.devices[0] = sized(6 * GiB, "6GiB");
  auto skewed = make_memory_plan(m->desc, o);
  ASSERT_TRUE(skewed.ok()) << skewed.message();
  EXPECT_TRUE(skewed->fits) << plan_to_text(m->desc, *skewed);
  EXPECT_LT(skewed->shares[0].layer_end, 32u);
  EXPECT_GT(skewed->shares[0].layer_end, 10u);
  // Near full: one more layer would not fit the small card.
  plan_options more = o;
  const double l0 = skewed->shares[0].layer_end + 1.0;
  more.ratios = {l0, double(m->desc.hp.n_layer) - l0};
  auto over = make_memory_plan(m->desc, more);
  ASSERT_TRUE(over.ok()) << over.message();
  EXPECT_EQ(over->shares[0].layer_end, skewed->shares[0].layer_end + 1);
  EXPECT_FALSE(over->usage[0].fits) << plan_to_text(m->desc, *over);
}

TEST(Plan, BadOptionsAreErrors) {
  auto m = preset_shape("qwen3-8b", "Q6_K");
  auto expect_error = [&](plan_options o, const std::string& part) {
    auto p = make_memory_plan(m->desc, o);
    ASSERT_FALSE(p.ok()) << part;
    EXPECT_NE(p.message().find(part), std::string::npos) << p.message();
  };
  expect_error(two_cards(split_mode::layer, {1}), "1 ratios given for 2 devices");
  expect_error(two_cards(split_mode::none, {1, 2}), "ratios apply to layer or tensor split");
  expect_error(two_cards(split_mode::layer, {1, -2}), "positive");
  expect_error(two_cards(split_mode::layer, {1, 0}), "positive");
  plan_options main = two_cards(split_mode::layer);
  main.main_device = 2;
  expect_error(main, "main device 2");
  plan_options none;
  expect_error(none, "no devices");
  plan_options kv = two_cards(split_mode::layer);
  kv.kv_type = ggml_type::q4_k;
  expect_error(kv, "KV type");
  plan_options logits = two_cards(split_mode::layer);
  logits.n_logits = 1000;
  expect_error(logits, "logit rows");
}

TEST(Plan, Q8KvIsSized) {
  auto m = preset_shape("qwen3-8b", "Q6_K");
  plan_options o = two_cards(split_mode::none);
  o.devices.resize(1);
  o.kv_type = ggml_type::q8_0;
  o.rt.alloc_granularity = 1;
  auto p = make_memory_plan(m->desc, o);
  ASSERT_TRUE(p.ok());
  // 34 bytes per 32 elements: 36 layers × 4096 slots × 8 heads × 4 blocks × 34 bytes, K and V.
  EXPECT_EQ(p->usage[0].kv_cache, 2ull * 36 * 4096 * 8 * 4 * 34);
}

TEST(Plan, JsonAndTextCarryTheVerdict) {
  auto m = preset_shape("qwen3-8b", "Q6_K");
  auto p = make_memory_plan(m->desc, two_cards(split_mode::tensor, {1, 1.75}));
  ASSERT_TRUE(p.ok());
  const std::string j = plan_to_json(m->desc, *p, true);
  EXPECT_NE(j.find("\"fits\": true"), std::string::npos);
  EXPECT_NE(j.find("\"kv_heads\""), std::string::npos);
  EXPECT_NE(j.find("blk.35.ffn_down.weight"), std::string::npos);
  const std::string t = plan_to_text(m->desc, *p);
  EXPECT_NE(t.find("KV heads 0-2 (3 of 8)"), std::string::npos) << t;
  EXPECT_NE(t.find("ratios 1:1.75"), std::string::npos) << t;
}

// ---- hybrid (qwen35) ----

// A small qwen35 shape: E 256, 4 layers with a full-attention layer every 2nd (1 and 3), F 512,
// 4 heads / 2 KV heads of 64; DeltaNet Hk 2 / Hv 4 heads of dk = dv = 32, conv kernel 4
// (key_dim 64, value_dim 128, conv_dim 256); vocabulary 512, context 256.
hparams small_hybrid() {
  hparams hp;
  hp.n_vocab = 512, hp.n_ctx_train = 256, hp.n_embd = 256, hp.n_layer = 4, hp.n_ff = 512;
  hp.n_head = 4, hp.n_head_kv = 2, hp.head_dim = 64, hp.rope_dim = 32;
  hp.full_attn_interval = 2, hp.ssm_conv_kernel = 4, hp.ssm_state = 32, hp.ssm_groups = 2, hp.ssm_dt_rank = 4;
  hp.ssm_inner = 128;
  return hp;
}

std::unique_ptr<shape_model> f32_shape(std::string_view arch, const hparams& hp) {
  auto m = make_shape_model(arch, hp, [](const tensor_spec&) { return ggml_type::f32; });
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.message());
  return std::move(*m);
}

// The whole small hybrid model on one device, every allocation by hand (granularity 1).
TEST(PlanHybrid, SplitNoneMatchesHandComputation) {
  auto m = f32_shape("qwen35", small_hybrid());
  plan_options o;
  o.devices = {sized(1 * GiB, "1GiB")};
  o.rt.alloc_granularity = 1;
  auto p = make_memory_plan(m->desc, o);
  ASSERT_TRUE(p.ok()) << p.message();
  const device_usage& u = p->usage[0];
  // Matrices (f32): embd + output 2·256·512·4. Attention layers (1, 3): attn_q {256, 2·4·64} (q and
  // gate rows) 524288, k/v 256·128·4 each, o 256·256·4, FFN 3·256·512·4 = 1572864: 2621440.
  // DeltaNet layers (0, 2): attn_qkv 256·256·4, attn_gate 256·128·4, beta/alpha 256·4·4 each,
  // ssm_out 128·256·4, FFN: 2105344.
  const uint64_t matrices = 2 * 524288 + 2 * 2621440 + 2 * 2105344;
  // Vectors at 64-float offsets: output_norm 256; DeltaNet layers attn_norm + post_attention_norm
  // 2·256, conv 4·256, dt_bias, ssm_a (4) and ssm_norm (32) 64 each: 1728; attention layers the
  // two norms 512 and q/k norms 64 each: 640.
  EXPECT_EQ(u.weights, matrices + (256 + 2 * 1728 + 2 * 640) * 4);
  EXPECT_EQ(u.tensor_bytes, p->model_tensor_bytes);
  // K and V of the 2 attention layers only: 256 slots × 2 KV heads × 64 × 2 bytes each.
  EXPECT_EQ(u.kv_cache, 2 * (2 * 256 * 2 * 64 * 2));
  // Recurrent state per DeltaNet layer and sequence: conv 3 × 256 floats, S 4 × 32 × 32; 2 layers,
  // 1 sequence, fp32, and the checkpoint copy: what the cache's recurrent_bytes() says.
  EXPECT_EQ(u.state, 2 * 1 * 2 * (768 + 4096) * 4u);
  recurrent_layout rec;
  rec.n_layers = 2, rec.conv_floats = delta_net_of(m->desc.hp).conv_state_floats();
  rec.ssm_floats = delta_net_of(m->desc.hp).ssm_state_floats();
  EXPECT_EQ(u.state, 2 * rec.floats_per_seq() * sizeof(float));
  // As the plain model (see Plan.SplitNoneMatchesHandComputation, same E/F/heads, xh now 512·512·2)
  // plus gated attention's qg 512·512·4 and gate 512·256·4, the DeltaNet's qkv and conv output
  // 2·512·256·4, z, o, y 3·512·128·4, b 512·8·4 (room for b and a side by side) and a 512·4·4,
  // and 4 ints of one run; RoPE rotations 512·32·4; the chunked rule's workspace
  // 512·(2·2·32 + 4·(32 + 32 + 64 + 1))·4.
  const uint64_t plain = 1572864 + 1048576 + 524288 + 2097152 + 524288 + 65536 + 1024 + 2048 + 4;
  EXPECT_EQ(u.activations, plain + (2560 + 1 + 32 + 4) * 4 + 1048576 + 524288 + 1048576 + 786432 + 24576 + 1318912);
  // The workspace is the plain model's: the same largest matrix, widths, heads and batch.
  EXPECT_EQ(u.workspace, 262144 + 5120 + 8650752);
  EXPECT_EQ(u.total, u.weights + u.kv_cache + u.state + u.activations + u.workspace + u.overhead);

  // Four sequences: four times the state, and the KV of four contexts.
  o.n_seqs = 4;
  auto four = make_memory_plan(m->desc, o);
  ASSERT_TRUE(four.ok());
  EXPECT_EQ(four->usage[0].state, 4 * u.state);
  EXPECT_EQ(four->usage[0].kv_cache, 4 * u.kv_cache);
  // The text table grows a state column; the JSON carries the bytes and the layer kinds.
  const std::string t = plan_to_text(m->desc, *p);
  EXPECT_NE(t.find("state"), std::string::npos) << t;
  EXPECT_NE(t.find("2 attention + 2 Gated DeltaNet layers"), std::string::npos) << t;
  const std::string j = plan_to_json(m->desc, *p);
  EXPECT_NE(j.find("\"recurrent_state\": 77824"), std::string::npos) << j;
  EXPECT_NE(j.find("\"n_attention_layers\": 2"), std::string::npos) << j;
}

// A layer split counts each layer's own kind: KV for attention layers, state for DeltaNet ones.
TEST(PlanHybrid, LayerSplitCountsEachLayersKind) {
  auto m = f32_shape("qwen35", small_hybrid());
  plan_options o = two_cards(split_mode::layer, {1, 3});
  o.n_ctx = 256;
  o.rt.alloc_granularity = 1;
  auto p = make_memory_plan(m->desc, o);
  ASSERT_TRUE(p.ok()) << p.message();
  ASSERT_EQ(p->shares[0].layer_end, 1u);  // layer 0 (DeltaNet) | layers 1-3 (attention, DeltaNet, attention)
  const uint64_t kv_layer = 256 * 2 * 64 * 2, state_layer = (768 + 4096) * 4;
  EXPECT_EQ(p->usage[0].kv_cache, 0u);
  EXPECT_EQ(p->usage[0].state, 2 * state_layer);
  EXPECT_EQ(p->usage[1].kv_cache, 2 * 2 * kv_layer);
  EXPECT_EQ(p->usage[1].state, 2 * state_layer);
  // Attention layers add no workspace of their own (the flash kernel works in shared memory), so
  // both devices hold the same: the fp16 tile of the largest matrix (an FFN matrix, 256·512, on
  // either side), the mat-vec x of 512 inputs, and the paged partials (allocated on every device).
  EXPECT_EQ(p->usage[0].workspace, 262144 + 5120 + 8650752);
  EXPECT_EQ(p->usage[1].workspace, p->usage[0].workspace);
  uint64_t sum = 0;
  for (const auto& u : p->usage) sum += u.tensor_bytes;
  EXPECT_EQ(sum, p->model_tensor_bytes);
}

// A tensor split cuts the DeltaNet by key heads; each device's value heads are h with h % Hk in its
// key-head range, and its rows of attn_qkv are its q, k and v channels.
TEST(PlanHybrid, TensorSplitCutsDeltaNetByKeyHeads) {
  auto m = f32_shape("qwen35", small_hybrid());
  plan_options o = two_cards(split_mode::tensor, {1, 1});
  o.n_ctx = 256;
  o.rt.alloc_granularity = 1;
  auto p = make_memory_plan(m->desc, o);
  ASSERT_TRUE(p.ok()) << p.message();
  const device_share& s0 = p->shares[0];
  const device_share& s1 = p->shares[1];
  EXPECT_EQ(s0.dn_head_begin, 0u);
  EXPECT_EQ(s0.dn_head_end, 1u);
  EXPECT_EQ(s1.dn_head_begin, 1u);
  EXPECT_EQ(s1.dn_head_end, 2u);
  using runs = std::vector<std::pair<uint64_t, uint64_t>>;
  EXPECT_EQ(delta_net_value_runs(m->desc.hp, s0), (runs{{0, 1}, {2, 3}}));
  EXPECT_EQ(delta_net_value_runs(m->desc.hp, s1), (runs{{1, 2}, {3, 4}}));
  // State per device: conv 3 × (2·32 + 2·32) channels, S 2 × 32 × 32; 2 layers, ×2 for the checkpoint.
  EXPECT_EQ(p->usage[0].state, 2 * 2 * (3 * 128 + 2048) * 4u);
  EXPECT_EQ(p->usage[0].state + p->usage[1].state, 2 * 2 * (768 + 4096) * 4u);
  // KV follows the attention heads: one KV head per device over the 2 attention layers.
  EXPECT_EQ(p->usage[0].kv_cache, 2 * 2 * (256 * 64 * 2u));
  runs qkv0, qkv1, out0, q0;
  for (const auto& t : p->tensors) {
    if (t.tensor == m->desc.layers[0].dn_qkv) (t.device == 0 ? qkv0 : qkv1).push_back({t.begin, t.end});
    if (t.tensor == m->desc.layers[0].dn_out && t.device == 0) {
      EXPECT_EQ(t.kind, placement_kind::columns);
      out0.push_back({t.begin, t.end});
    }
    if (t.tensor == m->desc.layers[1].wq && t.device == 0) q0.push_back({t.begin, t.end});
  }
  // q (k-head 0), k (64 + k-head 0), v of value heads 0 and 2 (128 + 32·h).
  EXPECT_EQ(qkv0, (runs{{0, 32}, {64, 96}, {128, 160}, {192, 224}}));
  EXPECT_EQ(qkv1, (runs{{32, 64}, {96, 128}, {160, 192}, {224, 256}}));
  EXPECT_EQ(out0, (runs{{0, 32}, {64, 96}}));
  // Gated attention: KV head 0's 2 query heads take rows [q, gate] of 64 each: 256 rows.
  EXPECT_EQ(q0, (runs{{0, 256}}));
  // Every tensor's shards add up to it; replicated norms are held once per device.
  std::map<const gguf_tensor*, uint64_t> bytes;
  std::map<const gguf_tensor*, std::set<int>> holders;
  for (const auto& t : p->tensors) bytes[t.tensor] += t.file_bytes, holders[t.tensor].insert(t.device);
  for (const auto& [t, b] : bytes) {
    const bool replica = t->n_dims == 1 && holders[t].size() == 2 && t->name.find("ssm_a") == std::string::npos &&
                         t->name.find("ssm_dt") == std::string::npos;
    EXPECT_EQ(b, (replica ? 2 : 1) * t->n_bytes) << t->name;
  }
  const std::string text = plan_to_text(m->desc, *p);
  EXPECT_NE(text.find("DeltaNet key heads 0 (1 of 2) with value heads 0, 2 (2 of 4)"), std::string::npos) << text;
  bool noted = false;
  for (const auto& n : p->notes) noted = noted || n.find("cut by key heads") != std::string::npos;
  EXPECT_TRUE(noted);
}

// The Qwen3.5-27B shape at Q6_K (20.6 GiB of tensors by llama.cpp's mixture rule) with a 16384-token q8_0 cache fits 16 + 32 GiB
// in a tensor split; ssm_out's Q6_K blocks (256 of dv = 128) put the key-head cuts on even heads.
TEST(PlanHybrid, Qwen35_27B_Q6K_FitsTwoCardsTensorSplit) {
  auto m = preset_shape("qwen3.5-27b", "Q6_K");
  const model_desc& desc = m->desc;
  plan_options o = two_cards(split_mode::tensor);
  o.n_ctx = 16384;
  o.kv_type = ggml_type::q8_0;
  auto p = make_memory_plan(desc, o);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_TRUE(p->fits) << plan_to_text(desc, *p);
  EXPECT_GT(p->model_tensor_bytes, 20 * GiB);
  EXPECT_LT(p->model_tensor_bytes, 22 * GiB);
  uint64_t kv = 0, state = 0;
  for (size_t d = 0; d < 2; ++d) {
    EXPECT_EQ(p->shares[d].dn_head_begin % 2, 0u) << d;
    EXPECT_EQ(p->shares[d].dn_head_end % 2, 0u) << d;
    kv += p->usage[d].kv_cache;
    state += p->usage[d].state;
  }
  // KV: 16 attention layers × 16384 slots × 4 KV heads × 8 blocks of 34 bytes, K and V (each
  // device's buffers in 2 MiB pages, which these sizes already are).
  EXPECT_EQ(kv, 2ull * 16 * 16384 * 4 * 8 * 34);
  // State: 48 DeltaNet layers × (conv 3 × 10240 + S 48 × 128 × 128) floats, ×2 for the checkpoint.
  const uint64_t want_state = 2ull * 48 * (3 * 10240 + 48 * 128 * 128) * 4;
  EXPECT_GE(state, want_state);
  EXPECT_LT(state, want_state + 4 * (2ull << 20));
  // The layer split and a single 32 GiB card hold it too; 16 GiB alone does not.
  auto layer = make_memory_plan(desc, two_cards(split_mode::layer));
  ASSERT_TRUE(layer.ok());
  EXPECT_TRUE(layer->fits) << plan_to_text(desc, *layer);
  plan_options small = o;
  small.devices.resize(1);
  auto alone = make_memory_plan(desc, small);
  ASSERT_TRUE(alone.ok());
  EXPECT_FALSE(alone->fits);
}

TEST(PlanHybrid, ContradictoryDeltaNetShapeIsAnError) {
  hparams hp = small_hybrid();
  hp.ssm_dt_rank = 3;  // not a multiple of the 2 key heads
  hp.ssm_inner = 96;
  auto m = make_shape_model("qwen35", hp, [](const tensor_spec&) { return ggml_type::f32; });
  ASSERT_TRUE(m.ok()) << m.message();
  plan_options o;
  o.devices = {sized(1 * GiB, "1GiB")};
  auto p = make_memory_plan((*m)->desc, o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.message().find("time_step_rank"), std::string::npos) << p.message();
}

// A split the CUDA backend refuses is noted (first among the split notes), saying what a load
// does instead; a dense model's split and a hybrid model on one device are not.
TEST(PlanNotes, ModelsThatCannotBeSplitSayTheyAreServedOnOneGpu) {
  auto noted = [](const memory_plan& p) {
    for (size_t i = 0; i < p.notes.size(); ++i)
      if (p.notes[i].find("over several GPUs is not supported yet") != std::string::npos) return int(i);
    return -1;
  };
  auto hybrid = preset_shape("qwen3.5-27b", "Q6_K");
  auto p = make_memory_plan(hybrid->desc, two_cards(split_mode::layer));
  ASSERT_TRUE(p.ok()) << p.message();
  ASSERT_EQ(noted(*p), 0);
  EXPECT_EQ(p->notes[0], "splitting qwen35 (Gated DeltaNet hybrid) over several GPUs is not supported yet: a load "
                         "given these GPUs serves it on the one it fits with the most room");
  auto moe = preset_shape("qwen3-30b-a3b", "Q4_K_M");
  p = make_memory_plan(moe->desc, two_cards(split_mode::layer));
  ASSERT_TRUE(p.ok()) << p.message();
  ASSERT_GE(noted(*p), 0);
  EXPECT_NE(p->notes[noted(*p)].find("qwen3moe (mixture of experts)"), std::string::npos);
  plan_options one = two_cards(split_mode::layer);
  one.devices.resize(1);
  p = make_memory_plan(hybrid->desc, one);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(noted(*p), -1);
  p = make_memory_plan(hybrid->desc, two_cards(split_mode::none));
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(noted(*p), -1);
  auto dense = preset_shape("qwen3-32b", "Q4_K_M");
  p = make_memory_plan(dense->desc, two_cards(split_mode::layer));
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(noted(*p), -1);
}

}  // namespace
}  // namespace tandem
