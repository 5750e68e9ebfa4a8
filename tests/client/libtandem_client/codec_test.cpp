// libtandem-client's codec without a daemon: each typed request packed into a frame and read back,
// each typed reply decoded from hand-made msgpack, and bad replies refused with a clear error.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "protocol/frame.h"
#include "reply_decoder.h"
#include "request_encoder.h"

namespace tandem::client {
namespace {

using json = nlohmann::json;

// The map inside one frame, checking the length header on the way.
json unframe(const std::string& frame) {
  EXPECT_GE(frame.size(), 4u);
  const auto* p = reinterpret_cast<const unsigned char*>(frame.data());
  const std::uint32_t n = (std::uint32_t{p[0]} << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
  EXPECT_EQ(n, frame.size() - 4);
  return json::from_msgpack(frame.substr(4));
}

std::string msgpack_of(const json& j) {
  std::string s;
  json::to_msgpack(j, s);
  return s;
}

TEST(RequestEncoder, GenerateSendsOnlyWhatIsSet) {
  generate_request r;
  r.messages = {{"system", "be brief"}, {"user", "hi"}};
  const json j = unframe(wire::encode_generate(7, r));
  EXPECT_EQ(j, (json{{"id", 7},
                     {"op", "generate"},
                     {"stream", true},
                     {"messages", {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "hi"}}}}}));
}

TEST(RequestEncoder, GenerateWithEveryOption) {
  generate_request r;
  r.model = "coder";
  r.prompt = "raw text";
  r.messages = {{"user", "ignored when a prompt is set"}};
  r.max_tokens = 9;
  r.temperature = 0.0;
  r.top_k = 5;
  r.top_p = 0.5;
  r.min_p = 0.1;
  r.repeat_penalty = 1.1;
  r.seed = 1ull << 40;
  r.stop = {"x", "y"};
  const json j = unframe(wire::encode_generate(1, r));
  EXPECT_EQ(j["model"], "coder");
  EXPECT_EQ(j["prompt"], "raw text");
  EXPECT_FALSE(j.contains("messages"));
  EXPECT_EQ(j["max_tokens"], 9);
  EXPECT_TRUE(j["temperature"].is_number_float());
  EXPECT_EQ(j["temperature"], 0.0);
  EXPECT_EQ(j["top_k"], 5);
  EXPECT_EQ(j["top_p"], 0.5);
  EXPECT_DOUBLE_EQ(j["min_p"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(j["repeat_penalty"].get<double>(), 1.1);
  EXPECT_EQ(j["seed"], 1ull << 40);
  EXPECT_EQ(j["stop"], json({"x", "y"}));
}

TEST(RequestEncoder, EveryOtherOp) {
  EXPECT_EQ(unframe(wire::encode_hello(1, "me")), (json{{"id", 1}, {"op", "hello"}, {"client", "me"}}));
  EXPECT_EQ(unframe(wire::encode_cancel(3, 2)), (json{{"id", 3}, {"op", "cancel"}, {"target", 2}}));
  EXPECT_EQ(unframe(wire::encode_tokenize(4, {"", "Hi", false})),
            (json{{"id", 4}, {"op", "tokenize"}, {"text", "Hi"}, {"add_special", false}}));
  EXPECT_EQ(unframe(wire::encode_tokenize(4, {"m", "Hi", true}))["model"], "m");
  EXPECT_EQ(unframe(wire::encode_detokenize(5, {"m", {1, 2, 3}})),
            (json{{"id", 5}, {"op", "detokenize"}, {"model", "m"}, {"tokens", {1, 2, 3}}}));
  EXPECT_EQ(unframe(wire::encode_models(6)), (json{{"id", 6}, {"op", "models"}}));
  EXPECT_EQ(unframe(wire::encode_status(7)), (json{{"id", 7}, {"op", "status"}}));
  EXPECT_EQ(unframe(wire::encode_load(8, {"a", "/m.gguf", {}})),
            (json{{"id", 8}, {"op", "load"}, {"name", "a"}, {"path", "/m.gguf"}}));
  EXPECT_EQ(unframe(wire::encode_load(8, {"a", "/m.gguf", {.keep_alive_s = 60.0}}))["keep_alive"], 60.0);
  EXPECT_EQ(unframe(wire::encode_swap(9, {"a", "/n.gguf"})),
            (json{{"id", 9}, {"op", "swap"}, {"name", "a"}, {"path", "/n.gguf"}}));
  EXPECT_EQ(unframe(wire::encode_unload(10, "a")), (json{{"id", 10}, {"op", "unload"}, {"name", "a"}}));
}

// Each setting given becomes its field; those left unset are not sent, so the daemon's table for
// the alias (or its global keys) decides them.
TEST(EncodeRequest, LoadAndSwapCarryTheSettingsGiven) {
  model_settings all;
  all.context = 8192;
  all.kv_type = "q8_0";
  all.gpus = "0,1";
  all.split = "tensor";
  all.ratios = "1,2";
  all.parallel = 2;
  all.keep_alive_s = 600;
  const json want = {{"context", 8192}, {"kv_type", "q8_0"}, {"gpus", "0,1"}, {"split", "tensor"},
                     {"ratios", "1,2"}, {"parallel", 2},     {"keep_alive", 600.0}};
  for (const auto& j : {unframe(wire::encode_load(1, {"a", "/m.gguf", all})),
                        unframe(wire::encode_swap(2, {"a", "/m.gguf", all}))}) {
    for (const auto& [key, value] : want.items()) EXPECT_EQ(j.at(key), value) << key;
    EXPECT_EQ(j.size(), want.size() + 4) << j.dump();  // id, op, name, path
  }
  model_settings some;
  some.context = 512;
  const json one = unframe(wire::encode_swap(3, {"a", "/m.gguf", some}));
  EXPECT_EQ(one, (json{{"id", 3}, {"op", "swap"}, {"name", "a"}, {"path", "/m.gguf"}, {"context", 512}}));
}

TEST(ParseReply, ReadsIdAndKind) {
  auto r = wire::parse_reply(msgpack_of({{"id", 5}, {"chunk", "Hel"}}));
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->id, 5u);
  EXPECT_FALSE(r->is_final());
  r = wire::parse_reply(msgpack_of({{"id", nullptr}, {"error", {{"code", "forbidden"}, {"message", "uid 1"}}}}));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->id);
  EXPECT_TRUE(r->has_error() && r->is_final());
  const error e = wire::daemon_error(r->map);
  EXPECT_EQ(e.kind, error_kind::daemon);
  EXPECT_EQ(e.code, "forbidden");
  EXPECT_EQ(to_string(e), "forbidden: uid 1");
  // An error without a code is still an error, of the catch-all code.
  EXPECT_EQ(wire::daemon_error(json{{"id", 1}, {"error", "oops"}}).code, "internal");
}

void expect_protocol_error(std::string_view body, const std::string& words) {
  auto r = wire::parse_reply(body);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().kind, error_kind::protocol);
  EXPECT_NE(r.err().message.find(words), std::string::npos) << r.err().message;
}

TEST(ParseReply, BadBodiesAreClearErrors) {
  expect_protocol_error("\xc1", "not msgpack");                                   // a reserved byte
  expect_protocol_error(msgpack_of({{"id", 1}}) + "x", "bytes after");             // trailing bytes
  expect_protocol_error(msgpack_of(json::array({1, 2})), "not a map with an id");  // not a map
  expect_protocol_error(msgpack_of({{"result", json::object()}}), "not a map with an id");
  expect_protocol_error(msgpack_of({{"id", "one"}, {"result", json::object()}}), "id is not an unsigned");
  expect_protocol_error(msgpack_of({{"id", -1}, {"result", json::object()}}), "id is not an unsigned");
  expect_protocol_error(std::string("\x82\xa2id\x01", 5), "not msgpack");  // a map cut short
  // Nesting past the cap is refused before any parser recurses into it.
  std::string deep = "\x81\xa2id\x01";
  deep[0] = '\x82';
  deep += "\xa1x";
  deep += std::string(100000, '\x91');
  deep += '\x01';
  expect_protocol_error(deep, "nested deeper than");
}

TEST(DecodeReplies, Generate) {
  auto r = wire::decode_generate({{"model", "m"},
                                  {"finish_reason", "stop"},
                                  {"prompt_tokens", 5},
                                  {"reused_tokens", 2},
                                  {"generated_tokens", 4},
                                  {"first_token_seconds", 0.5},
                                  {"prefill_seconds", 0.25},
                                  {"decode_seconds", 1},
                                  {"prefill_tok_s", 20.0},
                                  {"decode_tok_s", 3.0},
                                  {"future_field", "kept in result_json"}});
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(r->finish_reason, "stop");
  EXPECT_EQ(r->prompt_tokens, 5u);
  EXPECT_EQ(r->reused_tokens, 2u);
  EXPECT_EQ(r->generated_tokens, 4u);
  EXPECT_DOUBLE_EQ(r->first_token_seconds, 0.5);
  EXPECT_DOUBLE_EQ(r->prefill_seconds, 0.25);
  EXPECT_DOUBLE_EQ(r->decode_seconds, 1.0);  // an integer is a number too
  EXPECT_DOUBLE_EQ(r->prefill_tok_s, 20.0);
  EXPECT_DOUBLE_EQ(r->decode_tok_s, 3.0);
  EXPECT_EQ(json::parse(r->result_json)["future_field"], "kept in result_json");
  // An older daemon's reply without reused_tokens.
  r = wire::decode_generate({{"finish_reason", "length"}});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->reused_tokens);
  EXPECT_EQ(r->generated_tokens, 0u);
}

TEST(DecodeReplies, WrongTypesNameTheField) {
  auto g = wire::decode_generate({{"generated_tokens", "four"}});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.err().kind, error_kind::protocol);
  EXPECT_EQ(g.err().message, "generate result: 'generated_tokens' is not an unsigned integer");
  auto t = wire::decode_tokenize({{"tokens", {1, -2}}});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.err().message.find("'tokens'"), std::string::npos);
  auto m = wire::decode_models({{"models", {{{"name", "a"}, {"n_ctx", 1.5}}}}});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.err().message, "model entry: 'n_ctx' is not an unsigned integer");
  auto s = wire::decode_status({{"memory", 3}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.err().message, "status result: 'memory' is not a map");
  EXPECT_FALSE(wire::decode_status({{"devices", {{{"device", "cpu"}, {"models", {1}}}}}}).ok());
  EXPECT_FALSE(wire::decode_hello({{"protocol", "one"}}).ok());
  EXPECT_FALSE(wire::decode_cancel({{"cancelled", 1}}).ok());
  EXPECT_FALSE(wire::decode_loaded({{"model", {{"n_ctx", "big"}}}}).ok());
  EXPECT_FALSE(wire::decode_unload({{"name", 3}}).ok());
  EXPECT_FALSE(wire::decode_detokenize({{"text", json::array()}}).ok());
  // The load figures and the loads in progress are checked like every other field.
  auto lf = wire::decode_models({{"models", {{{"name", "a"}, {"load", {{"bytes", -1}}}}}}});
  ASSERT_FALSE(lf.ok());
  EXPECT_EQ(lf.err().message, "model entry: 'load': 'bytes' is not an unsigned integer");
  auto lm = wire::decode_models({{"models", {{{"name", "a"}, {"load", 5}}}}});
  ASSERT_FALSE(lm.ok());
  EXPECT_EQ(lm.err().message, "model entry: 'load' is not a map");
  auto ls = wire::decode_status({{"loads", {{{"name", "a"}, {"done_bytes", "many"}}}}});
  ASSERT_FALSE(ls.ok());
  EXPECT_EQ(ls.err().message, "status: load entry: 'done_bytes' is not an unsigned integer");
  auto la = wire::decode_status({{"loads", {{"name", "a"}}}});
  ASSERT_FALSE(la.ok());
  EXPECT_EQ(la.err().message, "status result: 'loads' is not an array");
  auto ll = wire::decode_loaded({{"model", {{"load", {{"seconds", "slow"}}}}}});
  ASSERT_FALSE(ll.ok());
  EXPECT_EQ(ll.err().message, "load result: 'model': 'load': 'seconds' is not a number");
}

TEST(DecodeReplies, HelloCancelTokenizeDetokenize) {
  auto h = wire::decode_hello({{"server", "tandemd"}, {"version", "0.1.0"}, {"protocol", 1}, {"max_frame", 16777216}});
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->server, "tandemd");
  EXPECT_EQ(h->version, "0.1.0");
  EXPECT_EQ(h->protocol, 1);
  EXPECT_EQ(h->max_frame, 16777216u);
  auto c = wire::decode_cancel({{"cancelled", true}});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->cancelled);
  auto t = wire::decode_tokenize({{"tokens", {1, 72, 2147483647}}, {"count", 3}});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->tokens, (std::vector<std::int32_t>{1, 72, 2147483647}));
  EXPECT_EQ(t->count, 3u);
  auto d = wire::decode_detokenize({{"text", "Hi"}});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->text, "Hi");
}

const json resident_model = {{"name", "default"},  {"path", "/m/a.gguf"}, {"state", "resident"}, {"default", true},
                             {"queued", 2},        {"running", true},     {"keep_alive", 300},   {"swaps", 1},
                             {"arch", "qwen35"},   {"backend", "cuda"},   {"device", "cuda:0"},  {"n_vocab", 256},
                             {"n_ctx", 4096},      {"file_bytes", 100},   {"cache_bytes", 50},   {"state_bytes", 10},
                             {"bytes", 150},       {"idle_seconds", 0.0}, {"completed", 7},      {"parallel", 4},
                             {"sequences", {{"running", 1}, {"waiting", 3}}}, {"prefix_hits", 2}, {"reused_tokens", 9},
                             {"load", {{"bytes", 8000000000ull}, {"seconds", 0.5}, {"bytes_per_second", 1.6e10}}}};

TEST(DecodeReplies, ModelsResidentAndNot) {
  const json loading = {{"name", "b"},   {"path", "/b.gguf"}, {"state", "loading"}, {"default", false},
                        {"queued", 0},   {"running", false},  {"keep_alive", nullptr}, {"swaps", 0}};
  auto r = wire::decode_models({{"models", {resident_model, loading}}});
  ASSERT_TRUE(r.ok()) << r.err().message;
  ASSERT_EQ(r->models.size(), 2u);
  const auto& m = r->models[0];
  EXPECT_EQ(m.name, "default");
  EXPECT_EQ(m.path, "/m/a.gguf");
  EXPECT_EQ(m.state, "resident");
  EXPECT_TRUE(m.is_default && m.running);
  EXPECT_EQ(m.queued, 2u);
  EXPECT_EQ(m.keep_alive_s, 300.0);
  EXPECT_EQ(m.swaps, 1u);
  EXPECT_EQ(m.arch, "qwen35");
  EXPECT_EQ(m.backend, "cuda");
  EXPECT_EQ(m.device, "cuda:0");
  EXPECT_EQ(m.n_vocab, 256u);
  EXPECT_EQ(m.n_ctx, 4096u);
  EXPECT_EQ(m.file_bytes, 100u);
  EXPECT_EQ(m.cache_bytes, 50u);
  EXPECT_EQ(m.state_bytes, 10u);
  EXPECT_EQ(m.bytes, 150u);
  EXPECT_EQ(m.idle_seconds, 0.0);
  EXPECT_EQ(m.completed, 7u);
  EXPECT_EQ(m.parallel, 4u);
  ASSERT_TRUE(m.sequences);
  EXPECT_EQ(m.sequences->running, 1u);
  EXPECT_EQ(m.sequences->waiting, 3u);
  EXPECT_EQ(m.prefix_hits, 2u);
  EXPECT_EQ(m.reused_tokens, 9u);
  ASSERT_TRUE(m.load);
  EXPECT_EQ(m.load->bytes, 8000000000u);
  EXPECT_DOUBLE_EQ(m.load->seconds, 0.5);
  EXPECT_DOUBLE_EQ(m.load->bytes_per_second, 1.6e10);
  const auto& b = r->models[1];
  EXPECT_EQ(b.state, "loading");
  EXPECT_FALSE(b.keep_alive_s);  // nil reads as absent
  EXPECT_FALSE(b.arch || b.n_ctx || b.sequences || b.file_bytes || b.load);
}

TEST(DecodeReplies, Status) {
  auto r = wire::decode_status(
      {{"version", "0.1.0"},
       {"protocol", 1},
       {"pid", 4242},
       {"uptime_seconds", 12.5},
       {"draining", true},
       {"connections", 3},
       {"in_flight", 1},
       {"queued", 2},
       {"memory", {{"rss_bytes", 10}, {"model_bytes", 20}, {"budget_bytes", 30}, {"budget_used_bytes", 25}}},
       {"devices",
        {{{"device", "cuda:0+1"}, {"models", {"default"}}, {"model_bytes", 20}, {"total_bytes", 99}, {"available_bytes", 9}},
         {{"device", "cpu"}, {"models", json::array()}, {"model_bytes", 0}}}},
       {"models", {resident_model}}});
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->version, "0.1.0");
  EXPECT_EQ(r->protocol, 1);
  EXPECT_EQ(r->pid, 4242);
  EXPECT_DOUBLE_EQ(r->uptime_seconds, 12.5);
  EXPECT_TRUE(r->draining);
  EXPECT_EQ(r->connections, 3u);
  EXPECT_EQ(r->in_flight, 1u);
  EXPECT_EQ(r->queued, 2u);
  EXPECT_EQ(r->memory.rss_bytes, 10u);
  EXPECT_EQ(r->memory.model_bytes, 20u);
  EXPECT_EQ(r->memory.budget_bytes, 30u);
  EXPECT_EQ(r->memory.budget_used_bytes, 25u);
  ASSERT_EQ(r->devices.size(), 2u);
  EXPECT_EQ(r->devices[0].device, "cuda:0+1");
  EXPECT_EQ(r->devices[0].models, std::vector<std::string>{"default"});
  EXPECT_EQ(r->devices[0].total_bytes, 99u);
  EXPECT_EQ(r->devices[0].available_bytes, 9u);
  EXPECT_FALSE(r->devices[1].total_bytes);
  ASSERT_EQ(r->models.size(), 1u);
  EXPECT_EQ(r->models[0].n_ctx, 4096u);
  EXPECT_TRUE(r->loads.empty());  // an older daemon sends no `loads`
}

// status's loads in progress, from the daemon's msgpack frame body (as the connection reads it),
// with integers past 32 bits and a total the engine does not know yet.
TEST(DecodeReplies, StatusLoadsInProgress) {
  const json result = {
      {"version", "0.1.0"},
      {"models", {resident_model}},
      {"loads",
       {{{"name", "big"}, {"op", "load"}, {"path", "/m/big.gguf"}, {"done_bytes", 3100000000ull},
         {"total_bytes", 8700000000ull}, {"seconds", 0.125}, {"bytes_per_second", 2.48e10}},
        {{"name", "default"}, {"op", "swap"}, {"path", "/m/new.gguf"}, {"done_bytes", 0}, {"total_bytes", 0},
         {"seconds", 0.0}, {"bytes_per_second", 0.0}}}}};
  auto frame = wire::parse_reply(msgpack_of({{"id", 3}, {"result", result}}));
  ASSERT_TRUE(frame.ok()) << frame.err().message;
  auto r = wire::decode_status(frame->map["result"]);
  ASSERT_TRUE(r.ok()) << r.err().message;
  ASSERT_EQ(r->loads.size(), 2u);
  const auto& l = r->loads[0];
  EXPECT_EQ(l.name, "big");
  EXPECT_EQ(l.op, "load");
  EXPECT_EQ(l.path, "/m/big.gguf");
  EXPECT_EQ(l.done_bytes, 3100000000u);
  EXPECT_EQ(l.total_bytes, 8700000000u);
  EXPECT_DOUBLE_EQ(l.seconds, 0.125);
  EXPECT_DOUBLE_EQ(l.bytes_per_second, 2.48e10);
  EXPECT_EQ(r->loads[1].op, "swap");
  EXPECT_EQ(r->loads[1].total_bytes, 0u);
  ASSERT_TRUE(r->models.at(0).load);
  EXPECT_EQ(r->models[0].load->bytes, 8000000000u);
  EXPECT_EQ(json::parse(r->result_json)["loads"], result["loads"]);  // kept whole for untyped use
}

TEST(DecodeReplies, LoadedAndUnloaded) {
  auto l = wire::decode_loaded({{"name", "m2"},
                                {"model",
                                 {{"path", "/x.gguf"}, {"arch", "llama"}, {"backend", "cpu"}, {"n_vocab", 256},
                                  {"n_ctx", 128}, {"file_bytes", 1048576}, {"cache_bytes", 65536}}}});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->name, "m2");
  EXPECT_EQ(l->path, "/x.gguf");
  EXPECT_EQ(l->arch, "llama");
  EXPECT_EQ(l->backend, "cpu");
  EXPECT_EQ(l->n_vocab, 256u);
  EXPECT_EQ(l->n_ctx, 128u);
  EXPECT_EQ(l->file_bytes, 1048576u);
  EXPECT_EQ(l->cache_bytes, 65536u);
  EXPECT_FALSE(l->load);  // an older daemon's reply
  auto timed = wire::decode_loaded(
      {{"name", "m2"}, {"model", {{"path", "/x.gguf"}, {"load", {{"bytes", 1000}, {"seconds", 0.25}, {"bytes_per_second", 4000.0}}}}}});
  ASSERT_TRUE(timed.ok()) << timed.err().message;
  ASSERT_TRUE(timed->load);
  EXPECT_EQ(timed->load->bytes, 1000u);
  EXPECT_DOUBLE_EQ(timed->load->seconds, 0.25);
  EXPECT_DOUBLE_EQ(timed->load->bytes_per_second, 4000.0);
  auto u = wire::decode_unload({{"name", "m2"}});
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->name, "m2");
  EXPECT_EQ(json::parse(u->result_json), (json{{"name", "m2"}}));
}

}  // namespace
}  // namespace tandem::client
