// libtandem-client's connection against a scripted fake daemon: streaming, errors of each kind,
// what leaves the connection usable, timeouts, and cancel() from another thread.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "fake_daemon.h"
#include "tandem/client.h"

namespace tandem::client {
namespace {

using testing::fake_daemon;
using testing::json;
using testing::peer;
using namespace std::chrono_literals;

generate_request raw_prompt(const std::string& text) {
  generate_request r;
  r.prompt = text;
  return r;
}

// Streams "Hel", "lo" then the final result; other ops get a canned result or an error.
void standard(const json& req, peer& p) {
  const auto id = req["id"];
  const std::string op = req["op"];
  if (op == "generate") {
    if (req.value("model", "default") != "default") {
      p.send({{"id", id}, {"error", {{"code", "not_found"}, {"message", "no model named 'x'"}}}});
      return;
    }
    p.send({{"id", id}, {"chunk", "Hel"}});
    p.send({{"id", id.get<std::uint64_t>() + 100}, {"chunk", "stray"}});  // not ours: ignored
    p.send({{"id", id}, {"chunk", "lo"}});
    p.send({{"id", id}, {"result", testing::stats()}});
  } else if (op == "tokenize") {
    p.send({{"id", id}, {"result", {{"tokens", {1, 2}}, {"count", 2}}}});
  } else if (op == "models") {
    p.send({{"id", id}, {"result", {{"models", {{{"name", "default"}, {"state", "resident"}, {"n_ctx", 64}}}}}}});
  } else {
    p.send({{"id", id}, {"error", {{"code", "unknown_op"}, {"message", op}}}});
  }
}

TEST(Connection, ConnectFailuresSayWhy) {
  auto c = connection::connect("/nonexistent/dir/d.sock");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.err().kind, error_kind::connect);
  EXPECT_EQ(c.err().sys_errno, ENOENT);
  EXPECT_NE(c.err().message.find("cannot connect to /nonexistent/dir/d.sock: no such socket"), std::string::npos);
  auto l = connection::connect("/tmp/" + std::string(200, 'x'));
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.err().kind, error_kind::usage);
  EXPECT_NE(l.err().message.find("longer than"), std::string::npos);
}

TEST(Connection, GenerateStreamsAndReturnsTheResult) {
  fake_daemon d(standard);
  auto c = connection::connect(d.path());
  ASSERT_TRUE(c.ok()) << c.err().message;
  generate_request req;
  req.messages = {{"user", "hi"}};
  req.max_tokens = 4;
  std::vector<std::string> pieces, replies;
  std::uint64_t started = 0;
  stream_handlers h;
  h.on_start = [&](std::uint64_t id) { started = id; };
  h.on_text = [&](std::string_view t) { pieces.emplace_back(t); };
  h.on_reply = [&](std::string_view j) { replies.emplace_back(j); };
  auto r = c->generate(req, h);
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->text, "Hello");
  EXPECT_EQ(pieces, (std::vector<std::string>{"Hel", "lo"}));
  ASSERT_EQ(replies.size(), 3u);  // the stray chunk is not ours
  EXPECT_EQ(json::parse(replies[0]), (json{{"id", r->id}, {"chunk", "Hel"}}));
  EXPECT_EQ(json::parse(replies[2])["result"]["finish_reason"], "length");
  EXPECT_EQ(started, r->id);
  EXPECT_EQ(r->finish_reason, "length");
  EXPECT_EQ(r->generated_tokens, 2u);
  EXPECT_FALSE(r->cancel_sent);
  const auto sent = d.requests("generate").at(0);
  EXPECT_EQ(sent["max_tokens"], 4);
  EXPECT_FALSE(sent.contains("temperature"));
  // Ids are fresh per request on the connection.
  auto again = c->generate(req);
  ASSERT_TRUE(again.ok());
  EXPECT_GT(again->id, r->id);
}

TEST(Connection, DaemonErrorsKeepTheConnectionUsable) {
  fake_daemon d(standard);
  auto c = connection::connect(d.path());
  ASSERT_TRUE(c.ok());
  generate_request req;
  req.model = "x";
  req.prompt = "p";
  auto r = c->generate(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().kind, error_kind::daemon);
  EXPECT_EQ(r.err().code, "not_found");
  EXPECT_EQ(to_string(r.err()), "not_found: no model named 'x'");
  EXPECT_TRUE(c->usable());
  auto s = c->status();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.err().code, "unknown_op");
  auto t = c->tokenize({"", "Hi", true});
  ASSERT_TRUE(t.ok()) << t.err().message;
  EXPECT_EQ(t->tokens, (std::vector<std::int32_t>{1, 2}));
  auto m = c->models();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->models.at(0).n_ctx, 64u);
}

TEST(Connection, NilIdErrorIsTheDaemonsWord) {
  fake_daemon d([](const json&, peer& p) {
    p.send({{"id", nullptr}, {"error", {{"code", "forbidden"}, {"message", "not allowed: uid 1"}}}});
    p.close();
  });
  auto c = connection::connect(d.path());
  ASSERT_TRUE(c.ok());
  auto r = c->status();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().kind, error_kind::daemon);
  EXPECT_EQ(r.err().code, "forbidden");
  EXPECT_FALSE(c->usable());
}

TEST(Connection, BrokenStreamsAreIoOrProtocolErrors) {
  fake_daemon closing([](const json& req, peer& p) {
    p.send({{"id", req["id"]}, {"chunk", "partial"}});
    p.close();
  });
  auto c = connection::connect(closing.path());
  ASSERT_TRUE(c.ok());
  std::string seen;
  stream_handlers h;
  h.on_text = [&](std::string_view t) { seen += t; };
  auto r = c->generate(raw_prompt("x"), h);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().kind, error_kind::io);
  EXPECT_EQ(r.err().message, "tandemd closed the connection");
  EXPECT_EQ(seen, "partial");
  EXPECT_FALSE(c->usable());
  auto after = c->models();
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.err().kind, error_kind::io);
  EXPECT_NE(after.err().message.find("no longer usable"), std::string::npos);

  fake_daemon garbage([](const json&, peer& p) { p.raw(std::string("\0\0\0\1\xc1", 5)); });
  auto g = connection::connect(garbage.path());
  ASSERT_TRUE(g.ok());
  auto gr = g->models();
  ASSERT_FALSE(gr.ok());
  EXPECT_EQ(gr.err().kind, error_kind::protocol);
  EXPECT_FALSE(g->usable());

  fake_daemon zero([](const json&, peer& p) { p.raw(std::string("\0\0\0\0", 4)); });
  auto z = connection::connect(zero.path());
  ASSERT_TRUE(z.ok());
  auto zr = z->models();
  ASSERT_FALSE(zr.ok());
  EXPECT_EQ(zr.err().kind, error_kind::protocol);
  EXPECT_NE(zr.err().message.find("bad reply frame: frame length 0"), std::string::npos);

  fake_daemon wrong_type([](const json& req, peer& p) {
    p.send({{"id", req["id"]}, {"result", {{"models", {{{"name", 5}}}}}}});
  });
  auto w = connection::connect(wrong_type.path());
  ASSERT_TRUE(w.ok());
  auto wr = w->models();
  ASSERT_FALSE(wr.ok());
  EXPECT_EQ(wr.err().message, "model entry: 'name' is not a string");
}

TEST(Connection, TimeoutLeavesItUnusable) {
  fake_daemon silent([](const json&, peer&) {});
  auto c = connection::connect(silent.path());
  ASSERT_TRUE(c.ok());
  c->set_timeout(100ms);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c->generate(raw_prompt("x"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().kind, error_kind::timeout);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 100ms);
  EXPECT_FALSE(c->usable());
}

// Streams a chunk every 20 ms until the test's cancel arrives (or 400 chunks), on its own thread
// so that the connection's reader sees the cancel request meanwhile.
struct slow_stream {
  std::atomic<bool> cancelled{false};
  std::atomic<bool> honour{true};  // false: ignore cancels, as a wedged daemon would
  std::thread t;

  void operator()(const json& req, peer& p) {
    if (req["op"] == "cancel") {
      cancelled = true;
      p.send({{"id", req["id"]}, {"result", {{"cancelled", true}}}});
      return;
    }
    t = std::thread([this, id = req["id"], &p] {
      for (int i = 0; i < 400; ++i) {
        if (cancelled && honour) {
          p.send({{"id", id}, {"result", testing::stats("cancelled")}});
          return;
        }
        p.send({{"id", id}, {"chunk", "t "}});
        std::this_thread::sleep_for(20ms);
      }
      p.send({{"id", id}, {"result", testing::stats()}});
    });
  }
  // Ends the stream while its connection is still open (the peer must outlive the thread).
  void stop() {
    honour = true;
    cancelled = true;
    if (t.joinable()) t.join();
  }
};

TEST(Connection, CancelFromAnotherThread) {
  slow_stream s;
  fake_daemon d([&s](const json& req, peer& p) { s(req, p); });
  auto c = connection::connect(d.path());
  ASSERT_TRUE(c.ok());
  c->cancel();  // nothing runs yet: dropped, not held for the next generate
  bool told = false;
  stream_handlers h;
  h.on_cancel_sent = [&] { told = true; };
  std::thread canceller([&] {
    std::this_thread::sleep_for(150ms);
    c->cancel(12345);  // not the running request's id: ignored
    std::this_thread::sleep_for(50ms);
    c->cancel();
  });
  auto r = c->generate(raw_prompt("go"), h);
  canceller.join();
  s.stop();
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->finish_reason, "cancelled");
  EXPECT_TRUE(r->cancel_sent && told);
  EXPECT_FALSE(r->text.empty());
  const auto cancels = d.requests("cancel");
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0]["target"], r->id);
  EXPECT_TRUE(c->usable());
}

TEST(Connection, CancelGivesUpWhenTheDaemonDoesNotStop) {
  slow_stream s;
  s.honour = false;
  fake_daemon d([&s](const json& req, peer& p) { s(req, p); });
  auto c = connection::connect(d.path());
  ASSERT_TRUE(c.ok());
  std::thread canceller([&] {
    std::this_thread::sleep_for(100ms);
    c->cancel();
    std::this_thread::sleep_for(100ms);
    c->cancel();  // the second Ctrl-C
  });
  stream_handlers h;
  h.cancel_wait = 5s;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c->generate(raw_prompt("go"), h);
  canceller.join();
  s.stop();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().kind, error_kind::interrupted);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_FALSE(c->usable());
}

}  // namespace
}  // namespace tandem::client
