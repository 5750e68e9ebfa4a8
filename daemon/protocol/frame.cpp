// Frame encoding and the incremental, fail-stop frame decoder.
#include "protocol/frame.h"

#include <limits>

namespace tandem::proto {

std::string encode_frame(std::string_view body) {
  const auto n = static_cast<std::uint32_t>(body.size());
  std::string out;
  out.reserve(frame_header_size + body.size());
  out.push_back(static_cast<char>((n >> 24) & 0xFF));
  out.push_back(static_cast<char>((n >> 16) & 0xFF));
  out.push_back(static_cast<char>((n >> 8) & 0xFF));
  out.push_back(static_cast<char>(n & 0xFF));
  out.append(body);
  return out;
}

frame_decoder::frame_decoder(std::uint32_t max_frame) : max_frame_(max_frame) {}

void frame_decoder::feed(std::string_view bytes) {
  if (failed_) return;
  buf_.append(bytes);
  check_header();
}

void frame_decoder::check_header() {
  if (failed_ || have_length_ || buf_.size() < frame_header_size) return;
  const auto* p = reinterpret_cast<const unsigned char*>(buf_.data());
  length_ = (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
            std::uint32_t{p[3]};
  if (length_ == 0) {
    failed_ = true;
    error_ = "frame length 0: a frame must hold one msgpack map";
  } else if (length_ > max_frame_) {
    failed_ = true;
    error_ = "frame length " + std::to_string(length_) + " exceeds the cap of " +
             std::to_string(max_frame_) + " bytes";
  } else {
    have_length_ = true;
  }
  if (failed_) {
    buf_.clear();
    buf_.shrink_to_fit();
  }
}

frame_decoder::state frame_decoder::next(std::string& out) {
  check_header();
  if (failed_) return state::failed;
  if (!have_length_ || buf_.size() < frame_header_size + length_) return state::need_more;
  out.assign(buf_, frame_header_size, length_);
  buf_.erase(0, frame_header_size + length_);
  have_length_ = false;
  check_header();
  return state::frame;
}

}  // namespace tandem::proto
