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
                       std::uint32_t max_frame)
    : socket_(std::move(socket)), manager_(manager), handler_(handler), decoder_(max_frame),
      wake_writer_(socket_.get_executor()) {
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
      decoder_.feed(std::string_view(chunk.data(), n));
      for (;;) {
        const auto st = decoder_.next(body);
        if (st == proto::frame_decoder::state::need_more) break;
        if (st == proto::frame_decoder::state::failed) {
          // Framing is lost: answer once, then close after the reply is written.
          log(log_level::info, "closing a connection: ", decoder_.error_message());
          send(proto::error_frame(std::nullopt, {proto::error_code::bad_frame, decoder_.error_message()}));
          boost::system::error_code ec;
          socket_.shutdown(socket_type::shutdown_receive, ec);
          read_closed_ = true;
          cancel_all();
          finish_if_done();
          co_return;
        }
        auto decoded = proto::decode_request(body);
        if (!decoded.ok()) {
          send(proto::error_frame(decoded.id, decoded.err()));  // framing intact: keep serving
          continue;
        }
        handler_.handle(self, std::move(std::get<proto::request>(decoded.value)));
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
