// Request decoding: good requests of every op and the bad-input list (each must be a clear error).
#include <gtest/gtest.h>

#include <msgpack.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

#include "protocol/request.h"

namespace tandem::proto {
namespace {

using json = nlohmann::json;

std::string pack(const json& j) {
  std::string s;
  json::to_msgpack(j, s);
  return s;
}

decoded dec(const json& j) { return decode_request(pack(j)); }

void expect_error(const decoded& d, error_code code, const std::string& needle) {
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(to_string(d.err().code), to_string(code)) << d.err().message;
  EXPECT_NE(d.err().message.find(needle), std::string::npos) << d.err().message;
}

TEST(request, hello) {
  auto d = dec({{"id", 7}, {"op", "hello"}, {"client", "test"}});
  ASSERT_TRUE(d.ok()) << d.err().message;
  EXPECT_EQ(d.req().id, 7u);
  EXPECT_EQ(std::get<hello_request>(d.req().body).client, "test");
}

TEST(request, generate_with_all_fields) {
  auto d = dec({{"id", 1}, {"op", "generate"}, {"model", "coder"}, {"prompt", "hi"}, {"max_tokens", 5},
                {"temperature", 0}, {"top_k", 10}, {"top_p", 0.5}, {"min_p", 0.1}, {"repeat_penalty", 1.1},
                {"seed", 42}, {"stop", {"\n\n"}}, {"stream", false}});
  ASSERT_TRUE(d.ok()) << d.err().message;
  const auto& g = std::get<generate_request>(d.req().body);
  EXPECT_EQ(g.model, "coder");
  EXPECT_EQ(*g.prompt, "hi");
  EXPECT_EQ(g.max_tokens, 5u);
  EXPECT_EQ(g.sampling.temperature, 0.f);
  EXPECT_EQ(g.sampling.top_k, 10u);
  EXPECT_FLOAT_EQ(g.sampling.top_p, 0.5f);
  EXPECT_EQ(*g.sampling.seed, 42u);
  EXPECT_EQ(g.stop, std::vector<std::string>{"\n\n"});
  EXPECT_FALSE(g.stream);
}

TEST(request, generate_with_messages) {
  auto d = dec({{"id", 2}, {"op", "generate"},
                {"messages", {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "yo"}}}}});
  ASSERT_TRUE(d.ok()) << d.err().message;
  const auto& g = std::get<generate_request>(d.req().body);
  ASSERT_EQ(g.messages.size(), 2u);
  EXPECT_EQ(g.messages[1].content, "yo");
  EXPECT_TRUE(g.stream);
}

TEST(request, admin_ops) {
  auto l = dec({{"id", 3}, {"op", "load"}, {"name", "a.b:c-1"}, {"path", "/m.gguf"}, {"keep_alive", 30}});
  ASSERT_TRUE(l.ok()) << l.err().message;
  EXPECT_EQ(*std::get<load_request>(l.req().body).settings.keep_alive_s, 30.0);
  EXPECT_FALSE(std::get<load_request>(l.req().body).settings.context);  // absent: the daemon's configuration
  EXPECT_TRUE(dec({{"id", 4}, {"op", "swap"}, {"name", "x"}, {"path", "/m"}}).ok());
  EXPECT_TRUE(dec({{"id", 5}, {"op", "unload"}, {"name", "x"}}).ok());
  EXPECT_TRUE(dec({{"id", 6}, {"op", "models"}}).ok());
  EXPECT_TRUE(dec({{"id", 7}, {"op", "status"}}).ok());
  auto c = dec({{"id", 8}, {"op", "cancel"}, {"target", 3}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(std::get<cancel_request>(c.req().body).target, 3u);
  auto t = dec({{"id", 9}, {"op", "detokenize"}, {"tokens", {1, 2, 3}}});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(std::get<detokenize_request>(t.req().body).tokens.size(), 3u);
}

TEST(request, metrics_op) {
  auto m = dec({{"id", 10}, {"op", "metrics"}});
  ASSERT_TRUE(m.ok()) << m.err().message;
  EXPECT_TRUE(std::holds_alternative<metrics_request>(m.req().body));
  EXPECT_EQ(op_name(m.req().body), "metrics");
  // It takes no fields: a format option that does not exist is refused, not ignored.
  expect_error(dec({{"id", 11}, {"op", "metrics"}, {"format", "json"}}), error_code::bad_request, "format");
}

TEST(request, non_map_bodies_are_bad_frames) {
  expect_error(dec(json::array({1, 2})), error_code::bad_frame, "must be a msgpack map");
  expect_error(dec(42), error_code::bad_frame, "must be a msgpack map");
  expect_error(dec("str"), error_code::bad_frame, "must be a msgpack map");
}

TEST(request, malformed_and_truncated_msgpack) {
  auto body = pack({{"id", 1}, {"op", "hello"}});
  auto d = decode_request(std::string_view(body).substr(0, body.size() - 2));
  expect_error(d, error_code::bad_frame, "malformed msgpack");
  expect_error(decode_request(std::string("\xc1", 1)), error_code::bad_frame, "malformed msgpack");
  // A str header claiming 4 GiB inside a tiny body must not allocate.
  expect_error(decode_request(std::string("\x81\xdb\xff\xff\xff\xff", 6)), error_code::bad_frame,
               "malformed msgpack");
  expect_error(decode_request(body + "x"), error_code::bad_frame, "trailing bytes");
}

TEST(request, deep_nesting_is_refused) {
  json deep = 1;
  for (int i = 0; i < 100; ++i) deep = json::array({deep});
  expect_error(dec({{"id", 1}, {"op", "hello"}, {"client", deep}}), error_code::bad_frame, "nesting");
}

TEST(request, missing_or_bad_id) {
  expect_error(dec({{"op", "hello"}}), error_code::bad_request, "missing field 'id'");
  auto neg = dec({{"id", -1}, {"op", "hello"}});
  expect_error(neg, error_code::bad_request, "negative");
  EXPECT_FALSE(neg.id);
  expect_error(dec({{"id", "x"}, {"op", "hello"}}), error_code::bad_request, "unsigned integer");
  expect_error(dec({{"id", 1.5}, {"op", "hello"}}), error_code::bad_request, "unsigned integer");
}

TEST(request, errors_keep_the_id) {
  auto d = dec({{"id", 99}, {"op", "nope"}});
  expect_error(d, error_code::unknown_op, "unknown op 'nope'");
  ASSERT_TRUE(d.id);
  EXPECT_EQ(*d.id, 99u);
}

TEST(request, wrong_field_types) {
  expect_error(dec({{"id", 1}, {"op", 3}}), error_code::bad_request, "'op' must be a string");
  expect_error(dec({{"id", 1}, {"op", "generate"}, {"prompt", 5}}), error_code::bad_request, "'prompt'");
  expect_error(dec({{"id", 1}, {"op", "generate"}, {"prompt", "x"}, {"stream", "yes"}}), error_code::bad_request,
               "boolean");
  expect_error(dec({{"id", 1}, {"op", "generate"}, {"prompt", "x"}, {"stop", "x"}}), error_code::bad_request,
               "an array");
  expect_error(dec({{"id", 1}, {"op", "generate"}, {"messages", {{{"role", "user"}}}}}), error_code::bad_request,
               "missing field 'content'");
  expect_error(dec({{"id", 1}, {"op", "detokenize"}, {"tokens", {1, "a"}}}), error_code::bad_request, "tokens[1]");
}

TEST(request, negative_nan_and_huge_params) {
  const json base = {{"id", 1}, {"op", "generate"}, {"prompt", "x"}};
  auto with = [&](const char* k, json v) {
    json j = base;
    j[k] = std::move(v);
    return dec(j);
  };
  expect_error(with("max_tokens", -5), error_code::bad_request, "negative");
  expect_error(with("max_tokens", 0), error_code::bad_request, "outside");
  expect_error(with("max_tokens", 1ull << 40), error_code::bad_request, "outside");
  expect_error(with("temperature", std::numeric_limits<double>::quiet_NaN()), error_code::bad_request, "finite");
  expect_error(with("temperature", std::numeric_limits<double>::infinity()), error_code::bad_request, "finite");
  expect_error(with("temperature", -0.5), error_code::bad_request, "outside");
  expect_error(with("top_p", 1.5), error_code::bad_request, "outside");
  expect_error(with("top_k", -1), error_code::bad_request, "negative");
  expect_error(with("stop", json::array({std::string(1000, 'x')})), error_code::bad_request, "longer");
  expect_error(dec({{"id", 1}, {"op", "load"}, {"name", "x"}, {"path", "/p"}, {"keep_alive", -1}}),
               error_code::bad_request, "outside");
  expect_error(dec({{"id", 1}, {"op", "detokenize"}, {"tokens", {1ull << 33}}}), error_code::bad_request,
               "outside");
}

// The per-model options of load and swap: each read into the settings, each bad one a
// bad_request naming the field. Device lists and ratios are only strings here (the daemon parses them).
TEST(request, load_and_swap_settings) {
  const json all = {{"context", 8192}, {"kv_type", "q8_0"}, {"gpus", "0,1"}, {"split", "tensor"},
                    {"ratios", "1,2"}, {"parallel", 3}, {"keep_alive", 600}};
  for (const char* op : {"load", "swap"}) {
    json j = {{"id", 1}, {"op", op}, {"name", "big"}, {"path", "/m.gguf"}};
    j.update(all);
    auto d = dec(j);
    ASSERT_TRUE(d.ok()) << op << ": " << d.err().message;
    const model_settings& s = std::string(op) == "load" ? std::get<load_request>(d.req().body).settings
                                                        : std::get<swap_request>(d.req().body).settings;
    EXPECT_EQ(s.context, 8192u);
    EXPECT_EQ(s.kv_type, "q8_0");
    EXPECT_EQ(s.gpus, "0,1");
    EXPECT_EQ(s.split, "tensor");
    EXPECT_EQ(s.ratios, "1,2");
    EXPECT_EQ(s.parallel, 3u);
    EXPECT_EQ(s.keep_alive_s, 600.0);
  }
  const auto bad = [](const char* key, const json& value) {
    json j = {{"id", 1}, {"op", "load"}, {"name", "big"}, {"path", "/m.gguf"}};
    j[key] = value;
    return dec(j);
  };
  expect_error(bad("context", 8), error_code::bad_request, "field 'context' = 8 is outside [16, 16777216]");
  expect_error(bad("context", 1ull << 30), error_code::bad_request, "'context'");
  expect_error(bad("context", "big"), error_code::bad_request, "field 'context' must be an unsigned integer");
  expect_error(bad("kv_type", "q4_0"), error_code::bad_request, "field 'kv_type' = 'q4_0' must be f16, q8_0 or f32");
  expect_error(bad("split", "rows"), error_code::bad_request, "field 'split' = 'rows' must be layer or tensor");
  expect_error(bad("parallel", 0), error_code::bad_request, "'parallel'");
  expect_error(bad("parallel", 257), error_code::bad_request, "'parallel'");
  expect_error(bad("gpus", ""), error_code::bad_request, "field 'gpus' must not be empty");
  expect_error(bad("gpus", 1), error_code::bad_request, "field 'gpus' must be a string");
  expect_error(bad("ratios", ""), error_code::bad_request, "field 'ratios' must not be empty");
  expect_error(bad("kv-type", "f16"), error_code::bad_request, "unknown field 'kv-type'");
}

TEST(request, structural_errors) {
  expect_error(dec({{"id", 1}, {"op", "generate"}}), error_code::bad_request, "needs 'prompt' or 'messages'");
  expect_error(dec({{"id", 1}, {"op", "generate"}, {"prompt", "x"}, {"messages", {{{"role", "u"}, {"content", "c"}}}}}),
               error_code::bad_request, "not both");
  expect_error(dec({{"id", 1}, {"op", "generate"}, {"prompt", "x"}, {"temprature", 1}}), error_code::bad_request,
               "unknown field 'temprature'");
  expect_error(dec({{"id", 1}, {"op", "load"}, {"name", "bad name"}, {"path", "/p"}}), error_code::bad_request,
               "'name'");
  expect_error(dec({{"id", 1}, {"op", "load"}, {"name", "x"}, {"path", ""}}), error_code::bad_request, "empty");
  expect_error(dec({{"id", 1}, {"op", "cancel"}}), error_code::bad_request, "missing field 'target'");
}

TEST(request, duplicate_and_non_string_keys) {
  // msgpack (unlike JSON) can carry duplicate keys and integer keys: both are refused.
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(3);
  pk.pack(std::string("id")); pk.pack(1);
  pk.pack(std::string("op")); pk.pack(std::string("hello"));
  pk.pack(std::string("op")); pk.pack(std::string("status"));
  expect_error(decode_request(std::string_view(buf.data(), buf.size())), error_code::bad_request, "duplicate key");

  msgpack::sbuffer buf2;
  msgpack::packer<msgpack::sbuffer> pk2(buf2);
  pk2.pack_map(1);
  pk2.pack(1); pk2.pack(1);
  expect_error(decode_request(std::string_view(buf2.data(), buf2.size())), error_code::bad_request, "keys must be strings");
}

}  // namespace
}  // namespace tandem::proto
