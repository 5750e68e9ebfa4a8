// libtandem-client against the real tandemd on the CPU backend (--gpu -1) with tiny models made by
// tandem-model: every op once, greedy determinism, cancel of a running generation, and errors.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include "tandem/client.h"

extern char** environ;

namespace tandem::client {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Runs argv with stdout and stderr into `log`; returns the pid (-1 when it cannot start).
pid_t spawn(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

int wait_exit(pid_t pid) {
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

class DaemonTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("tandem-client-daemon-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    for (auto [name, seed] : {std::pair{"a.gguf", "1"}, std::pair{"b.gguf", "7"}}) {
      const pid_t p = spawn({TANDEM_MODEL_BIN, "make", "--preset", "tiny", "--seed", seed, "-o", (dir_ / name).string()},
                            dir_ / "make.log");
      ASSERT_EQ(wait_exit(p), 0) << "tandem-model make failed; see " << dir_ / "make.log";
    }
    sock_ = (dir_ / "d.sock").string();
    pid_ = spawn({TANDEMD_BIN, "--socket", sock_, "--threads", "1", "--gpu", "-1", "--config", "/dev/null", "--model",
                  "default=" + (dir_ / "a.gguf").string()},
                 dir_ / "tandemd.log");
    ASSERT_GT(pid_, 0);
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    for (;;) {
      if (auto c = connection::connect(sock_); c.ok())
        if (auto m = c->models(); m.ok() && m->models.size() == 1 && m->models[0].state == "resident") return;
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "tandemd did not become ready; see " << dir_;
      std::this_thread::sleep_for(50ms);
    }
  }

  static void TearDownTestSuite() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      EXPECT_EQ(wait_exit(pid_), 0) << "tandemd exit status";
    }
    fs::remove_all(dir_);
  }

  connection open() {
    auto c = connection::connect(sock_);
    EXPECT_TRUE(c.ok()) << c.err().message;
    return std::move(*c);
  }

  static generate_request greedy(const std::string& prompt, std::uint32_t n = 16) {
    generate_request r;
    r.prompt = prompt;
    r.max_tokens = n;
    r.temperature = 0.0;
    return r;
  }

  static inline fs::path dir_;
  static inline std::string sock_;
  static inline pid_t pid_ = -1;
};

TEST_F(DaemonTest, HelloModelsStatus) {
  auto c = open();
  auto h = c.hello("daemon_test");
  ASSERT_TRUE(h.ok()) << h.err().message;
  EXPECT_EQ(h->server, "tandemd");
  EXPECT_EQ(h->protocol, protocol_version);
  EXPECT_GT(h->max_frame, 0u);
  auto m = c.models();
  ASSERT_TRUE(m.ok()) << m.err().message;
  ASSERT_EQ(m->models.size(), 1u);
  const auto& info = m->models[0];
  EXPECT_EQ(info.name, "default");
  EXPECT_TRUE(info.is_default);
  EXPECT_EQ(info.backend, "cpu");
  EXPECT_GT(info.n_vocab.value_or(0), 0u);
  EXPECT_GE(info.parallel.value_or(0), 1u);
  auto s = c.status();
  ASSERT_TRUE(s.ok()) << s.err().message;
  EXPECT_EQ(s->pid, pid_);
  EXPECT_GE(s->connections, 1u);
  EXPECT_GT(s->memory.rss_bytes, 0u);
  ASSERT_EQ(s->models.size(), 1u);
  EXPECT_EQ(s->models[0].path, (dir_ / "a.gguf").string());
}

TEST_F(DaemonTest, TokenizeRoundTrip) {
  auto c = open();
  auto plain = c.tokenize({"", "hello world", false});
  ASSERT_TRUE(plain.ok()) << plain.err().message;
  ASSERT_FALSE(plain->tokens.empty());
  EXPECT_EQ(plain->count, plain->tokens.size());
  auto text = c.detokenize({"default", plain->tokens});
  ASSERT_TRUE(text.ok()) << text.err().message;
  EXPECT_EQ(text->text, "hello world");
  auto bad = c.detokenize({"", {-1}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.err().kind, error_kind::daemon);
  EXPECT_EQ(bad.err().code, "bad_request");
  EXPECT_TRUE(c.usable());
}

TEST_F(DaemonTest, GenerateIsStreamedAndGreedyRepeats) {
  auto c = open();
  std::string streamed;
  stream_handlers h;
  h.on_text = [&](std::string_view t) { streamed += t; };
  auto a = c.generate(greedy("hello"), h);
  ASSERT_TRUE(a.ok()) << a.err().message;
  EXPECT_FALSE(a->text.empty());
  EXPECT_EQ(streamed, a->text);
  EXPECT_EQ(a->model, "default");
  EXPECT_TRUE(a->finish_reason == "length" || a->finish_reason == "stop") << a->finish_reason;
  EXPECT_GE(a->generated_tokens, 1u);
  EXPECT_LE(a->generated_tokens, 16u);
  EXPECT_GE(a->prompt_tokens, 1u);
  EXPECT_TRUE(a->reused_tokens.has_value());
  auto b = c.generate(greedy("hello"));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->text, a->text);
  generate_request chat;
  chat.messages = {{"user", "hello"}};
  chat.max_tokens = 4;
  auto t = c.generate(chat);
  ASSERT_TRUE(t.ok()) << t.err().message;
  EXPECT_GT(t->prompt_tokens, a->prompt_tokens);  // the chat template adds tokens
}

TEST_F(DaemonTest, CancelFromAnotherThread) {
  auto c = open();
  std::atomic<bool> first{false};
  stream_handlers h;
  h.on_text = [&](std::string_view) { first = true; };
  std::thread canceller([&] {
    while (!first) std::this_thread::sleep_for(1ms);
    c.cancel();
  });
  auto r = c.generate(greedy("long", 2000), h);
  canceller.join();
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_TRUE(r->cancel_sent);
  EXPECT_EQ(r->finish_reason, "cancelled");
  EXPECT_LT(r->generated_tokens, 2000u);
  EXPECT_TRUE(c.usable());
  auto after = c.generate(greedy("hello", 2));  // the connection goes on working
  EXPECT_TRUE(after.ok());
}

TEST_F(DaemonTest, LoadSwapUnloadAndErrors) {
  auto c = open();
  const std::string second = (dir_ / "b.gguf").string();
  auto l = c.load({"second", second, {.keep_alive_s = 600.0}});
  ASSERT_TRUE(l.ok()) << l.err().message;
  EXPECT_EQ(l->name, "second");
  EXPECT_EQ(l->path, second);
  EXPECT_GT(l->n_ctx, 0u);
  // How the load went, in the reply and, for as long as the model is resident, in status.
  ASSERT_TRUE(l->load) << l->result_json;
  EXPECT_GT(l->load->bytes, 0u);
  EXPECT_LE(l->load->bytes, l->file_bytes);
  EXPECT_GT(l->load->seconds, 0.0);
  EXPECT_NEAR(l->load->bytes_per_second, l->load->bytes / l->load->seconds, 1e-6 * l->load->bytes_per_second);
  auto st = c.status();
  ASSERT_TRUE(st.ok()) << st.err().message;
  EXPECT_TRUE(st->loads.empty()) << st->result_json;  // nothing loads now
  bool listed = false;
  for (const auto& m : st->models)
    if (m.name == "second") {
      ASSERT_TRUE(m.load) << st->result_json;
      EXPECT_EQ(m.load->bytes, l->load->bytes);
      EXPECT_DOUBLE_EQ(m.load->seconds, l->load->seconds);
      listed = true;
    }
  EXPECT_TRUE(listed) << st->result_json;
  auto twice = c.load({"second", second, {}});
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.err().code, "exists");
  auto g = c.generate([] {
    auto r = greedy("hello", 2);
    r.model = "second";
    return r;
  }());
  ASSERT_TRUE(g.ok()) << g.err().message;
  EXPECT_EQ(g->model, "second");
  auto u = c.unload("second");
  ASSERT_TRUE(u.ok()) << u.err().message;
  EXPECT_EQ(u->name, "second");
  auto gone = c.tokenize({"second", "hi", true});
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.err().code, "not_found");
  auto swapped = c.swap({"default", second});
  ASSERT_TRUE(swapped.ok()) << swapped.err().message;
  EXPECT_EQ(swapped->path, second);
  auto back = c.swap({"default", (dir_ / "a.gguf").string()});
  ASSERT_TRUE(back.ok()) << back.err().message;
  auto failed = c.swap({"default", (dir_ / "missing.gguf").string()});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.err().code, "load_failed");
  auto m = c.models();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->models.at(0).path, (dir_ / "a.gguf").string());  // the old model keeps serving
}

}  // namespace
}  // namespace tandem::client
