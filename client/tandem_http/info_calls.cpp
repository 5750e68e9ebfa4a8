// /health uses hello, the cheapest op: it answers even while every model is busy, so a slow
// generation does not make the front look dead.
#include "info_calls.h"

#include <boost/asio/steady_timer.hpp>

#include <chrono>

#include "metrics/exposition.h"
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

namespace {

// One scrape. `metrics` is main()'s and outlives every connection; the text is rendered when the
// answer goes out, so it is current then.
struct metrics_scrape {
  asio::steady_timer timer;
  std::shared_ptr<response_sink> sink;
  const http_metrics& metrics;
  std::size_t open_connections;
  std::uint64_t id = 0;

  void answer(const std::string* daemon_text) {
    if (!sink) return;
    timer.cancel();
    std::string body = daemon_text ? *daemon_text : std::string();
    body += metrics.render(daemon_text != nullptr, open_connections);
    std::exchange(sink, nullptr)->send_text(bhttp::status::ok, metrics::exposition_content_type, std::move(body));
  }
};

}  // namespace

void serve_metrics(asio::io_context& io, daemon_link& link, std::shared_ptr<response_sink> sink,
                   const http_metrics& metrics, std::size_t open_connections) {
  auto scrape = std::make_shared<metrics_scrape>(metrics_scrape{asio::steady_timer(io), std::move(sink), metrics,
                                                                open_connections, 0});
  scrape->id = link.submit({{"op", "metrics"}}, [scrape](const json& reply) {
    const json* text = nullptr;
    if (reply.contains("result") && reply["result"].is_object()) {
      const auto& r = reply["result"];
      if (r.contains("text") && r["text"].is_string()) text = &r["text"];
    }
    if (!text) return scrape->answer(nullptr);  // down, or a tandemd without the op
    const auto& s = text->get_ref<const std::string&>();
    scrape->answer(&s);
  });
  scrape->timer.expires_after(std::chrono::milliseconds(static_cast<int>(health_wait_seconds * 1000)));
  scrape->timer.async_wait([scrape, &link](const boost::system::error_code& ec) {
    if (ec || !scrape->sink) return;
    link.forget(scrape->id, false);
    scrape->answer(nullptr);
  });
}

}  // namespace tandem::http
