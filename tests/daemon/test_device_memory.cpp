// The status op's memory by device: models grouped by where they live, the host's memory always
// present, and a model split over GPUs listed on each of its GPUs.
#include <gtest/gtest.h>

#include "server/device_memory.h"

namespace tandem::daemon {
namespace {

using nlohmann::json;

const json* find(const json& devices, const std::string& name) {
  for (const auto& d : devices)
    if (d["device"] == name) return &d;
  return nullptr;
}

TEST(device_memory, models_grouped_by_device) {
  const json models = json::array({
      {{"name", "a"}, {"device", "cpu"}, {"bytes", 100}},
      {{"name", "b"}, {"device", "cpu"}, {"bytes", 50}},
      {{"name", "big"}, {"device", "cuda:0+1"}, {"bytes", 7000}},
      {{"name", "one"}, {"device", "cuda:1"}, {"bytes", 300}},
      {{"name", "gone"}, {"state", "unloaded"}},  // not resident: no device
  });
  const json d = devices_json(models);
  ASSERT_EQ(d.size(), 4u) << d.dump();
  const json* cpu = find(d, "cpu");
  ASSERT_TRUE(cpu);
  EXPECT_EQ((*cpu)["models"], json::array({"a", "b"}));
  EXPECT_EQ((*cpu)["model_bytes"], 150);
  EXPECT_GT((*cpu)["total_bytes"].get<uint64_t>(), 0u);  // /proc/meminfo
  const json* split = find(d, "cuda:0+1");
  ASSERT_TRUE(split);
  EXPECT_EQ((*split)["model_bytes"], 7000);
  EXPECT_FALSE(split->contains("total_bytes"));  // not one device
  const json* g0 = find(d, "cuda:0");
  const json* g1 = find(d, "cuda:1");
  ASSERT_TRUE(g0 && g1);
  EXPECT_EQ((*g0)["models"], json::array({"big"}));
  EXPECT_EQ((*g0)["model_bytes"], 0);  // the split's bytes stay on its own entry
  EXPECT_EQ((*g1)["models"], json::array({"big", "one"}));
  EXPECT_EQ((*g1)["model_bytes"], 300);
}

TEST(device_memory, host_entry_without_models) {
  const json d = devices_json(json::array());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0]["device"], "cpu");
  EXPECT_EQ(d[0]["models"], json::array());
}

}  // namespace
}  // namespace tandem::daemon
