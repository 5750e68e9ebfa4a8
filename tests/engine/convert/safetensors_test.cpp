// The safetensors reader on files the tests write: valid single files and sharded directories, and
// malformed headers, each refused with an error that names the problem.
#include "convert/safetensors.h"

#include <gtest/gtest.h>

#include "quant/half.h"
#include "st_test_util.h"

namespace tandem {
namespace {

using test::as_bytes;
using test::make_safetensors;
using test::raw_safetensors;
using test::st_entry;

// Parses bytes and expects an error containing `needle`.
void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  auto f = safetensors_file::parse(bytes, "t.safetensors");
  ASSERT_FALSE(f.ok()) << "expected an error containing: " << needle;
  EXPECT_NE(f.message().find(needle), std::string::npos) << f.message();
  EXPECT_NE(f.message().find("t.safetensors"), std::string::npos) << f.message();
}

TEST(safetensors, reads_tensors_of_each_float_dtype) {
  const std::vector<float> a = {1.5f, -2.f, 3.25f, 0.f, 7.f, -0.5f};
  const std::vector<uint16_t> b = {fp32_to_bf16(1.f), fp32_to_bf16(-3.5f), fp32_to_bf16(0.25f),
                                   fp32_to_bf16(100.f)};
  const std::vector<uint16_t> c = {fp32_to_fp16(0.125f), fp32_to_fp16(-65504.f)};
  const std::vector<double> d = {2.5, -1e-3};
  auto bytes = make_safetensors({{"a", "F32", {2, 3}, as_bytes(a)},
                                 {"b", "BF16", {4}, as_bytes(b)},
                                 {"c", "F16", {1, 2}, as_bytes(c)},
                                 {"d", "F64", {2}, as_bytes(d)},
                                 {"ids", "I64", {1}, as_bytes(std::vector<int64_t>{42})}},
                                {{"format", "pt"}});
  auto f = safetensors_file::parse(bytes, "t.safetensors");
  ASSERT_TRUE(f.ok()) << f.message();
  ASSERT_EQ(f->tensors().size(), 5u);
  EXPECT_EQ(f->metadata().at("format"), "pt");

  const st_tensor* ta = f->find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, st_dtype::f32);
  EXPECT_EQ(ta->shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(ta->n_elements, 6u);
  std::vector<float> out(6);
  ASSERT_TRUE(read_floats(*ta, 0, 6, out.data()).ok());
  EXPECT_EQ(out, a);
  ASSERT_TRUE(read_floats(*ta, 4, 2, out.data()).ok());
  EXPECT_EQ(out[0], 7.f);
  EXPECT_EQ(out[1], -0.5f);

  ASSERT_TRUE(read_floats(*f->find("b"), 0, 4, out.data()).ok());
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 4),
            (std::vector<float>{1.f, -3.5f, 0.25f, 100.f}));
  ASSERT_TRUE(read_floats(*f->find("c"), 0, 2, out.data()).ok());
  EXPECT_EQ(out[0], 0.125f);
  EXPECT_EQ(out[1], -65504.f);
  ASSERT_TRUE(read_floats(*f->find("d"), 0, 2, out.data()).ok());
  EXPECT_EQ(out[0], 2.5f);
  EXPECT_EQ(out[1], static_cast<float>(-1e-3));

  EXPECT_EQ(f->find("missing"), nullptr);
  EXPECT_EQ(st_dtype_name(f->find("ids")->dtype), "I64");
}

TEST(safetensors, read_floats_refuses_integers_and_out_of_range) {
  auto bytes = make_safetensors({{"ids", "I32", {2}, as_bytes(std::vector<int32_t>{1, 2})},
                                 {"w", "F32", {2}, as_bytes(std::vector<float>{1, 2})}});
  auto f = safetensors_file::parse(bytes, "t.safetensors");
  ASSERT_TRUE(f.ok()) << f.message();
  float out[4];
  auto s = read_floats(*f->find("ids"), 0, 2, out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("I32"), std::string::npos) << s.message();
  s = read_floats(*f->find("w"), 1, 2, out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("past its end"), std::string::npos) << s.message();
}

TEST(safetensors, empty_and_zero_sized_tensors_are_valid) {
  auto bytes = make_safetensors(
      {{"z", "F32", {0, 4}, {}}, {"s", "F32", {}, as_bytes(std::vector<float>{3.f})}});
  auto f = safetensors_file::parse(bytes, "t.safetensors");
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->find("z")->n_elements, 0u);
  EXPECT_EQ(f->find("s")->n_elements, 1u);  // a scalar: empty shape, one element
  auto only_meta = make_safetensors({}, {{"k", "v"}});
  EXPECT_TRUE(safetensors_file::parse(only_meta, "t.safetensors").ok());
}

TEST(safetensors, refuses_short_file) { expect_error({1, 2, 3}, "too small"); }

TEST(safetensors, refuses_header_length_past_eof) {
  auto bytes = raw_safetensors("{}", {});
  bytes[0] = 200;  // header length 200, file has 10 bytes
  expect_error(bytes, "runs past the end of the file");
}

TEST(safetensors, refuses_header_length_over_limit) {
  std::vector<uint8_t> bytes(16, 0);
  bytes[7] = 0x40;  // 2^62
  expect_error(bytes, "exceeds the limit");
}

TEST(safetensors, refuses_bad_json) {
  expect_error(raw_safetensors(R"({"a": {"dtype": "F32", )", {}), "not valid JSON");
  expect_error(raw_safetensors(R"([1, 2])", {}), "does not start with '{'");
  expect_error(raw_safetensors(R"({"a": 1})", {}), "entry is not an object");
}

TEST(safetensors, refuses_duplicate_tensor_names) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  expect_error(raw_safetensors(h, std::vector<uint8_t>(8)), "\"a\" twice");
}

TEST(safetensors, refuses_offsets_past_eof) {
  const std::string h = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  expect_error(raw_safetensors(h, std::vector<uint8_t>(12)), "run past the end of the data");
}

TEST(safetensors, refuses_overlapping_tensors) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_error(raw_safetensors(h, std::vector<uint8_t>(12)), "overlaps tensor \"a\"");
}

TEST(safetensors, refuses_holes_and_trailing_bytes) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  expect_error(raw_safetensors(h, std::vector<uint8_t>(12)),
               "hole in the data section before tensor \"b\"");
  const std::string h2 = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  expect_error(raw_safetensors(h2, std::vector<uint8_t>(8)),
               "data section is 8 bytes but the tensors cover 4");
}

TEST(safetensors, refuses_shape_dtype_mismatch) {
  const std::string h = R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
  expect_error(raw_safetensors(h, std::vector<uint8_t>(8)), "needs 12 bytes");
  const std::string h2 = R"({"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,16]}})";
  expect_error(raw_safetensors(h2, std::vector<uint8_t>(16)), "needs 8 bytes");
}

TEST(safetensors, refuses_bad_fields) {
  expect_error(raw_safetensors(R"({"w":{"dtype":"F17","shape":[1],"data_offsets":[0,4]}})",
                               std::vector<uint8_t>(4)),
               "unknown dtype \"F17\"");
  expect_error(raw_safetensors(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                               std::vector<uint8_t>(4)),
               "shape is not an array of non-negative integers");
  expect_error(raw_safetensors(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4]}})",
                               std::vector<uint8_t>(4)),
               "data_offsets is not a pair");
  expect_error(raw_safetensors(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})",
                               std::vector<uint8_t>(4)),
               "reversed");
  expect_error(
      raw_safetensors(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", std::vector<uint8_t>(4)),
      "missing string field dtype");
  expect_error(raw_safetensors(R"({"__metadata__":{"a":1}})", {}), "__metadata__ value \"a\"");
  expect_error(
      raw_safetensors(
          R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}})",
          std::vector<uint8_t>(4)),
      "overflows");
}

class safetensors_dir : public test::scratch_dir_test {};

TEST_F(safetensors_dir, opens_a_file_by_path) {
  test::write_file(dir_ / "model.safetensors",
                   make_safetensors({{"w", "F32", {2}, as_bytes(std::vector<float>{4.f, 5.f})}}));
  auto f = safetensors_file::open((dir_ / "model.safetensors").string());
  ASSERT_TRUE(f.ok()) << f.message();
  float out[2];
  ASSERT_TRUE(read_floats(*f->find("w"), 0, 2, out).ok());
  EXPECT_EQ(out[1], 5.f);
  EXPECT_EQ(*f->find("w")->file, (dir_ / "model.safetensors").string());

  test::write_file(dir_ / "short.safetensors", {1, 2});
  auto bad = safetensors_file::open((dir_ / "short.safetensors").string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("short.safetensors"), std::string::npos) << bad.message();
  EXPECT_FALSE(safetensors_file::open((dir_ / "absent.safetensors").string()).ok());
}

TEST_F(safetensors_dir, sharded_model_through_index) {
  test::write_file(dir_ / "model-00001-of-00002.safetensors",
                   make_safetensors({{"a", "F32", {1}, as_bytes(std::vector<float>{1.f})}}));
  test::write_file(dir_ / "model-00002-of-00002.safetensors",
                   make_safetensors({{"b", "F32", {1}, as_bytes(std::vector<float>{2.f})}}));
  test::write_file(dir_ / "unrelated.safetensors",  // not in the index: must not be read
                   make_safetensors({{"a", "F32", {1}, as_bytes(std::vector<float>{9.f})}}));
  test::write_text(
      dir_ / "model.safetensors.index.json",
      R"({"metadata":{"total_size":8},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
      R"("b":"model-00002-of-00002.safetensors"}})");
  auto m = safetensors_model::open_dir(dir_.string());
  ASSERT_TRUE(m.ok()) << m.message();
  ASSERT_EQ(m->tensors().size(), 2u);
  EXPECT_EQ(m->files().size(), 2u);
  float v;
  ASSERT_TRUE(read_floats(*m->find("b"), 0, 1, &v).ok());
  EXPECT_EQ(v, 2.f);
  ASSERT_TRUE(read_floats(*m->find("a"), 0, 1, &v).ok());
  EXPECT_EQ(v, 1.f);
}

TEST_F(safetensors_dir, index_errors_name_the_tensor) {
  test::write_file(dir_ / "s1.safetensors",
                   make_safetensors({{"a", "F32", {1}, as_bytes(std::vector<float>{1.f})}}));
  test::write_text(dir_ / "model.safetensors.index.json",
                   R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors"}})");
  auto m = safetensors_model::open_dir(dir_.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("tensor \"b\" is not in s1.safetensors"), std::string::npos)
      << m.message();

  test::write_text(dir_ / "model.safetensors.index.json",
                   R"({"weight_map":{"a":"../s1.safetensors"}})");
  m = safetensors_model::open_dir(dir_.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("not a file in the model directory"), std::string::npos)
      << m.message();

  test::write_text(dir_ / "model.safetensors.index.json", R"({"weight_map": [1]})");
  m = safetensors_model::open_dir(dir_.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("weight_map"), std::string::npos) << m.message();
}

TEST_F(safetensors_dir, all_files_without_index_and_duplicates_refused) {
  auto m = safetensors_model::open_dir(dir_.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("no *.safetensors files"), std::string::npos) << m.message();

  test::write_file(dir_ / "x.safetensors",
                   make_safetensors({{"a", "F32", {1}, as_bytes(std::vector<float>{1.f})}}));
  test::write_file(dir_ / "y.safetensors",
                   make_safetensors({{"b", "F16", {1}, as_bytes(std::vector<uint16_t>{0})}}));
  m = safetensors_model::open_dir(dir_.string());
  ASSERT_TRUE(m.ok()) << m.message();
  ASSERT_EQ(m->tensors().size(), 2u);
  EXPECT_EQ(m->tensors()[0]->name, "a");

  test::write_file(dir_ / "z.safetensors",
                   make_safetensors({{"a", "F32", {1}, as_bytes(std::vector<float>{2.f})}}));
  m = safetensors_model::open_dir(dir_.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("tensor \"a\" appears in both"), std::string::npos) << m.message();
}

}  // namespace
}  // namespace tandem
