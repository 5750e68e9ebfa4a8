// daemon_link: tandem-http's one connection to tandemd, shared by every HTTP request. Requests
// are multiplexed by id (tandem-protocol(7)) and each reply goes to the handler of its id, so one
// io_context serves all requests without a thread or a socket per request.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>

#include "logger.h"
#include "protocol/frame.h"

namespace tandem::http {

class daemon_link {
 public:
  // Called with each reply map of one request: its chunks, then the final result or error, after
  // which it is dropped. When the link fails the handler gets an error reply made here, with code
  // link_unavailable (or the daemon's code when it said why before closing). Never called from
  // inside submit() or forget().
  using reply_handler = std::function<void(const nlohmann::json& reply)>;

  daemon_link(boost::asio::io_context& io, std::string socket_path, const logger& log);
  daemon_link(const daemon_link&) = delete;
  daemon_link& operator=(const daemon_link&) = delete;

  // Sends `request` (an op map; its id is set here), connecting first when the link is down.
  std::uint64_t submit(nlohmann::json request, reply_handler on_reply);

  // Drops the handler of `id`; with send_cancel, a request already sent is also cancelled on
  // tandemd (its slot is freed at the next token).
  void forget(std::uint64_t id, bool send_cancel);

  // At shutdown: closes the socket; requests still waiting fail.
  void close();

 private:
  enum class link_state { closed, connecting, greeting, ready };

  void connect();
  void on_connect(const boost::system::error_code& ec, std::uint64_t epoch);
  void send(std::uint64_t id, const nlohmann::json& request);
  void write_next();
  void read_next();
  void on_read(const boost::system::error_code& ec, std::size_t n, std::uint64_t epoch);
  void dispatch(const nlohmann::json& reply);
  void on_hello(const nlohmann::json& reply);
  void fail(std::uint64_t id, const std::string& code, const std::string& message);
  void broken(const std::string& code, const std::string& message);

  boost::asio::io_context& io_;
  std::string path_;
  const logger& log_;
  boost::asio::local::stream_protocol::socket socket_;
  link_state state_ = link_state::closed;
  // Bumped when a socket is dropped, so that completions of the old socket's operations are ignored.
  std::uint64_t epoch_ = 0;
  std::uint64_t last_id_ = 0;
  std::uint64_t hello_id_ = 0;
  std::uint32_t max_frame_ = proto::default_max_frame;  // the daemon's, learnt from hello
  std::map<std::uint64_t, reply_handler> handlers_;
  std::deque<std::pair<std::uint64_t, nlohmann::json>> queued_;  // submitted before the link was up
  std::deque<std::string> out_;  // frames to write, front first
  bool writing_ = false;
  proto::frame_decoder decoder_;
  std::array<char, 65536> in_{};
};

}  // namespace tandem::http
