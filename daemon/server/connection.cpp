// connection: framed reads, the write queue and per-request cancel flags.
#include "server/connection.h"

#include <poll.h>

#include "log.h"
#include "protocol/reply.h"
#include "server/connection_manager.h"
#include "server/request_handler.h"

namespace tandem::daemon {

namespace {
// A client that stops reading must not make the daemon buffer without bound.
constexpr std::size_t max_pending_output = 64u << 20;
constexpr std::size_t read_chunk = 64u << 10;
}  // namespace

connection::connection(socket_type socket, connection_manager& manager, request_handler& handler,
                       std::uint32_t max_frame, uid_t uid)
    : socket_(std::move(socket)), manager_(manager), handler_(handler), decoder_(max_frame),
      wake_writer_(socket_.get_executor()), uid_(uid) {
  wake_writer_.expires_at(asio::steady_timer::time_point::max());
}

void connection::start() {
  auto self = shared_from_this();
  asio::co_spawn(socket_.get_executor(), [self] { return self->reader(); }, asio::detached);
  asio::co_spawn(socket_.get_executor(), [self] { return self->writer(); }, asio::detached);
}

void connection::stop() {
  if (stopped_) return;
  stopped_ = true;
  manager_.charge_buffered(buffered_, 0);
  buffered_ = 0;
  cancel_all();  // a gone client's generations stop at their next token
  boost::system::error_code ec;
  socket_.shutdown(socket_type::shutdown_both, ec);
  socket_.close(ec);
  wake_writer_.cancel();
}

asio::awaitable<void> connection::reader() {
  auto self = shared_from_this();
  std::string chunk(read_chunk, '\0');
  std::string body;
  try {
    while (!stopped_) {
      const std::size_t n = co_await socket_.async_read_some(asio::buffer(chunk), asio::use_awaitable);
      if (read_closed_) break;  // expired while the read was in flight
      last_active_ = clock::now();
      if (!partial_since_) partial_since_ = last_active_;
      decoder_.feed(std::string_view(chunk.data(), n));
      for (;;) {
        const auto st = decoder_.next(body);
        if (st == proto::frame_decoder::state::need_more) break;
        if (st == proto::frame_decoder::state::failed) {
          // Framing is lost: answer once, then close after the reply is written.
          log(log_level::info, "closing a connection: ", decoder_.error_message());
          close_after(proto::error_frame(std::nullopt, {proto::error_code::bad_frame, decoder_.error_message()}));
          co_return;
        }
        partial_since_.reset();  // a frame completed: the next one's clock starts with its bytes
        if (decoder_.buffered() > 0) partial_since_ = last_active_;
        auto decoded = proto::decode_request(body);
        if (!decoded.ok()) {
          send(proto::error_frame(decoded.id, decoded.err()));  // framing intact: keep serving
          handler_.count_undecodable(decoded.err());
          continue;
        }
        handler_.handle(self, std::move(std::get<proto::request>(decoded.value)));
      }
      if (decoder_.buffered() == 0) partial_since_.reset();
      if (!account_buffered()) {
        log(log_level::warning, "closing a connection: partly received frames pass max-buffered (",
            manager_.limits().max_buffered, " bytes over all connections)");
        close_after(proto::error_frame(
            std::nullopt, {proto::error_code::busy, "the daemon holds too many partly received frames; retry later"}));
        co_return;
      }
    }
  } catch (const boost::system::system_error&) {
    // EOF or reset, below.
  }
  if (stopped_) co_return;
  // A full close shows as POLLHUP: cancel at once. A half-close (shutdown(SHUT_WR)) still wants
  // its replies: finish the requests, then close.
  pollfd p{socket_.native_handle(), POLLOUT, 0};
  if (::poll(&p, 1, 0) < 0 || (p.revents & (POLLHUP | POLLERR))) {
    manager_.stop(self);
    co_return;
  }
  read_closed_ = true;
  finish_if_done();
}

void connection::close_after(std::string frame) {
  send(std::move(frame));
  boost::system::error_code ec;
  socket_.shutdown(socket_type::shutdown_receive, ec);
  read_closed_ = true;
  cancel_all();
  finish_if_done();
}

bool connection::account_buffered() {
  const std::size_t now = decoder_.buffered();
  const bool ok = manager_.charge_buffered(buffered_, now);
  buffered_ = now;
  return ok;
}

const char* connection::expired(clock::time_point now, double frame_timeout, double idle_timeout) const {
  if (stopped_ || read_closed_) return nullptr;
  const auto secs = [&](clock::time_point t) { return std::chrono::duration<double>(now - t).count(); };
  if (frame_timeout > 0 && partial_since_ && decoder_.buffered() > 0 && secs(*partial_since_) > frame_timeout)
    return "a frame stayed incomplete past frame-timeout";
  if (idle_timeout > 0 && in_flight_.empty() && out_.empty() && !writing_ && secs(last_active_) > idle_timeout)
    return "idle past idle-timeout";
  return nullptr;
}

void connection::expire() {
  if (stopped_ || read_closed_) return;
  if (partial_since_ && decoder_.buffered() > 0) {
    close_after(proto::error_frame(std::nullopt, {proto::error_code::bad_frame, "a frame stayed incomplete past "
                                                                                "frame-timeout"}));
    return;
  }
  manager_.stop(shared_from_this());  // idle: nothing to answer
}

void connection::finish_if_done() {
  if (read_closed_ && !stopped_ && in_flight_.empty() && out_.empty() && !writing_)
    manager_.stop(shared_from_this());
}

asio::awaitable<void> connection::writer() {
  auto self = shared_from_this();
  try {
    while (!stopped_) {
      if (out_.empty()) {
        boost::system::error_code ec;
        co_await wake_writer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        continue;
      }
      const std::string frame = std::move(out_.front());
      out_.pop_front();
      out_bytes_ -= frame.size();
      writing_ = true;
      co_await asio::async_write(socket_, asio::buffer(frame), asio::use_awaitable);
      writing_ = false;
      finish_if_done();
    }
  } catch (const boost::system::system_error&) {
    manager_.stop(self);
  }
}

void connection::send(std::string frame) {
  if (stopped_) return;
  out_bytes_ += frame.size();
  out_.push_back(std::move(frame));
  if (out_bytes_ > max_pending_output) {
    log(log_level::warning, "closing a connection that does not read its replies");
    manager_.stop(shared_from_this());
    return;
  }
  wake_writer_.cancel_one();
}

connection::cancel_flag connection::begin_request(proto::request_id id) {
  auto flag = std::make_shared<std::atomic<bool>>(false);
  if (!in_flight_.emplace(id, flag).second) return nullptr;
  return flag;
}

void connection::end_request(proto::request_id id) {
  in_flight_.erase(id);
  last_active_ = clock::now();  // idle time counts from the last answer
  finish_if_done();
}

bool connection::cancel_request(proto::request_id id) {
  auto it = in_flight_.find(id);
  if (it == in_flight_.end()) return false;
  it->second->store(true);
  return true;
}

void connection::cancel_all() {
  for (auto& [id, flag] : in_flight_) flag->store(true);
}

void connection::post_send(std::string frame) {
  asio::post(socket_.get_executor(), [self = shared_from_this(), f = std::move(frame)]() mutable {
    self->send(std::move(f));
  });
}

void connection::post_final(proto::request_id id, std::string frame) {
  asio::post(socket_.get_executor(), [self = shared_from_this(), id, f = std::move(frame)]() mutable {
    self->send(std::move(f));  // queued before end_request so a half-closed client gets it
    self->end_request(id);
  });
}

}  // namespace tandem::daemon
