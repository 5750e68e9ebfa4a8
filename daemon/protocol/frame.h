// Frame layer of tandem-protocol(7): a u32 big-endian body length, then the body (one msgpack map).
// The length is checked against the cap before any body byte is buffered.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::proto {

inline constexpr std::uint32_t default_max_frame = 16u << 20;  // 16 MiB
inline constexpr std::size_t frame_header_size = 4;

// Prepends the big-endian length header to `body`.
std::string encode_frame(std::string_view body);

// Splits a byte stream into frame bodies. Once it has failed (length 0 or over the cap) it stays
// failed: the stream position is lost, so the connection must be closed, never resynchronised.
class frame_decoder {
 public:
  enum class state { need_more, frame, failed };

  explicit frame_decoder(std::uint32_t max_frame = default_max_frame);

  // Appends received bytes; validates the header as soon as it is complete.
  void feed(std::string_view bytes);

  // Moves the next complete body into `out` (state::frame), or says why it cannot.
  state next(std::string& out);

  bool failed() const { return failed_; }
  const std::string& error_message() const { return error_; }
  std::uint32_t max_frame() const { return max_frame_; }
  // Bytes currently held; bounded by the cap plus one read.
  std::size_t buffered() const { return buf_.size(); }

 private:
  void check_header();

  std::uint32_t max_frame_;
  std::string buf_;
  bool have_length_ = false;
  std::uint32_t length_ = 0;
  bool failed_ = false;
  std::string error_;
};

}  // namespace tandem::proto
