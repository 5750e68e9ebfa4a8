// The GPU model table, GPU model names in --devices, and the speed model: the H200 calibration
// reproduces its own measurement, per-device costs add up to the whole model, and on two V100s a
// tensor split beats a layer split but not twice one card.
#include <gtest/gtest.h>

#include "plan/active_weights.h"
#include "plan/gpu_model.h"
#include "plan/memory_plan.h"
#include "plan/plan_parse.h"
#include "plan/plan_report.h"
#include "plan/shape_model.h"
#include "plan/speed_model.h"
#include "presets.h"
#include "quant_mix.h"

namespace tandem {
namespace {

// As `tandem-model plan --preset NAME --type T` types it (client/tandem_model/plan_cmd.cpp).
std::unique_ptr<shape_model> preset_shape(std::string_view preset, std::string_view type) {
  const model_preset* p = find_preset(preset);
  EXPECT_NE(p, nullptr);
  const auto target = find_target(type);
  EXPECT_TRUE(target.has_value());
  std::vector<std::string> names;
  for (const auto& s : expected_tensors(*find_arch(p->arch), p->hp)) names.push_back(s.name);
  const mix_context ctx = make_mix_context(names, p->hp.n_layer, p->hp.n_expert);
  auto m = make_shape_model(p->arch, p->hp, [&](const tensor_spec& s) {
    if (!is_quantizable(s.name, uint32_t(s.shape.size()))) return ggml_type::f32;
    return choose_type(*target, s.name, s.shape[0], ctx).type;
  });
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.message());
  return std::move(*m);
}

struct planned {
  memory_plan plan;
  std::vector<const gpu_model*> gpus;
};

// The plan of `desc` on GPU models given as --devices would be, at a 16384-token context.
planned plan_on(const model_desc& desc, std::string_view devices, split_mode split) {
  planned out;
  auto reqs = parse_device_list(devices);
  EXPECT_TRUE(reqs.ok()) << reqs.message();
  plan_options o;
  for (const auto& r : *reqs) {
    o.devices.push_back(sized_device(r));
    out.gpus.push_back(r.gpu);
  }
  o.split = split;
  o.n_ctx = 16384;
  auto p = make_memory_plan(desc, o);
  EXPECT_TRUE(p.ok()) << p.message();
  out.plan = std::move(*p);
  return out;
}

speed_estimate speed_of(const model_desc& desc, const planned& p) {
  auto e = estimate_speed(desc, p.plan, p.gpus);
  EXPECT_TRUE(e.ok()) << e.message();
  return std::move(*e);
}

// ---- the table ----

TEST(PlanGpuModel, LookupByNameIgnoresCase) {
  const gpu_model* v16 = find_gpu_model("v100-16gb");
  ASSERT_NE(v16, nullptr);
  EXPECT_EQ(v16->memory_bytes, 16945512448ull);  // 16160 MiB, as CUDA reports the card
  EXPECT_EQ(v16->bandwidth, 900e9);
  EXPECT_EQ(v16->fp16_flops, 112e12);
  EXPECT_EQ(v16->link_bytes_per_s, 12e9);
  EXPECT_EQ(find_gpu_model("V100-16GB"), v16);
  const gpu_model* v32 = find_gpu_model("V100-32gb");
  ASSERT_NE(v32, nullptr);
  EXPECT_EQ(v32->memory_bytes, 34089730048ull);
  const gpu_model* h200 = find_gpu_model("H200");
  ASSERT_NE(h200, nullptr);
  EXPECT_EQ(h200->bandwidth, 4.8e12);
  EXPECT_EQ(h200->fp16_flops, 989e12);
  for (const char* unknown : {"a100", "v100", "v100-16gb ", "", "16GiB", "h2000"})
    EXPECT_EQ(find_gpu_model(unknown), nullptr) << unknown;
  EXPECT_EQ(all_gpu_models().size(), 3u);
  EXPECT_EQ(gpu_model_names(), "v100-16gb, v100-32gb, h200");
}

TEST(PlanGpuModel, DeviceListTakesModelNames) {
  auto pair = parse_device_list("v100-16gb,v100-32gb");
  ASSERT_TRUE(pair.ok()) << pair.message();
  ASSERT_EQ(pair->size(), 2u);
  EXPECT_EQ((*pair)[0].gpu, find_gpu_model("v100-16gb"));
  EXPECT_EQ((*pair)[0].cuda_id, -1);
  EXPECT_EQ((*pair)[0].bytes, 0u);
  const device_spec d = sized_device((*pair)[1]);
  EXPECT_EQ(d.name, "v100-32gb");
  EXPECT_EQ(d.cuda_id, -1);
  EXPECT_EQ(d.total_bytes, 34089730048ull);
  EXPECT_EQ(d.free_bytes, d.total_bytes);
  EXPECT_EQ(d.cap_bytes, 0u);

  // Caps, case, two cards of one model, and the other forms alongside.
  auto mixed = parse_device_list("V100-32GB=20GiB, v100-32gb, 0=16GiB, 24GiB");
  ASSERT_TRUE(mixed.ok()) << mixed.message();
  ASSERT_EQ(mixed->size(), 4u);
  EXPECT_EQ((*mixed)[0].gpu, find_gpu_model("v100-32gb"));
  EXPECT_EQ((*mixed)[0].bytes, 20ull << 30);
  EXPECT_EQ(sized_device((*mixed)[0]).cap_bytes, 20ull << 30);
  EXPECT_EQ((*mixed)[1].gpu, (*mixed)[0].gpu);
  EXPECT_EQ((*mixed)[2].gpu, nullptr);
  EXPECT_EQ((*mixed)[2].cuda_id, 0);
  EXPECT_EQ((*mixed)[3].gpu, nullptr);
  EXPECT_EQ((*mixed)[3].bytes, 24ull << 30);

  auto unknown = parse_device_list("v100-64gb");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("v100-64gb"), std::string::npos) << unknown.message();
  EXPECT_NE(unknown.message().find("v100-16gb, v100-32gb, h200"), std::string::npos) << unknown.message();
  auto bad_cap = parse_device_list("h200=lots");
  ASSERT_FALSE(bad_cap.ok());
  EXPECT_NE(bad_cap.message().find("cap"), std::string::npos) << bad_cap.message();
}

// ---- the speed model ----

// The calibration is this preset's own measurement: the model must give it back.
TEST(PlanSpeedModel, H200ReproducesItsMeasurement) {
  auto m = preset_shape("qwen3.5-27b", "Q6_K");
  const planned p = plan_on(m->desc, "h200", split_mode::none);
  EXPECT_TRUE(p.plan.fits);
  const speed_estimate e = speed_of(m->desc, p);
  EXPECT_EQ(e.n_used, 1);
  EXPECT_EQ(e.decode_link_bytes, 0);
  EXPECT_NEAR(e.peer.decode_tok_s, 91.47, 0.01 * 91.47);
  EXPECT_NEAR(e.peer.prefill_tok_s[0], 6836.4, 0.01 * 6836.4);
  EXPECT_NEAR(e.peer.prefill_tok_s[1], 5387.9, 0.01 * 5387.9);
  EXPECT_EQ(e.host.decode_tok_s, e.peer.decode_tok_s);  // nothing crosses a link
}

// Every device's share of a token adds up to the whole model's, in either split.
TEST(PlanSpeedModel, DeviceCostsAddUpToTheModel) {
  auto m = preset_shape("qwen3.5-27b", "Q6_K");
  const model_desc& d = m->desc;
  const active_weights whole = active_per_token(d);
  const planned one = plan_on(d, "v100-32gb", split_mode::none);
  const device_cost all = device_token_cost(d, one.plan, 0);
  EXPECT_EQ(all.weight_bytes, whole.bytes);
  EXPECT_EQ(all.params, double(whole.params));
  for (split_mode split : {split_mode::layer, split_mode::tensor}) {
    const planned p = plan_on(d, "v100-16gb,v100-32gb", split);
    const speed_estimate e = speed_of(d, p);
    ASSERT_EQ(e.n_used, 2);
    double bytes = 0, state = 0, kv = 0, flops = 0;
    for (const device_cost& c : e.devices) {
      EXPECT_GT(c.weight_bytes, whole.bytes / 4);  // both cards carry a real share
      bytes += double(c.weight_bytes), state += double(c.state_bytes), kv += c.kv_bytes;
      flops += c.prefill_flops[1];
    }
    EXPECT_NEAR(bytes, double(whole.bytes), 1e-6 * double(whole.bytes)) << split_mode_name(split);
    EXPECT_NEAR(state, double(all.state_bytes), 1e-6 * double(all.state_bytes)) << split_mode_name(split);
    EXPECT_NEAR(kv, all.kv_bytes, 1e-6 * all.kv_bytes) << split_mode_name(split);
    EXPECT_NEAR(flops, all.prefill_flops[1], 1e-6 * all.prefill_flops[1]) << split_mode_name(split);
  }
}

// The motivating rig: a tensor split runs both cards' bandwidth at once, a layer split one after
// the other, so the tensor split decodes faster but, paying the exchange, under twice one card.
TEST(PlanSpeedModel, TwoV100sTensorSplitBeatsLayerSplit) {
  auto m = preset_shape("qwen3.5-27b", "Q6_K");
  const model_desc& d = m->desc;
  const planned tensor = plan_on(d, "v100-16gb,v100-32gb", split_mode::tensor);
  const planned layer = plan_on(d, "v100-16gb,v100-32gb", split_mode::layer);
  EXPECT_TRUE(tensor.plan.fits);
  EXPECT_TRUE(layer.plan.fits);
  const speed_estimate t = speed_of(d, tensor), l = speed_of(d, layer);
  // One V100 holding the whole model (memory aside): its decode bound at the same efficiency.
  const device_cost whole = device_token_cost(d, plan_on(d, "v100-32gb", split_mode::none).plan, 0);
  const double single = 900e9 * h200_calibration().decode / whole.decode_bytes();
  EXPECT_GT(t.peer.decode_tok_s, l.peer.decode_tok_s);
  EXPECT_LT(t.peer.decode_tok_s, 2 * single);
  EXPECT_LT(l.peer.decode_tok_s, single);  // the hand-over adds a little
  EXPECT_GT(l.peer.decode_tok_s, 0.99 * single);
  for (size_t i = 0; i < k_prefill_lengths.size(); ++i) {
    EXPECT_GT(t.peer.prefill_tok_s[i], l.peer.prefill_tok_s[i]) << k_prefill_lengths[i];
    EXPECT_LT(t.host.prefill_tok_s[i], t.peer.prefill_tok_s[i]) << k_prefill_lengths[i];
  }
  EXPECT_LT(t.host.decode_tok_s, t.peer.decode_tok_s);
  EXPECT_EQ(t.peer.link_bytes_per_s, 12e9);
  EXPECT_EQ(t.host.link_bytes_per_s, 6e9);
  // 2 sums per layer and the embedding broadcast, 5120 floats each as 8-byte flagged words.
  EXPECT_EQ(t.decode_link_bytes, (2.0 * 64 + 1) * 5120 * 8);
  EXPECT_EQ(t.prefill_link_bytes, (2.0 * 64 + 1) * 5120 * 4);
  EXPECT_EQ(l.decode_link_bytes, 5120.0 * 4);
}

// 20.6 GiB of weights do not fit a 16 GB card; the 32 GB one holds them with a 16k context.
TEST(PlanSpeedModel, Qwen35_27B_Q6K_DoesNotFitOneV100_16GB) {
  auto m = preset_shape("qwen3.5-27b", "Q6_K");
  const planned small = plan_on(m->desc, "v100-16gb", split_mode::none);
  EXPECT_FALSE(small.plan.fits);
  ASSERT_FALSE(small.plan.reasons.empty());
  EXPECT_NE(small.plan.reasons[0].find("v100-16gb"), std::string::npos) << small.plan.reasons[0];
  EXPECT_TRUE(plan_on(m->desc, "v100-32gb", split_mode::none).plan.fits);
}

TEST(PlanSpeedModel, ReportsLabelTheModel) {
  auto m = preset_shape("qwen3.5-27b", "Q6_K");
  const planned p = plan_on(m->desc, "v100-16gb,v100-32gb", split_mode::tensor);
  const speed_estimate e = speed_of(m->desc, p);
  const std::string text = plan_to_text(m->desc, p.plan, &e);
  EXPECT_NE(text.find("expected speed (a model, not a measurement"), std::string::npos) << text;
  EXPECT_NE(text.find("through host memory"), std::string::npos) << text;
  EXPECT_EQ(plan_to_text(m->desc, p.plan).find("expected speed"), std::string::npos);
  const std::string json = plan_to_json(m->desc, p.plan, false, &e);
  EXPECT_NE(json.find("\"speed_model\""), std::string::npos);
  EXPECT_NE(json.find("not a measurement"), std::string::npos);
}

TEST(PlanSpeedModel, BadInputsAreErrors) {
  auto m = preset_shape("qwen3.5-27b", "Q6_K");
  planned p = plan_on(m->desc, "v100-16gb,v100-32gb", split_mode::tensor);
  auto fewer = estimate_speed(m->desc, p.plan, {p.gpus[0]});
  ASSERT_FALSE(fewer.ok());
  EXPECT_NE(fewer.message().find("1 GPU models for 2 devices"), std::string::npos) << fewer.message();
  p.gpus[1] = nullptr;
  auto unnamed = estimate_speed(m->desc, p.plan, p.gpus);
  ASSERT_FALSE(unnamed.ok());
  EXPECT_NE(unnamed.message().find("not a GPU model"), std::string::npos) << unnamed.message();
}

}  // namespace
}  // namespace tandem
