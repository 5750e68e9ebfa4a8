// The link's state machine: closed → connecting → greeting (hello, to learn max_frame) → ready;
// any error → closed, failing every waiting request. The next request connects again.
#include "daemon_link.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>

#include "api_error.h"
#include "protocol/reply.h"

namespace tandem::http {

namespace asio = boost::asio;
using json = nlohmann::json;

namespace {

// Replies may be larger than requests; the cap turns a corrupt length into an error, not an OOM.
constexpr std::uint32_t max_reply_frame = 256u << 20;

json error_reply(std::uint64_t id, const std::string& code, const std::string& message) {
  return {{"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

std::string connect_hint(const boost::system::error_code& ec) {
  if (ec == asio::error::not_found || ec.value() == ENOENT) return "no such socket (is tandemd running?)";
  if (ec == asio::error::connection_refused) return "connection refused (tandemd is not running)";
  if (ec == asio::error::access_denied || ec.value() == EPERM)
    return "permission denied (is tandem-http's user in the socket's group, e.g. 'tandem'?)";
  return ec.message();
}

}  // namespace

daemon_link::daemon_link(asio::io_context& io, std::string socket_path, const logger& log)
    : io_(io), path_(std::move(socket_path)), log_(log), socket_(io), decoder_(max_reply_frame) {}

std::uint64_t daemon_link::submit(json request, reply_handler on_reply) {
  const auto id = ++last_id_;
  request["id"] = id;
  handlers_.emplace(id, std::move(on_reply));
  if (state_ == link_state::ready) {
    send(id, request);
  } else {
    queued_.emplace_back(id, std::move(request));
    if (state_ == link_state::closed) connect();
  }
  return id;
}

void daemon_link::forget(std::uint64_t id, bool send_cancel) {
  if (handlers_.erase(id) == 0) return;
  const auto q = std::find_if(queued_.begin(), queued_.end(), [id](const auto& e) { return e.first == id; });
  if (q != queued_.end()) {
    queued_.erase(q);  // never sent: nothing to cancel
    return;
  }
  // The cancel's own reply finds no handler and is dropped, as is the target's final reply.
  if (send_cancel && state_ == link_state::ready) {
    const auto cancel_id = ++last_id_;
    send(cancel_id, {{"id", cancel_id}, {"op", "cancel"}, {"target", id}});
  }
}

void daemon_link::close() { broken(link_unavailable, "tandem-http is shutting down"); }

void daemon_link::connect() {
  state_ = link_state::connecting;
  socket_ = asio::local::stream_protocol::socket(io_);
  socket_.async_connect(asio::local::stream_protocol::endpoint(path_),
                        [this, epoch = epoch_](const boost::system::error_code& ec) { on_connect(ec, epoch); });
}

void daemon_link::on_connect(const boost::system::error_code& ec, std::uint64_t epoch) {
  if (epoch != epoch_) return;
  if (ec) {
    broken(link_unavailable, "cannot connect to tandemd at " + path_ + ": " + connect_hint(ec));
    return;
  }
  log_.log(log_level::debug, "connected to tandemd at ", path_);
  state_ = link_state::greeting;
  decoder_ = proto::frame_decoder(max_reply_frame);
  hello_id_ = ++last_id_;
  out_.push_back(proto::pack_frame({{"id", hello_id_}, {"op", "hello"}, {"client", "tandem-http"}}));
  write_next();
  read_next();
}

void daemon_link::send(std::uint64_t id, const json& request) {
  std::string frame = proto::pack_frame(request);
  // tandemd answers an oversized frame by closing the connection, which would fail every other
  // request on this shared link: refuse it here instead.
  if (frame.size() - proto::frame_header_size > max_frame_) {
    fail(id, link_too_large,
         "the request is " + std::to_string(frame.size()) + " bytes as a tandemd frame; tandemd's max-frame is " +
             std::to_string(max_frame_));
    return;
  }
  out_.push_back(std::move(frame));
  write_next();
}

void daemon_link::write_next() {
  if (writing_ || out_.empty()) return;
  writing_ = true;
  asio::async_write(socket_, asio::buffer(out_.front()),
                    [this, epoch = epoch_](const boost::system::error_code& ec, std::size_t) {
                      if (epoch != epoch_) return;
                      writing_ = false;
                      if (ec) return broken(link_unavailable, "writing to tandemd: " + ec.message());
                      out_.pop_front();
                      write_next();
                    });
}

void daemon_link::read_next() {
  socket_.async_read_some(asio::buffer(in_), [this, epoch = epoch_](const boost::system::error_code& ec,
                                                                    std::size_t n) { on_read(ec, n, epoch); });
}

void daemon_link::on_read(const boost::system::error_code& ec, std::size_t n, std::uint64_t epoch) {
  if (epoch != epoch_) return;
  if (ec) {
    const bool idle = handlers_.empty();
    if (idle) log_.log(log_level::info, "tandemd closed the idle connection; the next request reconnects");
    return broken(link_unavailable, ec == asio::error::eof ? "tandemd closed the connection"
                                                           : "reading from tandemd: " + ec.message());
  }
  decoder_.feed(std::string_view(in_.data(), n));
  std::string body;
  for (;;) {
    const auto st = decoder_.next(body);
    if (st == proto::frame_decoder::state::failed)
      return broken(link_unavailable, "bad frame from tandemd: " + decoder_.error_message());
    if (st == proto::frame_decoder::state::need_more) break;
    json reply = json::from_msgpack(body, true, false);
    if (reply.is_discarded() || !reply.is_object() || !reply.contains("id"))
      return broken(link_unavailable, "tandemd sent a reply that is not a map with an id");
    const auto before = epoch_;
    dispatch(reply);
    if (epoch_ != before) return;  // the reply closed the link
  }
  read_next();
}

void daemon_link::dispatch(const json& reply) {
  const json& id = reply["id"];
  if (id.is_null()) {
    // forbidden, busy (too many connections) or bad_frame: said once, then tandemd closes.
    const auto e = reply.value("error", json::object());
    return broken(e.value("code", std::string(link_unavailable)), e.value("message", std::string("tandemd closed the connection")));
  }
  if (!id.is_number_unsigned()) return;
  const auto rid = id.get<std::uint64_t>();
  if (rid == hello_id_) return on_hello(reply);
  auto it = handlers_.find(rid);
  if (it == handlers_.end()) return;  // forgotten (cancelled or timed out)
  if (reply.contains("result") || reply.contains("error")) {
    auto h = std::move(it->second);
    handlers_.erase(it);
    h(reply);
  } else {
    // A copy: the handler may forget its own id while it runs.
    auto h = it->second;
    h(reply);
  }
}

void daemon_link::on_hello(const json& reply) {
  if (!reply.contains("result") || !reply["result"].is_object()) {
    const auto e = reply.value("error", json::object());
    return broken(e.value("code", std::string(link_unavailable)), "tandemd refused hello: " + e.value("message", std::string()));
  }
  const auto& r = reply["result"];
  if (r.contains("max_frame") && r["max_frame"].is_number_unsigned())
    max_frame_ = static_cast<std::uint32_t>(std::min<std::uint64_t>(r["max_frame"].get<std::uint64_t>(), UINT32_MAX));
  state_ = link_state::ready;
  auto waiting = std::move(queued_);
  queued_.clear();
  for (auto& [id, req] : waiting) send(id, req);
}

void daemon_link::fail(std::uint64_t id, const std::string& code, const std::string& message) {
  auto it = handlers_.find(id);
  if (it == handlers_.end()) return;
  asio::post(io_, [h = std::move(it->second), reply = error_reply(id, code, message)] { h(reply); });
  handlers_.erase(it);
}

void daemon_link::broken(const std::string& code, const std::string& message) {
  if (state_ == link_state::closed) return;
  if (!handlers_.empty()) log_.log(log_level::warning, "tandemd link: ", message);
  state_ = link_state::closed;
  ++epoch_;
  boost::system::error_code ignored;
  socket_.close(ignored);
  out_.clear();
  writing_ = false;
  queued_.clear();
  auto all = std::move(handlers_);
  handlers_.clear();
  for (auto& [id, h] : all) asio::post(io_, [h = std::move(h), reply = error_reply(id, code, message)] { h(reply); });
}

}  // namespace tandem::http
