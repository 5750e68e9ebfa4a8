// tandem-http's pure parts: OpenAI requests → tandemd generate requests, results → OpenAI replies,
// daemon errors → HTTP errors, routes, the HTTP counters, --listen and the command line's exit statuses.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "api_error.h"
#include "endpoint.h"
#include "http_metrics.h"
#include "listen_address.h"
#include "openai_reply.h"
#include "openai_request.h"
#include "options.h"

namespace tandem::http {
namespace {

using json = nlohmann::json;

generate_call parse_ok(api_kind kind, const json& body) {
  auto r = parse_generate(kind, body.dump());
  if (auto* e = std::get_if<api_error>(&r)) ADD_FAILURE() << body.dump() << ": " << e->message;
  return std::get_if<generate_call>(&r) ? std::get<generate_call>(r) : generate_call{};
}

api_error parse_err(api_kind kind, const std::string& body) {
  auto r = parse_generate(kind, body);
  if (std::holds_alternative<generate_call>(r)) ADD_FAILURE() << body << " was accepted";
  return std::holds_alternative<api_error>(r) ? std::get<api_error>(r) : api_error{};
}

const json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});

TEST(HttpOpenaiRequest, ChatMapsToGenerateWithMessages) {
  auto c = parse_ok(api_kind::chat, {{"model", "coder"}, {"messages", msgs}, {"temperature", 0.5}, {"top_p", 0.9},
                                     {"max_tokens", 12}, {"seed", 7}, {"stop", "END"}, {"stream", true},
                                     {"stream_options", {{"include_usage", true}}}});
  EXPECT_EQ(c.request["op"], "generate");
  EXPECT_EQ(c.request["model"], "coder");
  EXPECT_EQ(c.request["messages"], msgs);
  EXPECT_EQ(c.request["temperature"], 0.5);
  EXPECT_EQ(c.request["top_p"], 0.9);
  EXPECT_EQ(c.request["max_tokens"], 12);
  EXPECT_EQ(c.request["seed"], 7);
  EXPECT_EQ(c.request["stop"], json::array({"END"}));
  EXPECT_EQ(c.request["stream"], true);
  EXPECT_TRUE(c.stream && c.include_usage);
  EXPECT_FALSE(c.request.contains("prompt"));
}

TEST(HttpOpenaiRequest, DefaultsNullsAndUnknownFields) {
  auto c = parse_ok(api_kind::chat, {{"messages", msgs}, {"stop", nullptr}, {"temperature", nullptr},
                                     {"frequency_penalty", 1}, {"tools", json::array()}, {"n", 1}});
  EXPECT_FALSE(c.request.contains("model"));  // tandemd's default alias
  EXPECT_FALSE(c.request.contains("temperature"));
  EXPECT_FALSE(c.request.contains("stop"));
  EXPECT_EQ(c.request["max_tokens"], max_tokens_limit);  // chat: until a stop or the context
  EXPECT_EQ(c.request["stream"], false);
  auto p = parse_ok(api_kind::completion, {{"prompt", "x"}});
  EXPECT_EQ(p.request["max_tokens"], 16);  // OpenAI's default for the legacy endpoint
  EXPECT_EQ(p.request["prompt"], "x");
}

TEST(HttpOpenaiRequest, MaxCompletionTokensWinsAndLargeValuesClamp) {
  auto c = parse_ok(api_kind::chat, {{"messages", msgs}, {"max_tokens", 50}, {"max_completion_tokens", 5}});
  EXPECT_EQ(c.request["max_tokens"], 5);
  c = parse_ok(api_kind::chat, {{"messages", msgs}, {"max_tokens", 1ull << 40}});
  EXPECT_EQ(c.request["max_tokens"], max_tokens_limit);
}

TEST(HttpOpenaiRequest, ContentPartsDeveloperRoleAndNullContent) {
  json m = json::array({{{"role", "developer"}, {"content", "be brief"}},
                        {{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "a"}},
                                                                    {{"type", "text"}, {"text", "b"}}})}},
                        {{"role", "assistant"}, {"content", nullptr}}});
  auto c = parse_ok(api_kind::chat, {{"messages", m}});
  EXPECT_EQ(c.request["messages"][0]["role"], "system");
  EXPECT_EQ(c.request["messages"][1]["content"], "ab");
  EXPECT_EQ(c.request["messages"][2]["content"], "");
}

TEST(HttpOpenaiRequest, StopListsAndEcho) {
  auto c = parse_ok(api_kind::completion, {{"prompt", json::array({"p"})}, {"stop", {"a", "", "b"}}, {"echo", true}});
  EXPECT_EQ(c.request["stop"], json::array({"a", "b"}));  // an empty stop matches nothing
  EXPECT_EQ(c.echo, "p");
  EXPECT_EQ(parse_err(api_kind::completion, json{{"prompt", "p"}, {"stop", std::vector<std::string>(17, "x")}}.dump()).param, "stop");
  EXPECT_EQ(parse_err(api_kind::completion, json{{"prompt", "p"}, {"stop", std::string(257, 'x')}}.dump()).param, "stop");
}

TEST(HttpOpenaiRequest, BadInputNamesTheField) {
  struct bad {
    std::string body, param;
  };
  const std::string m = R"("messages": [{"role": "user", "content": "hi"}])";
  for (const auto& b : std::vector<bad>{{"{", ""},
                                        {"[1]", ""},
                                        {"{}", "messages"},
                                        {R"({"messages": "hi"})", "messages"},
                                        {R"({"messages": []})", "messages"},
                                        {R"({"messages": [1]})", "messages[0]"},
                                        {R"({"messages": [{"role": 1, "content": "x"}]})", "messages[0].role"},
                                        {R"({"messages": [{"role": ")" + std::string(65, 'r') + R"(", "content": "x"}]})",
                                         "messages[0].role"},  // longer than tandemd takes
                                        {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
                                        {"{" + m + R"(, "max_tokens": "x"})", "max_tokens"},
                                        {"{" + m + R"(, "max_tokens": 0})", "max_tokens"},
                                        {"{" + m + R"(, "max_tokens": -3})", "max_tokens"},
                                        {"{" + m + R"(, "max_tokens": 2.5})", "max_tokens"},
                                        {"{" + m + R"(, "temperature": 2.5})", "temperature"},
                                        {"{" + m + R"(, "temperature": "0"})", "temperature"},
                                        {"{" + m + R"(, "top_p": -1})", "top_p"},
                                        {"{" + m + R"(, "stream": 1})", "stream"},
                                        {"{" + m + R"(, "stop": {}})", "stop"},
                                        {"{" + m + R"(, "stop": [1]})", "stop"},
                                        {"{" + m + R"(, "seed": "1"})", "seed"},
                                        {"{" + m + R"(, "n": 2})", "n"},
                                        {"{" + m + R"(, "model": 3})", "model"},
                                        {"{" + m + R"(, "stream_options": true})", "stream_options"}}) {
    const auto e = parse_err(api_kind::chat, b.body);
    EXPECT_EQ(e.status, 400u) << b.body;
    EXPECT_EQ(e.type, "invalid_request_error") << b.body;
    EXPECT_EQ(e.param, b.param) << b.body;
    EXPECT_FALSE(e.message.empty()) << b.body;
  }
  EXPECT_EQ(parse_err(api_kind::completion, R"({"prompt": [1, 2]})").param, "prompt");
  EXPECT_EQ(parse_err(api_kind::completion, R"({"prompt": ["a", "b"]})").param, "prompt");
  EXPECT_EQ(parse_err(api_kind::completion, R"({"prompt": "a", "best_of": 3})").param, "best_of");
}

TEST(HttpOpenaiRequest, ImpossibleModelNameIsNotFound) {
  const auto e = parse_err(api_kind::chat, json{{"model", "org/model"}, {"messages", msgs}}.dump());
  EXPECT_EQ(e.status, 404u);
  EXPECT_EQ(e.code, "model_not_found");
}

TEST(HttpOpenaiRequest, DeepNestingIsRefusedWithoutRecursion) {
  const auto e = parse_err(api_kind::chat, std::string(100000, '['));
  EXPECT_EQ(e.status, 400u);
  EXPECT_NE(e.message.find("nests deeper"), std::string::npos);
}

const json result = {{"model", "default"}, {"finish_reason", "context_limit"}, {"prompt_tokens", 5u},
                     {"generated_tokens", 3u}, {"reused_tokens", 2u}, {"text", "abc"}};

TEST(HttpOpenaiReply, FullRepliesAndUsage) {
  generate_call chat;
  chat.kind = api_kind::chat;
  const reply_ids ids{"chatcmpl-1", 100, "default"};
  auto r = full_reply(chat, ids, result);
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "abc");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"], json({{"prompt_tokens", 5}, {"completion_tokens", 3}, {"total_tokens", 8},
                              {"prompt_tokens_details", {{"cached_tokens", 2}}}}));
  generate_call comp;
  comp.kind = api_kind::completion;
  comp.echo = "P:";
  r = full_reply(comp, ids, result);
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0]["text"], "P:abc");
}

TEST(HttpOpenaiReply, FinishReasons) {
  EXPECT_EQ(finish_reason("stop"), "stop");
  EXPECT_EQ(finish_reason("length"), "length");
  EXPECT_EQ(finish_reason("context_limit"), "length");
  EXPECT_EQ(finish_reason("cancelled"), "length");
}

TEST(HttpOpenaiReply, StreamChunks) {
  generate_call chat;
  chat.kind = api_kind::chat;
  chat.include_usage = true;
  const reply_ids ids{"chatcmpl-1", 100, "default"};
  auto first = first_chunk(chat, ids);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(first["usage"].is_null());
  EXPECT_EQ(text_chunk(chat, ids, "x")["choices"][0]["delta"], json({{"content", "x"}}));
  auto last = last_chunk(chat, ids, result);
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  auto u = usage_chunk(chat, ids, result);
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["total_tokens"], 8);
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  generate_call plain;  // without include_usage no chunk has a usage key
  EXPECT_FALSE(text_chunk(plain, ids, "x").contains("usage"));
}

TEST(HttpOpenaiReply, ModelList) {
  json models = {{"models", json::array({{{"name", "default"}, {"state", "resident"}, {"default", true}},
                                         {{"name", "coder"}, {"state", "unloaded"}}, {{"nameless", 1}}})}};
  auto l = model_list(models, 42);
  EXPECT_EQ(l["object"], "list");
  ASSERT_EQ(l["data"].size(), 2u);
  EXPECT_EQ(l["data"][1]["id"], "coder");
  EXPECT_EQ(l["data"][1]["object"], "model");
  EXPECT_EQ(l["data"][1]["created"], 42);
}

TEST(HttpApiError, DaemonCodesMapToStatuses) {
  EXPECT_EQ(from_daemon_error("not_found", "no model 'x'", "x").status, 404u);
  EXPECT_EQ(from_daemon_error("not_found", "", "x").code, "model_not_found");
  EXPECT_EQ(from_daemon_error("bad_request", "role", "").status, 400u);
  EXPECT_EQ(from_daemon_error("busy", "queue full", "").status, 503u);
  EXPECT_EQ(from_daemon_error("shutting_down", "", "").status, 503u);
  EXPECT_EQ(from_daemon_error("unavailable", "cannot connect", "").code, "daemon_unavailable");
  EXPECT_EQ(from_daemon_error("too_large", "big", "").status, 413u);
  const auto ctx = from_daemon_error("engine_error", "the prompt has 9000 tokens but the context size is 4096", "");
  EXPECT_EQ(ctx.status, 400u);
  EXPECT_EQ(ctx.code, "context_length_exceeded");
  EXPECT_EQ(from_daemon_error("engine_error", "CUDA failed", "").status, 500u);
  EXPECT_EQ(from_daemon_error("internal", "", "").status, 500u);
  const auto body = error_body(invalid_request("m", "p"));
  EXPECT_EQ(body, json({{"error", {{"message", "m"}, {"type", "invalid_request_error"}, {"param", "p"}, {"code", nullptr}}}}));
  EXPECT_EQ(from_daemon_reply(json{{"id", 1}, {"error", "garbage"}}, "").status, 500u);
}

TEST(HttpEndpoint, Routes) {
  using boost::beast::http::verb;
  bool ok = false;
  EXPECT_EQ(route(verb::post, "/v1/chat/completions", ok), endpoint::chat_completions);
  EXPECT_TRUE(ok);
  EXPECT_EQ(route(verb::get, "/v1/chat/completions", ok), endpoint::chat_completions);
  EXPECT_FALSE(ok);
  EXPECT_EQ(route(verb::post, "/v1/completions?x=1", ok), endpoint::completions);
  EXPECT_EQ(route(verb::get, "/v1/models", ok), endpoint::models);
  EXPECT_TRUE(ok);
  EXPECT_EQ(route(verb::get, "/health", ok), endpoint::health);
  EXPECT_EQ(route(verb::get, "/v1/models/", ok), endpoint::unknown);
  EXPECT_FALSE(needs_token(endpoint::health));
  EXPECT_TRUE(needs_token(endpoint::models));
  EXPECT_EQ(route(verb::get, "/metrics", ok), endpoint::metrics);
  EXPECT_TRUE(ok);
  EXPECT_EQ(route(verb::post, "/metrics", ok), endpoint::metrics);
  EXPECT_FALSE(ok);
  EXPECT_EQ(route(verb::get, "/v1/metrics", ok), endpoint::unknown);
  EXPECT_TRUE(needs_token(endpoint::metrics));
  EXPECT_EQ(endpoint_label(endpoint::metrics), "/metrics");
  EXPECT_EQ(endpoint_label(endpoint::unknown), "other");
}

TEST(HttpMetrics, CountsByEndpointAndCode) {
  http_metrics m;
  m.request_done(endpoint::chat_completions, 200);
  m.request_done(endpoint::chat_completions, 200);
  m.request_done(endpoint::unknown, 404);
  m.request_aborted(endpoint::completions);
  m.connection_refused();
  const std::string up = m.render(true, 3);
  EXPECT_NE(up.find("# TYPE tandem_http_requests_total counter\n"), std::string::npos) << up;
  EXPECT_NE(up.find("tandem_http_requests_total{endpoint=\"/v1/chat/completions\",code=\"200\"} 2\n"),
            std::string::npos) << up;
  EXPECT_NE(up.find("tandem_http_requests_total{endpoint=\"other\",code=\"404\"} 1\n"), std::string::npos);
  EXPECT_NE(up.find("tandem_http_requests_aborted_total{endpoint=\"/v1/completions\"} 1\n"), std::string::npos);
  EXPECT_NE(up.find("tandem_http_connections_refused_total 1\n"), std::string::npos);
  EXPECT_NE(up.find("tandem_http_connections 3\n"), std::string::npos);
  EXPECT_NE(up.find("\ntandem_daemon_up 1\n"), std::string::npos);
  EXPECT_NE(m.render(false, 0).find("\ntandem_daemon_up 0\n"), std::string::npos);
}

TEST(HttpListenAddress, Forms) {
  std::string why;
  auto a = parse_listen("127.0.0.1:8080", why);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 8080);
  a = parse_listen("[::1]:9", why);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->describe(), "[::1]:9");
  a = parse_listen("localhost:1", why);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "127.0.0.1");
  a = parse_listen("unix:/run/x.sock", why);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->type, listen_address::kind::unix_path);
  for (const char* bad : {"8080", "host:80", "1.2.3.4:70000", "1.2.3.4:", "unix:rel", "unix:"})
    EXPECT_FALSE(parse_listen(bad, why)) << bad;
}

int parse_status(std::vector<const char*> args) {
  args.insert(args.begin(), "tandem-http");
  return parse_options(static_cast<int>(args.size()), args.data()).exit_code;
}

TEST(HttpOptions, ExitStatusesAndToken) {
  EXPECT_EQ(parse_status({"--help"}), exit_ok);
  EXPECT_EQ(parse_status({"--version"}), exit_ok);
  EXPECT_EQ(parse_status({"--bogus"}), exit_usage);
  EXPECT_EQ(parse_status({"--listen", "x"}), exit_usage);
  EXPECT_EQ(parse_status({"--max-body", "0"}), exit_usage);
  EXPECT_EQ(parse_status({"--log-level", "loud"}), exit_usage);
  EXPECT_EQ(parse_status({"--token-file", "/nonexistent/token"}), exit_usage);
  const std::string path = testing::TempDir() + "tandem_http_token";
  std::ofstream(path) << "  s3cret \n";
  const char* argv[] = {"tandem-http", "--token-file", path.c_str(), "--max-body", "2MiB"};
  auto o = parse_options(5, argv);
  EXPECT_FALSE(o.exit_now);
  EXPECT_EQ(o.options.token, "s3cret");
  EXPECT_EQ(o.options.max_body, 2u << 20);
  EXPECT_EQ(o.options.socket, "/run/tandem/tandemd.sock");
  std::ofstream(path) << "\n";
  EXPECT_EQ(parse_status({"--token-file", path.c_str()}), exit_usage);  // an empty token
  std::remove(path.c_str());
}

// Socket activation overrides --listen; the server says so only when --listen was given.
TEST(HttpOptions, RemembersWhetherListenWasGiven) {
  const char* plain[] = {"tandem-http"};
  auto o = parse_options(1, plain);
  EXPECT_FALSE(o.options.listen_given);
  EXPECT_EQ(o.options.listen.describe(), "127.0.0.1:8080");
  const char* given[] = {"tandem-http", "--listen", "127.0.0.1:8080"};
  o = parse_options(3, given);
  EXPECT_TRUE(o.options.listen_given);
}

}  // namespace
}  // namespace tandem::http
