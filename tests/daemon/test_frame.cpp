// Frame decoder: splitting, the cap checked before buffering, and fail-stop behaviour.
#include <gtest/gtest.h>

#include "protocol/frame.h"

namespace tandem::proto {
namespace {

std::string header(std::uint32_t n) {
  std::string h(4, '\0');
  h[0] = static_cast<char>(n >> 24);
  h[1] = static_cast<char>(n >> 16);
  h[2] = static_cast<char>(n >> 8);
  h[3] = static_cast<char>(n);
  return h;
}

TEST(frame, encode_puts_big_endian_length_first) {
  const auto f = encode_frame("abc");
  ASSERT_EQ(f.size(), 7u);
  EXPECT_EQ(f.substr(0, 4), header(3));
  EXPECT_EQ(f.substr(4), "abc");
}

TEST(frame, splits_a_stream_fed_byte_by_byte) {
  const std::string stream = encode_frame("hello") + encode_frame("x") + encode_frame("world!");
  frame_decoder d(64);
  std::vector<std::string> got;
  std::string out;
  for (char c : stream) {
    d.feed(std::string_view(&c, 1));
    while (d.next(out) == frame_decoder::state::frame) got.push_back(out);
  }
  EXPECT_EQ(got, (std::vector<std::string>{"hello", "x", "world!"}));
  EXPECT_FALSE(d.failed());
}

TEST(frame, length_zero_fails) {
  frame_decoder d(64);
  d.feed(header(0));
  std::string out;
  EXPECT_EQ(d.next(out), frame_decoder::state::failed);
  EXPECT_NE(d.error_message().find("length 0"), std::string::npos);
}

TEST(frame, max_length_fails_before_any_body_is_buffered) {
  frame_decoder d(default_max_frame);
  d.feed(header(0xFFFFFFFFu));
  EXPECT_TRUE(d.failed());
  EXPECT_EQ(d.buffered(), 0u);
  std::string out;
  EXPECT_EQ(d.next(out), frame_decoder::state::failed);
}

TEST(frame, just_over_the_cap_fails_and_the_cap_itself_passes) {
  frame_decoder over(1000);
  over.feed(header(1001));
  EXPECT_TRUE(over.failed());

  frame_decoder at(1000);
  at.feed(header(1000) + std::string(1000, 'a'));
  std::string out;
  EXPECT_EQ(at.next(out), frame_decoder::state::frame);
  EXPECT_EQ(out.size(), 1000u);
}

TEST(frame, truncated_frame_waits_for_more) {
  frame_decoder d(64);
  d.feed(header(10) + "abc");
  std::string out;
  EXPECT_EQ(d.next(out), frame_decoder::state::need_more);
  d.feed("defghij");
  EXPECT_EQ(d.next(out), frame_decoder::state::frame);
  EXPECT_EQ(out, "abcdefghij");
  d.feed(std::string("\0\0", 2));  // half a header
  EXPECT_EQ(d.next(out), frame_decoder::state::need_more);
}

TEST(frame, stays_failed_after_an_error) {
  frame_decoder d(64);
  d.feed(header(65));
  ASSERT_TRUE(d.failed());
  d.feed(encode_frame("fine"));
  std::string out;
  EXPECT_EQ(d.next(out), frame_decoder::state::failed);
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(frame, a_bad_header_after_a_good_frame_fails_after_the_good_one) {
  frame_decoder d(64);
  d.feed(encode_frame("ok") + header(0));
  std::string out;
  EXPECT_EQ(d.next(out), frame_decoder::state::frame);
  EXPECT_EQ(out, "ok");
  EXPECT_EQ(d.next(out), frame_decoder::state::failed);
}

}  // namespace
}  // namespace tandem::proto
