// The connection's life: reading → handling → reading ... → closing. One timer serves the phase
// at hand: the request deadline while reading, a stall limit while a write is in flight, the
// lingering close at the end.
#include "connection.h"

#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include "connection_manager.h"
#include "info_calls.h"
#include "openai_reply.h"

namespace tandem::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using json = nlohmann::json;

namespace {

// Bytes a client may pipeline while its request is served; past this the watch read stops.
constexpr std::size_t max_pipelined = 64u << 10;
// Events waiting for a client that does not read; past this it counts as gone.
constexpr std::size_t max_pending_events = 8u << 20;
// A closing connection reads (and drops) what the client still sends for this long, so that the
// client reads the error reply instead of a reset.
constexpr double linger_seconds = 2.0;

// Compares without an early exit, so that timing does not reveal how much of a token matched
// (only whether the length did).
bool same_secret(std::string_view given, std::string_view token) {
  if (given.size() != token.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ token[i]);
  return diff == 0;
}

// Boost 1.74's Beast has its own string_view type.
std::string_view to_std(beast::string_view s) { return {s.data(), s.size()}; }

}  // namespace

connection::connection(socket_type socket, http_context& ctx)
    : socket_(std::move(socket)), ctx_(ctx), timer_(ctx.io) {}

connection::~connection() {
  if (call_) call_->abandon();
  ctx_.connections.remove(this);
}

void connection::start() {
  ctx_.connections.add(this);
  read_header();
}

void connection::stop() {
  stopping_ = true;
  if (phase_ == phase::reading) close_now();
}

void connection::abort() {
  if (call_) call_->abandon();
  call_.reset();
  close_now();
}

// --- reading a request ---------------------------------------------------------------------------

void connection::read_header() {
  phase_ = phase::reading;
  timed_out_ = false;
  keep_alive_ = false;  // until this request's header says otherwise
  endpoint_ = endpoint::unknown;  // until this request's header is read: counted as "other"
  parser_.emplace();
  parser_->header_limit(ctx_.options.max_header);
  parser_->body_limit(ctx_.options.max_body);
  arm_timer(timer_use::reading, ctx_.options.timeout);
  bhttp::async_read_header(socket_, buffer_, *parser_,
                           [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                             self->on_header(ec);
                           });
}

void connection::on_header(const boost::system::error_code& ec) {
  if (phase_ == phase::closing) return;
  if (ec) return read_failed(ec);
  const auto& req = parser_->get();
  began_ = std::chrono::steady_clock::now();
  label_ = std::string(req.method_string()) + " " + std::string(req.target());
  version_ = req.version();
  keep_alive_ = req.keep_alive();
  if (auto err = admit(*parser_)) return refuse(*err);
  // The body gets a deadline of its own: the header's may have been spent mostly idle.
  arm_timer(timer_use::reading, ctx_.options.timeout);
  if (!parser_->is_done() && beast::iequals(req[bhttp::field::expect], "100-continue")) {
    // curl waits for this before sending a large body; by now the body is known to be welcome.
    static constexpr std::string_view go_on = "HTTP/1.1 100 Continue\r\n\r\n";
    asio::async_write(socket_, asio::buffer(go_on.data(), go_on.size()),
                      [self = shared_from_this()](const boost::system::error_code& wec, std::size_t) {
                        if (wec) return self->close_now();
                        self->read_body();
                      });
    return;
  }
  read_body();
}

std::optional<api_error> connection::admit(const bhttp::request_parser<bhttp::string_body>& p) {
  const auto& req = p.get();
  bool method_ok = false;
  endpoint_ = route(req.method(), to_std(req.target()), method_ok);
  const std::string& token = ctx_.options.token;
  if (!token.empty() && needs_token(endpoint_)) {
    const std::string_view auth = to_std(req[bhttp::field::authorization]);
    const bool bearer = auth.size() > 7 && beast::iequals(beast::string_view(auth.data(), 7), "Bearer ");
    if (!bearer || !same_secret(auth.substr(7), token))
      return api_error{401, "Missing or invalid bearer token: send 'Authorization: Bearer TOKEN'",
                       "invalid_request_error", "", "invalid_api_key"};
  }
  if (endpoint_ == endpoint::unknown)
    return api_error{404, "Unknown request URL: " + label_, "invalid_request_error", "", "unknown_url"};
  if (!method_ok)
    return api_error{405, "Method " + std::string(req.method_string()) + " is not allowed for this URL",
                     "invalid_request_error", "", "method_not_allowed"};
  if (p.content_length() && *p.content_length() > ctx_.options.max_body)
    return api_error{413, "The request body is larger than " + std::to_string(ctx_.options.max_body) + " bytes",
                     "invalid_request_error", "", "request_too_large"};
  return std::nullopt;
}

void connection::read_body() {
  if (parser_->is_done()) return on_body({});
  bhttp::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
    self->on_body(ec);
  });
}

void connection::on_body(const boost::system::error_code& ec) {
  if (phase_ == phase::closing) return;
  if (ec) return read_failed(ec);
  cancel_timer();
  dispatch();
}

void connection::read_failed(const boost::system::error_code& ec) {
  cancel_timer();
  if (label_.empty()) {
    label_ = "(unparsed request)";
    if (parser_->is_header_done()) {
      const auto& req = parser_->get();
      label_ = std::string(req.method_string()) + " " + std::string(req.target());
    }
  }
  if (timed_out_) {
    // Silence between requests is a keep-alive ending; silence inside one is a slow client.
    if (parser_->got_some() || buffer_.size() > 0)
      return refuse({408, "The request was not received within " + json(ctx_.options.timeout).dump() + " s",
                     "invalid_request_error", "", "request_timeout"});
    return close_now();
  }
  if (ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
      ec == asio::error::operation_aborted || ec == asio::error::broken_pipe)
    return close_now();
  if (ec == bhttp::error::body_limit)
    return refuse({413, "The request body is larger than " + std::to_string(ctx_.options.max_body) + " bytes",
                   "invalid_request_error", "", "request_too_large"});
  if (ec == bhttp::error::header_limit)
    return refuse({431, "The request header is larger than " + std::to_string(ctx_.options.max_header) + " bytes",
                   "invalid_request_error", "", "header_too_large"});
  refuse(invalid_request("Malformed HTTP request: " + ec.message()));
}

// An error answered before the request was read whole: the stream position is lost, so the
// connection closes after the reply. (A request without a body, refused for its token or URL, is
// whole: that connection stays.)
void connection::refuse(const api_error& e) {
  keep_alive_ = keep_alive_ && parser_ && parser_->is_done() && !timed_out_;
  phase_ = phase::handling;
  if (began_ == std::chrono::steady_clock::time_point{}) began_ = std::chrono::steady_clock::now();
  send_error(e);
}

// --- serving it ----------------------------------------------------------------------------------

void connection::dispatch() {
  phase_ = phase::handling;
  auto req = parser_->release();
  parser_.reset();
  watch_peer();
  switch (endpoint_) {
    case endpoint::chat_completions: return serve_generate(api_kind::chat, req.body());
    case endpoint::completions: return serve_generate(api_kind::completion, req.body());
    case endpoint::models: return serve_models(ctx_.link, shared_from_this(), ctx_.started);
    case endpoint::health: return serve_health(ctx_.io, ctx_.link, shared_from_this());
    case endpoint::metrics:
      return serve_metrics(ctx_.io, ctx_.link, shared_from_this(), ctx_.metrics, ctx_.connections.size());
    case endpoint::unknown: break;
  }
  send_error({404, "Unknown request URL: " + label_, "invalid_request_error", "", "unknown_url"});
}

void connection::serve_generate(api_kind kind, const std::string& body) {
  auto parsed = parse_generate(kind, body);
  if (auto* e = std::get_if<api_error>(&parsed)) return send_error(*e);
  auto& call = std::get<generate_call>(parsed);
  reply_ids ids{ctx_.reply_id(kind == api_kind::chat ? "chatcmpl-" : "cmpl-"), static_cast<std::int64_t>(std::time(nullptr)),
                call.model.empty() ? "default" : call.model};
  call_ = std::make_shared<completion_call>(ctx_.link, shared_from_this(), std::move(call), std::move(ids));
  call_->start();
}

// Reads while the request is served: end of file or an error means the client is gone. Bytes of
// a pipelined next request are kept in buffer_ for the next read_header.
void connection::watch_peer() {
  if (watching_ || phase_ != phase::handling || buffer_.size() >= max_pipelined) return;
  watching_ = true;
  socket_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](const boost::system::error_code& ec,
                                                                             std::size_t n) {
    self->on_peer_read(ec, n);
  });
}

void connection::on_peer_read(const boost::system::error_code& ec, std::size_t n) {
  watching_ = false;
  if (!ec) buffer_.commit(n);
  if (phase_ == phase::closing) return;
  if (want_next_) {
    want_next_ = false;
    return read_header();
  }
  if (ec && ec != asio::error::operation_aborted) return peer_gone();
  watch_peer();
}

void connection::peer_gone() {
  if (phase_ == phase::closing) return;
  if (phase_ == phase::handling) ctx_.metrics.request_aborted(endpoint_);
  ctx_.log.log(log_level::info, label_, ": the client went away", call_ ? "; generation cancelled" : "");
  if (call_) call_->abandon();
  call_.reset();
  close_now();
}

// --- writing the reply ---------------------------------------------------------------------------

void connection::send_json(bhttp::status status, const json& body) {
  if (phase_ != phase::handling || reply_ || events_) return;
  send_text(status, "application/json", dump(body));
}

void connection::send_text(bhttp::status status, std::string_view content_type, std::string body) {
  if (phase_ != phase::handling || reply_ || events_) return;
  status_ = static_cast<unsigned>(status);
  reply_ = std::make_shared<bhttp::response<bhttp::string_body>>(status, version_);
  reply_->set(bhttp::field::server, "tandem-http");
  reply_->set(bhttp::field::content_type, beast::string_view(content_type.data(), content_type.size()));
  if (status == bhttp::status::unauthorized) reply_->set(bhttp::field::www_authenticate, "Bearer");
  reply_->keep_alive(keep_alive_ && !stopping_);
  reply_->body() = std::move(body);
  reply_->prepare_payload();
  write_reply();
}

void connection::write_reply() {
  writing_ = true;
  arm_timer(timer_use::writing, ctx_.options.timeout);
  bhttp::async_write(socket_, *reply_, [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
    self->writing_ = false;
    self->cancel_timer();
    if (ec) return self->peer_gone();
    self->end_request();
  });
}

void connection::begin_events() {
  if (phase_ != phase::handling || reply_ || events_) return;
  events_ = true;
  status_ = 200;
  // HTTP/1.0 has no chunked encoding: the stream then ends when the connection does.
  chunked_ = version_ >= 11;
  if (!chunked_) keep_alive_ = false;
  head_.emplace(bhttp::status::ok, version_);
  head_->set(bhttp::field::server, "tandem-http");
  head_->set(bhttp::field::content_type, "text/event-stream");
  head_->set(bhttp::field::cache_control, "no-cache");
  head_->set("X-Accel-Buffering", "no");  // a proxy in front (nginx) must not hold events back
  head_->keep_alive(keep_alive_ && !stopping_);
  if (chunked_) head_->chunked(true);
  head_sr_.emplace(*head_);
  flush_events();
}

void connection::send_event(std::string_view event) {
  if (phase_ != phase::handling || !events_ || events_ended_) return;
  pending_.append(event);
  if (pending_.size() > max_pending_events) return peer_gone();  // it stopped reading
  flush_events();
}

void connection::end_events() {
  if (phase_ != phase::handling || !events_) return;
  events_ended_ = true;
  flush_events();
}

// One write at a time; events that arrive meanwhile are written together as the next chunk.
void connection::flush_events() {
  if (writing_ || phase_ != phase::handling) return;
  auto done = [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) { self->on_event_write(ec); };
  if (!head_sent_) {
    writing_ = true;
    head_sent_ = true;
    arm_timer(timer_use::writing, ctx_.options.timeout);
    bhttp::async_write_header(socket_, *head_sr_, std::move(done));
  } else if (!pending_.empty()) {
    writing_ = true;
    in_flight_ = std::move(pending_);
    pending_.clear();
    arm_timer(timer_use::writing, ctx_.options.timeout);
    if (chunked_)
      asio::async_write(socket_, bhttp::make_chunk(asio::buffer(in_flight_)), std::move(done));
    else
      asio::async_write(socket_, asio::buffer(in_flight_), std::move(done));
  } else if (events_ended_) {
    if (!chunked_) return end_request();
    writing_ = true;
    events_ = false;  // the last chunk goes out now; nothing more is written after it
    arm_timer(timer_use::writing, ctx_.options.timeout);
    asio::async_write(socket_, bhttp::make_chunk_last(),
                      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                        self->writing_ = false;
                        self->cancel_timer();
                        if (ec) return self->peer_gone();
                        self->end_request();
                      });
  }
}

void connection::on_event_write(const boost::system::error_code& ec) {
  writing_ = false;
  cancel_timer();
  if (ec) return peer_gone();
  in_flight_.clear();
  flush_events();
}

void connection::end_request() {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began_).count();
  ctx_.log.log(log_level::info, label_, " ", status_, " ", ms, " ms", call_ ? ", " + call_->summary() : "");
  ctx_.metrics.request_done(endpoint_, status_);
  call_.reset();
  reply_.reset();
  events_ = events_ended_ = head_sent_ = false;
  head_sr_.reset();
  head_.reset();
  pending_.clear();
  in_flight_.clear();
  label_.clear();
  began_ = {};
  if (!keep_alive_ || stopping_) return close_gracefully();
  phase_ = phase::reading;
  if (watching_) {
    // The watch read must finish before the next request's read starts on the same socket.
    want_next_ = true;
    boost::system::error_code ignored;
    socket_.cancel(ignored);
    return;
  }
  read_header();
}

// --- closing -------------------------------------------------------------------------------------

void connection::close_gracefully() {
  phase_ = phase::closing;
  boost::system::error_code ignored;
  socket_.shutdown(asio::socket_base::shutdown_send, ignored);
  if (watching_) socket_.cancel(ignored);
  arm_timer(timer_use::lingering, linger_seconds);
  drain_buf_.resize(4096);
  drain();
}

// Reads until the client closes its side (or the linger time ends); closing with unread data
// would make the kernel send a reset that can destroy the reply still in flight to the client.
void connection::drain() {
  socket_.async_read_some(asio::buffer(drain_buf_), [self = shared_from_this()](const boost::system::error_code& ec,
                                                                                 std::size_t) {
    if (ec) return self->close_now();
    self->drain();
  });
}

void connection::close_now() {
  phase_ = phase::closing;
  cancel_timer();
  boost::system::error_code ignored;
  socket_.close(ignored);
}

void connection::arm_timer(timer_use use, double seconds) {
  const auto seq = ++timer_seq_;
  timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds)));
  timer_.async_wait([self = shared_from_this(), use, seq](const boost::system::error_code& ec) {
    if (!ec && seq == self->timer_seq_) self->on_timer(use);
  });
}

void connection::cancel_timer() {
  ++timer_seq_;
  timer_.cancel();
}

void connection::on_timer(timer_use use) {
  boost::system::error_code ignored;
  switch (use) {
    case timer_use::reading:
      timed_out_ = true;
      socket_.cancel(ignored);  // the read completes with operation_aborted; read_failed answers
      return;
    case timer_use::writing:
      ctx_.log.log(log_level::info, label_, ": the client stopped reading for ", ctx_.options.timeout, " s");
      return peer_gone();
    case timer_use::lingering:
      return close_now();
  }
}

}  // namespace tandem::http
