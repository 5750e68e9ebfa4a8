// How a planned GPU split is described and handed to the CUDA backend, what a split request
// without the devices or the build for it answers, and the one-GPU fit check on devices of a
// given size. Needs no GPU.
#include <gtest/gtest.h>

#include "plan/plan_parse.h"
#include "runtime/model_instance.h"
#include "tiny_model.h"
#ifdef TANDEM_HAVE_CUDA_BACKEND
#include "backend/cuda/cuda_backend.h"
#endif

namespace tandem {
namespace {

gpu_split tensor_split() {
  gpu_split s;
  s.tensor = true;
  s.devices = {0, 1};
  s.layers = {36, 36};
  s.kv_heads = {{0, 3}, {3, 8}};
  s.ffn_columns = {{0, 4352}, {4352, 12288}};
  s.lead = 1;
  return s;
}

TEST(gpu_split, describe_names_each_devices_share) {
  gpu_split layer;
  layer.devices = {0, 1};
  layer.layers = {13, 23};
  EXPECT_EQ(layer.describe(), "layer 13:23");
  EXPECT_EQ(tensor_split().describe(), "tensor kv 3:5 ffn 4352:7936");
}

#ifdef TANDEM_HAVE_CUDA_BACKEND
TEST(gpu_split, cuda_options_carry_the_shares) {
  cuda_backend_options o;
  o.layers_per_device = {99};  // replaced, not appended to
  fill_cuda_options(tensor_split(), o);
  EXPECT_EQ(o.devices, (std::vector<int>{0, 1}));
  EXPECT_TRUE(o.layers_per_device.empty());
  ASSERT_EQ(o.tensor_shares.size(), 2u);
  EXPECT_EQ(o.tensor_shares[0].kv_head_end, 3u);
  EXPECT_EQ(o.tensor_shares[1].kv_head_begin, 3u);
  EXPECT_EQ(o.tensor_shares[1].ffn_begin, 4352u);
  EXPECT_EQ(o.tensor_shares[1].ffn_end, 12288u);
  EXPECT_FALSE(o.tensor_shares[0].lead);
  EXPECT_TRUE(o.tensor_shares[1].lead);
  gpu_split layer;
  layer.devices = {1, 0};
  layer.layers = {10, 26};
  fill_cuda_options(layer, o);
  EXPECT_EQ(o.devices, (std::vector<int>{1, 0}));
  EXPECT_EQ(o.layers_per_device, (std::vector<uint32_t>{10, 26}));
  EXPECT_TRUE(o.tensor_shares.empty());
}
#endif

// Bad split text is refused before any device is queried, in any build.
TEST(gpu_split, bad_split_is_refused_by_name) {
  auto m = test::make_tiny_model(test::tiny_model_options{});
  ASSERT_TRUE(m.ok()) << m.message();
  kv_cache_config cache;
  cache.n_ctx = 64;
  auto r = plan_gpu_split((*m)->desc, "0,1", "", "rows", cache, 512);
  ASSERT_FALSE(r.ok());
#ifdef TANDEM_HAVE_CUDA_BACKEND
  EXPECT_NE(r.message().find("unknown split 'rows'"), std::string::npos) << r.message();
  r = plan_gpu_split((*m)->desc, "0,1", "", "none", cache, 512);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("--split none"), std::string::npos) << r.message();
#else
  EXPECT_NE(r.message().find("no CUDA backend"), std::string::npos) << r.message();
#endif
}

// A single-GPU load is checked against the device before anything is allocated, as a split is:
// the error names the bytes the model needs and those free.
TEST(gpu_fit, one_device_too_small_is_refused_with_the_sizes_it_counts) {
  auto m = test::make_tiny_model(test::tiny_model_options{});
  ASSERT_TRUE(m.ok()) << m.message();
  kv_cache_config cache;
  cache.n_ctx = 64;
  device_request big;
  big.bytes = 4ull << 30;
  big.text = "4GiB";
  EXPECT_TRUE(check_gpu_fit((*m)->desc, sized_device(big), cache, 512).ok());
  // The CUDA context estimate and the margin alone exceed 600 MiB.
  device_request small;
  small.bytes = 600ull << 20;
  small.text = "600MiB";
  auto r = check_gpu_fit((*m)->desc, sized_device(small), cache, 512);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("does not fit GPU 600MiB"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("needs "), std::string::npos) << r.message();
  EXPECT_NE(r.message().find(" bytes and "), std::string::npos) << r.message();
  EXPECT_NE(r.message().find(" are free for it"), std::string::npos) << r.message();
  // The largest forward pass is counted: one of 65535 tokens needs more activation bytes than the
  // default 512-token one (a serving session plans its prefill chunk + one token a sequence; the
  // tiny model's buffers are small enough that allocation rounding hides a few thousand tokens).
  auto needs = [&](uint32_t n_batch) {
    auto f = check_gpu_fit((*m)->desc, sized_device(small), cache, n_batch);
    EXPECT_FALSE(f.ok());
    const std::string msg = f.ok() ? std::string() : f.message();
    const size_t at = msg.find("needs ");
    return at == std::string::npos ? uint64_t{0} : std::stoull(msg.substr(at + 6));
  };
  const uint64_t at_512 = needs(512), at_max = needs(65535);
  EXPECT_GT(at_512, 0u);
  EXPECT_GT(at_max, at_512);
  // A larger cache is counted: a context that fits 4 GiB alone does not once the cache is huge.
  cache.n_ctx = 1u << 24;
  cache.n_seq_max = 64;
  auto huge = check_gpu_fit((*m)->desc, sized_device(big), cache, 512);
  EXPECT_FALSE(huge.ok());
  if (!huge.ok()) {
    EXPECT_NE(huge.message().find("KV cache"), std::string::npos) << huge.message();
  }
}

// A model that cannot be split yet goes to the one listed device it fits with the most room,
// caps counted; fitting none is an error naming each device's shortfall.
device_spec sized_as(uint64_t bytes, const std::string& name) {
  device_request r;
  r.bytes = bytes;
  r.text = name;
  return sized_device(r);
}

TEST(pick_single_device, takes_the_device_it_fits_with_the_most_room) {
  for (hparams hp : {test::tiny_model_options::qwen35_hparams(), test::tiny_model_options::qwen3moe_hparams()}) {
    test::tiny_model_options o;
    o.arch = hp.moe() ? "qwen3moe" : "qwen35";
    o.hp = hp;
    auto m = test::make_tiny_model(o);
    ASSERT_TRUE(m.ok()) << m.message();
    const model_desc& d = (*m)->desc;
    kv_cache_config cache;
    cache.n_ctx = 64;
    const uint64_t MiB = 1ull << 20;
    // Only the larger fits (the context estimate and margin alone exceed 600 MiB), in either order.
    auto r = pick_single_device(d, {sized_as(600 * MiB, "600MiB"), sized_as(4096 * MiB, "4GiB")}, cache, 512);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(*r, 1u);
    r = pick_single_device(d, {sized_as(4096 * MiB, "4GiB"), sized_as(600 * MiB, "600MiB")}, cache, 512);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(*r, 0u);
    // Both fit: the one with more to spare.
    r = pick_single_device(d, {sized_as(4096 * MiB, "4GiB"), sized_as(8192 * MiB, "8GiB")}, cache, 512);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(*r, 1u);
    // A cap counts, not the card's size: 32 GiB capped at 2 GiB has less room than a free 4 GiB.
    device_request capped;
    capped.cuda_id = 1;
    capped.bytes = 2048 * MiB;
    capped.text = "1=2GiB";
    device_request whole;
    whole.cuda_id = 0;
    whole.text = "0";
    r = pick_single_device(d,
                           {measured_device(whole, "small", 4096 * MiB, 4096 * MiB),
                            measured_device(capped, "big", 32768 * MiB, 32768 * MiB)},
                           cache, 512);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(*r, 0u);
    // Fits none: each device is named with what it lacks.
    r = pick_single_device(d, {sized_as(500 * MiB, "500MiB"), sized_as(600 * MiB, "600MiB")}, cache, 512);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("fits none of these GPUs alone"), std::string::npos) << r.message();
    EXPECT_NE(r.message().find("500MiB is "), std::string::npos) << r.message();
    EXPECT_NE(r.message().find("600MiB is "), std::string::npos) << r.message();
    EXPECT_NE(r.message().find(" short (it needs "), std::string::npos) << r.message();
    EXPECT_FALSE(pick_single_device(d, {}, cache, 512).ok());
  }
}

}  // namespace
}  // namespace tandem
