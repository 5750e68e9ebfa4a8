// connection: one HTTP/1.1 client. Reads a request header first, so that the token, the route
// and the size limit are decided before any body byte is buffered; then the body, each under a
// deadline; hands the request to its handler and writes the reply or event stream;
// repeats while the client keeps the connection alive. While a request is served it keeps a read
// open on the socket, so that a client that goes away is noticed and its generation cancelled.
#pragma once

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "completion_call.h"
#include "endpoint.h"
#include "http_context.h"
#include "response_sink.h"

namespace tandem::http {

class connection : public response_sink, public std::enable_shared_from_this<connection> {
 public:
  using socket_type = boost::asio::generic::stream_protocol::socket;

  connection(socket_type socket, http_context& ctx);
  ~connection() override;

  void start();

  // The server stops: an idle connection closes now, a busy one after its reply.
  void stop();

  // At exit: close now, cancelling a generation in progress.
  void abort();

  // response_sink: no-ops once the client is gone or the reply is complete.
  void send_json(boost::beast::http::status status, const nlohmann::json& body) override;
  void send_text(boost::beast::http::status status, std::string_view content_type, std::string body) override;
  void begin_events() override;
  void send_event(std::string_view event) override;
  void end_events() override;

 private:
  enum class phase { reading, handling, closing };
  enum class timer_use { reading, writing, lingering };

  void read_header();
  void on_header(const boost::system::error_code& ec);
  std::optional<api_error> admit(const boost::beast::http::request_parser<boost::beast::http::string_body>& p);
  void read_body();
  void on_body(const boost::system::error_code& ec);
  void read_failed(const boost::system::error_code& ec);
  void refuse(const api_error& e);
  void dispatch();
  void serve_generate(api_kind kind, const std::string& body);

  void watch_peer();
  void on_peer_read(const boost::system::error_code& ec, std::size_t n);
  void peer_gone();

  void write_reply();
  void flush_events();
  void on_event_write(const boost::system::error_code& ec);
  void end_request();
  void close_gracefully();
  void drain();
  void close_now();

  void arm_timer(timer_use use, double seconds);
  void cancel_timer();
  void on_timer(timer_use use);

  socket_type socket_;
  http_context& ctx_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  boost::asio::steady_timer timer_;
  std::uint64_t timer_seq_ = 0;  // bumped by every arm/cancel: a stale expiry is ignored
  phase phase_ = phase::reading;
  endpoint endpoint_ = endpoint::unknown;
  unsigned version_ = 11;
  bool keep_alive_ = false;
  bool timed_out_ = false;
  bool watching_ = false;   // a read watching for the client going away is pending
  bool want_next_ = false;  // the reply is written: read the next request once the watch ends
  bool stopping_ = false;
  bool writing_ = false;
  std::shared_ptr<completion_call> call_;
  std::shared_ptr<boost::beast::http::response<boost::beast::http::string_body>> reply_;
  // The event stream: the header, then the events gathered while a write was in flight.
  bool events_ = false, events_ended_ = false, head_sent_ = false, chunked_ = true;
  std::optional<boost::beast::http::response<boost::beast::http::empty_body>> head_;
  std::optional<boost::beast::http::response_serializer<boost::beast::http::empty_body>> head_sr_;
  std::string pending_, in_flight_;
  std::vector<char> drain_buf_;
  // For the request log.
  std::string label_;
  unsigned status_ = 0;
  std::chrono::steady_clock::time_point began_;
};

}  // namespace tandem::http
