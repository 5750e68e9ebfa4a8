// Unit tests of the client's pure logic: where run's model and prompt come from, and which exit
// status each daemon error code maps to (both documented in tandem(1)).
#include <gtest/gtest.h>

#include "failure.h"
#include "prompt_input.h"

namespace tandem::client {
namespace {

prompt_source ok(const std::vector<std::string>& args, const std::string& flag,
                 const std::optional<std::string>& in) {
  auto r = resolve_prompt(args, flag, in);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.fail().message);
  return r.ok() ? *r : prompt_source{};
}

exit_status fails(const std::vector<std::string>& args, const std::string& flag,
                  const std::optional<std::string>& in) {
  auto r = resolve_prompt(args, flag, in);
  EXPECT_FALSE(r.ok());
  return r.ok() ? exit_status::ok : r.fail().status;
}

TEST(ResolvePrompt, TwoArgumentsAreModelAndPrompt) {
  auto s = ok({"coder", "write code"}, "", std::nullopt);
  EXPECT_EQ(s.model, "coder");
  EXPECT_EQ(s.prompt, "write code");
}

TEST(ResolvePrompt, OneArgumentWithoutStdinIsThePrompt) {
  auto s = ok({"hello"}, "", std::nullopt);
  EXPECT_EQ(s.model, "");
  EXPECT_EQ(s.prompt, "hello");
  // Empty piped input counts as nothing piped.
  EXPECT_EQ(ok({"hello"}, "", std::string()).prompt, "hello");
}

TEST(ResolvePrompt, AliasPlusPipedTextIsModelAndPrompt) {
  auto s = ok({"default"}, "", std::string("from stdin"));
  EXPECT_EQ(s.model, "default");
  EXPECT_EQ(s.prompt, "from stdin");
}

TEST(ResolvePrompt, InstructionPlusPipedTextIsJoined) {
  auto s = ok({"Summarize this:"}, "", std::string("text"));
  EXPECT_EQ(s.model, "");
  EXPECT_EQ(s.prompt, "Summarize this:\n\ntext");
  // With -m the single argument is always an instruction, even when it looks like an alias.
  auto m = ok({"translate"}, "m1", std::string("hola"));
  EXPECT_EQ(m.model, "m1");
  EXPECT_EQ(m.prompt, "translate\n\nhola");
}

TEST(ResolvePrompt, NoArgumentTakesStdin) {
  auto s = ok({}, "m1", std::string("piped"));
  EXPECT_EQ(s.model, "m1");
  EXPECT_EQ(s.prompt, "piped");
}

TEST(ResolvePrompt, UsageErrors) {
  EXPECT_EQ(fails({}, "", std::nullopt), exit_status::usage);                 // no prompt at all
  EXPECT_EQ(fails({}, "", std::string()), exit_status::usage);                // empty stdin
  EXPECT_EQ(fails({"a", "b", "c"}, "", std::nullopt), exit_status::usage);     // too many
  EXPECT_EQ(fails({"a", "b"}, "m", std::nullopt), exit_status::usage);         // model twice
  EXPECT_EQ(fails({"bad name", "x"}, "", std::nullopt), exit_status::usage);   // not an alias
  EXPECT_EQ(fails({"m", ""}, "", std::nullopt), exit_status::usage);           // empty prompt
  EXPECT_EQ(fails({"x"}, std::string(65, 'a'), std::nullopt), exit_status::usage);  // alias too long
}

TEST(StatusForCode, EveryProtocolCodeHasAStatus) {
  EXPECT_EQ(status_for_code("busy"), exit_status::busy);
  EXPECT_EQ(status_for_code("shutting_down"), exit_status::busy);
  EXPECT_EQ(status_for_code("not_found"), exit_status::not_found);
  EXPECT_EQ(status_for_code("load_failed"), exit_status::load_failed);
  EXPECT_EQ(status_for_code("forbidden"), exit_status::forbidden);
  EXPECT_EQ(status_for_code("bad_frame"), exit_status::protocol);
  for (const char* c : {"bad_request", "unknown_op", "duplicate_id", "exists", "engine_error", "internal",
                        "a_future_code"})
    EXPECT_EQ(status_for_code(c), exit_status::server_error) << c;
  EXPECT_EQ(to_int(exit_status::interrupted), 130);
  EXPECT_EQ(to_int(exit_status::no_daemon), 1);
  EXPECT_EQ(to_int(exit_status::usage), 2);  // as tandemd and tandem-model
}

}  // namespace
}  // namespace tandem::client
