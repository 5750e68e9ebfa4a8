// connection: one client on the Unix socket. A reader coroutine splits frames and hands decoded
// requests to the request_handler; a writer coroutine drains the outgoing queue. Engine threads
// reach it only through post_*(), which hop onto the I/O thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
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

  connection(socket_type socket, connection_manager& manager, request_handler& handler, std::uint32_t max_frame);

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
};

}  // namespace tandem::daemon
