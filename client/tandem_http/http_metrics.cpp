// http_metrics: counting by endpoint path and status code (both bounded sets: the routes, and
// the codes tandem-http sends), and the text.
#include "http_metrics.h"

#include "metrics/exposition.h"

namespace tandem::http {

using metrics::metric_type;

void http_metrics::request_done(endpoint e, unsigned status) {
  requests_.at({std::string(endpoint_label(e)), std::to_string(status)}).add();
}

void http_metrics::request_aborted(endpoint e) { aborted_.at({std::string(endpoint_label(e))}).add(); }

std::string http_metrics::render(bool daemon_up, std::size_t open_connections) const {
  metrics::exposition_writer w;
  w.family("tandem_http_requests_total",
           "HTTP requests answered by tandem-http, by endpoint (other: an unknown or unreadable URL) and status code.",
           metric_type::counter);
  requests_.each([&](const metrics::label_set& l, const metrics::counter& c) {
    w.sample("tandem_http_requests_total", l, c.value());
  });
  w.family("tandem_http_requests_aborted_total",
           "HTTP requests whose client went away or stopped reading before the reply was complete.",
           metric_type::counter);
  aborted_.each([&](const metrics::label_set& l, const metrics::counter& c) {
    w.sample("tandem_http_requests_aborted_total", l, c.value());
  });
  w.family("tandem_http_connections_refused_total", "Connections refused with 503 past --max-connections.",
           metric_type::counter);
  w.sample("tandem_http_connections_refused_total", {}, refused_.value());
  w.gauge("tandem_http_connections", "Open HTTP connections.", static_cast<double>(open_connections));
  w.gauge("tandem_daemon_up", "1 when tandemd answered the metrics op for this scrape (its figures are above), else 0.",
          daemon_up ? 1.0 : 0.0);
  return w.take();
}

}  // namespace tandem::http
