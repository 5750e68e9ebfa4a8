// connection: ids, the one-request-at-a-time call loop, and generate()'s stream with cancel.
#include <algorithm>

#include "reply_decoder.h"
#include "request_encoder.h"
#include "socket_channel.h"
#include "tandem/client.h"

namespace tandem::client {

using wire::steady;

// Hidden: a nested class would otherwise take the exported class's visibility.
struct __attribute__((visibility("hidden"))) connection::impl {
  std::unique_ptr<wire::socket_channel> channel;
  std::uint64_t last_id = 0;
  std::chrono::milliseconds timeout{0};
  std::optional<error> broken;  // why calls can no longer be made

  std::optional<steady::time_point> deadline() const {
    if (timeout.count() <= 0) return std::nullopt;
    return steady::now() + timeout;
  }

  // Every failure but a daemon's reply to our request leaves the stream in an unknown state.
  error fail(error e) {
    if (!broken) broken = error{error_kind::io, "", "the connection is no longer usable (" + to_string(e) + ")", 0};
    return e;
  }

  template <class T, class Decode>
  result<T> call(const std::string& frame, std::uint64_t id, Decode decode);

  result<generate_result> generate(const generate_request& request, const stream_handlers& h);
};

template <class T, class Decode>
result<T> connection::impl::call(const std::string& frame, std::uint64_t id, Decode decode) {
  if (broken) return *broken;
  if (auto e = channel->send(frame)) return fail(*e);
  const auto until = deadline();
  for (;;) {
    wire::reply r;
    auto ev = channel->next(r, until, false);
    if (!ev.ok()) return fail(ev.err());
    if (!r.id && r.has_error()) return fail(wire::daemon_error(r.map));  // forbidden, bad_frame: ours is lost
    if (r.id != id) continue;                                         // a stray reply to an earlier request
    if (r.has_error()) return wire::daemon_error(r.map);
    if (r.map.contains("result") && r.map["result"].is_object()) {
      result<T> out = decode(r.map["result"]);
      if (!out.ok()) return fail(out.err());
      return out;
    }
    if (!r.map.contains("chunk")) return fail(error{error_kind::protocol, "", "reply without result or error", 0});
  }
}

result<generate_result> connection::impl::generate(const generate_request& request, const stream_handlers& h) {
  if (broken) return *broken;
  channel->take_wakes();  // a cancel from before this call is not meant for it
  const auto id = ++last_id;
  if (auto e = channel->send(wire::encode_generate(id, request))) return fail(*e);
  if (h.on_start) h.on_start(id);
  const auto until = deadline();
  std::string text;
  bool cancel_sent = false;
  for (;;) {
    // After a cancel the daemon has cancel_wait to say something; the call's deadline still holds.
    auto wait_until = until;
    if (cancel_sent) wait_until = std::min(until.value_or(steady::time_point::max()), steady::now() + h.cancel_wait);
    wire::reply r;
    auto ev = channel->next(r, wait_until, true);
    if (!ev.ok()) {
      // Once cancelled, a generation that does not end cleanly was still stopped by the caller.
      if (cancel_sent && ev.err().kind == error_kind::timeout)
        return fail(error{error_kind::interrupted, "", "interrupted", 0});
      if (cancel_sent) return fail(error{error_kind::interrupted, "", "interrupted (" + ev.err().message + ")", 0});
      return fail(ev.err());
    }
    if (*ev == wire::socket_channel::event::wake) {
      const auto ids = channel->take_wakes();
      if (std::none_of(ids.begin(), ids.end(), [id](std::uint64_t w) { return w == 0 || w == id; })) continue;
      // A second cancel, or one the daemon is slow to honour: give up; closing the socket cancels.
      if (cancel_sent) return fail(error{error_kind::interrupted, "", "interrupted", 0});
      if (auto e = channel->send(wire::encode_cancel(++last_id, id))) return fail(*e);
      cancel_sent = true;
      if (h.on_cancel_sent) h.on_cancel_sent();
      continue;
    }
    // Past the deadline only the final reply still counts.
    if (until && steady::now() >= *until && !r.is_final())
      return fail(error{error_kind::timeout, "", "no final reply in time", 0});
    if (!r.id && r.has_error()) return fail(wire::daemon_error(r.map));
    if (r.id != id) continue;  // the cancel's own reply
    if (h.on_reply) h.on_reply(wire::json_text(r.map));
    if (r.has_error()) return wire::daemon_error(r.map);
    if (r.map.contains("chunk") && r.map["chunk"].is_string()) {
      const auto& piece = r.map["chunk"].get_ref<const std::string&>();
      text += piece;
      if (h.on_text) h.on_text(piece);
      continue;
    }
    if (!r.map.contains("result") || !r.map["result"].is_object())
      return fail(error{error_kind::protocol, "", "generate: reply without chunk, result or error", 0});
    auto out = wire::decode_generate(r.map["result"]);
    if (!out.ok()) return fail(out.err());
    out->id = id;
    out->text = std::move(text);
    out->cancel_sent = cancel_sent;
    return out;
  }
}

std::string to_string(const error& e) { return e.kind == error_kind::daemon ? e.code + ": " + e.message : e.message; }

result<connection> connection::connect(const std::string& socket_path) {
  auto ch = wire::socket_channel::open(socket_path);
  if (!ch.ok()) return ch.err();
  auto p = std::make_unique<impl>();
  p->channel = std::move(*ch);
  return connection(std::move(p));
}

connection::connection(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
connection::connection(connection&& other) noexcept = default;
connection& connection::operator=(connection&& other) noexcept = default;
connection::~connection() = default;

void connection::set_timeout(std::chrono::milliseconds timeout) { impl_->timeout = timeout; }

bool connection::usable() const { return impl_ && !impl_->broken; }

void connection::cancel() noexcept { cancel(0); }

void connection::cancel(std::uint64_t request_id) noexcept {
  if (impl_) impl_->channel->wake(request_id);
}

result<hello_reply> connection::hello(const std::string& client_name) {
  const auto id = ++impl_->last_id;
  return impl_->call<hello_reply>(wire::encode_hello(id, client_name), id, wire::decode_hello);
}

result<generate_result> connection::generate(const generate_request& request, const stream_handlers& handlers) {
  return impl_->generate(request, handlers);
}

result<tokenize_reply> connection::tokenize(const tokenize_request& request) {
  const auto id = ++impl_->last_id;
  return impl_->call<tokenize_reply>(wire::encode_tokenize(id, request), id, wire::decode_tokenize);
}

result<detokenize_reply> connection::detokenize(const detokenize_request& request) {
  const auto id = ++impl_->last_id;
  return impl_->call<detokenize_reply>(wire::encode_detokenize(id, request), id, wire::decode_detokenize);
}

result<models_reply> connection::models() {
  const auto id = ++impl_->last_id;
  return impl_->call<models_reply>(wire::encode_models(id), id, wire::decode_models);
}

result<status_reply> connection::status() {
  const auto id = ++impl_->last_id;
  return impl_->call<status_reply>(wire::encode_status(id), id, wire::decode_status);
}

result<loaded_reply> connection::load(const load_request& request) {
  const auto id = ++impl_->last_id;
  return impl_->call<loaded_reply>(wire::encode_load(id, request), id, wire::decode_loaded);
}

result<loaded_reply> connection::swap(const swap_request& request) {
  const auto id = ++impl_->last_id;
  return impl_->call<loaded_reply>(wire::encode_swap(id, request), id, wire::decode_loaded);
}

result<unload_reply> connection::unload(const std::string& name) {
  const auto id = ++impl_->last_id;
  return impl_->call<unload_reply>(wire::encode_unload(id, name), id, wire::decode_unload);
}

}  // namespace tandem::client
