// /health uses hello, the cheapest op: it answers even while every model is busy, so a slow
// generation does not make the front look dead.
#include "info_calls.h"

#include <boost/asio/steady_timer.hpp>

#include <chrono>

#include "openai_reply.h"

namespace tandem::http {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using json = nlohmann::json;

void serve_models(daemon_link& link, std::shared_ptr<response_sink> sink, std::int64_t created) {
  link.submit({{"op", "models"}}, [sink = std::move(sink), created](const json& reply) {
    if (reply.contains("result") && reply["result"].is_object())
      sink->send_json(bhttp::status::ok, model_list(reply["result"], created));
    else
      sink->send_error(from_daemon_reply(reply, ""));
  });
}

namespace {

struct health_check {
  asio::steady_timer timer;
  std::shared_ptr<response_sink> sink;
  std::uint64_t id = 0;

  void answer(bhttp::status st, const json& body) {
    if (!sink) return;
    timer.cancel();
    std::exchange(sink, nullptr)->send_json(st, body);
  }
};

}  // namespace

void serve_health(asio::io_context& io, daemon_link& link, std::shared_ptr<response_sink> sink) {
  auto check = std::make_shared<health_check>(health_check{asio::steady_timer(io), std::move(sink), 0});
  check->id = link.submit({{"op", "hello"}, {"client", "tandem-http"}}, [check](const json& reply) {
    if (reply.contains("result") && reply["result"].is_object())
      check->answer(bhttp::status::ok, {{"status", "ok"}, {"tandemd", reply["result"].value("version", "")}});
    else
      check->answer(bhttp::status::service_unavailable, error_body(from_daemon_reply(reply, "")));
  });
  check->timer.expires_after(std::chrono::milliseconds(static_cast<int>(health_wait_seconds * 1000)));
  check->timer.async_wait([check, &link](const boost::system::error_code& ec) {
    if (ec || !check->sink) return;
    link.forget(check->id, false);
    check->answer(bhttp::status::service_unavailable,
                  error_body({503, "tandemd did not answer within 2 s", "server_error", "", "daemon_unavailable"}));
  });
}

}  // namespace tandem::http
