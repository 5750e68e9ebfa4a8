// connection: one client on the Unix socket. A reader coroutine splits frames and hands decoded
// requests to the request_handler; a writer coroutine drains the outgoing queue. Engine threads
// reach it only through post_*(), which hop onto the I/O thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>

#include "protocol/frame.h"
#include "protocol/request.h"

namespace tandem::daemon {

namespace asio = boost::asio;
class connection_manager;
class request_handler;

class connection : public std::enable_shared_from_this<connection> {
 public:
  using socket_type = asio::local::stream_protocol::socket;
  using cancel_flag = std::shared_ptr<std::atomic<bool>>;

  using clock = std::chrono::steady_clock;

  connection(socket_type socket, connection_manager& manager, request_handler& handler, std::uint32_t max_frame,
             uid_t uid);

  uid_t uid() const { return uid_; }
  // Why this connection is past a timeout (a frame incomplete for frame_timeout seconds, or no
  // request in flight and nothing read for idle_timeout), or nullptr. 0 disables either.
  const char* expired(clock::time_point now, double frame_timeout, double idle_timeout) const;
  // Answers once (bad_frame for an incomplete frame) and closes after the reply is written.
  void expire();

  void start();
  // Closes the socket and cancels this client's requests. I/O thread only.
  void stop();

  // I/O thread only.
  void send(std::string frame);
  // Starts tracking a request id; nullptr when that id is already in flight here.
  cancel_flag begin_request(proto::request_id id);
  void end_request(proto::request_id id);
  bool cancel_request(proto::request_id id);
  void cancel_all();
  std::size_t in_flight() const { return in_flight_.size(); }

  // From any thread.
  void post_send(std::string frame);
  void post_final(proto::request_id id, std::string frame);  // last reply: also ends tracking

 private:
  asio::awaitable<void> reader();
  asio::awaitable<void> writer();
  void finish_if_done();  // after a half-close: close once everything is answered
  // Stops reading: the reply already queued is written, then the socket closes.
  void close_after(std::string frame);
  // Charges the decoder's bytes to the manager's bound; false when they pass it.
  bool account_buffered();

  socket_type socket_;
  connection_manager& manager_;
  request_handler& handler_;
  proto::frame_decoder decoder_;
  asio::steady_timer wake_writer_;
  std::deque<std::string> out_;
  std::size_t out_bytes_ = 0;
  std::map<proto::request_id, cancel_flag> in_flight_;
  bool stopped_ = false;
  bool read_closed_ = false;
  bool writing_ = false;
  uid_t uid_;
  std::size_t buffered_ = 0;  // the decoder's bytes as last charged to the manager
  clock::time_point last_active_ = clock::now();       // last bytes read or request finished
  std::optional<clock::time_point> partial_since_;     // a frame begun and not complete since
};

}  // namespace tandem::daemon
