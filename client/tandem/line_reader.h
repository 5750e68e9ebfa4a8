// line_reader: reads stdin a line at a time for `tandem chat`, waking up for Ctrl-C too, so an
// interrupt at the prompt can be answered with a hint instead of killing the session.
#pragma once

#include <optional>
#include <string>

namespace tandem::client {

class line_reader {
 public:
  enum class status { line, eof, interrupted, error };

  // The next line without its newline. At end of input a last unterminated line is still a line.
  status next(std::string& line);
  const std::string& error_message() const { return error_; }

 private:
  std::string buf_;
  bool eof_ = false;
  std::string error_;
};

}  // namespace tandem::client
