// http_metrics: tandem-http's own counters (HTTP requests by endpoint and status code, requests
// the client abandoned, connections refused), appended on /metrics after tandemd's text with the
// tandem_daemon_up gauge. The serving figures (tokens, latencies, queues) are tandemd's.
#pragma once

#include <cstddef>
#include <string>

#include "endpoint.h"
#include "metrics/counter.h"
#include "metrics/metric_family.h"

namespace tandem::http {

class http_metrics {
 public:
  // A reply written completely, with its status code.
  void request_done(endpoint e, unsigned status);
  // A request whose client went away (or stopped reading) before its reply was complete.
  void request_aborted(endpoint e);
  // A connection past --max-connections, answered 503 by the server.
  void connection_refused() { refused_.add(); }

  // The exposition text of these families, the open connections and tandem_daemon_up
  // (1: tandemd answered the metrics op, its text comes first; 0: it did not).
  std::string render(bool daemon_up, std::size_t open_connections) const;

 private:
  metrics::metric_family<metrics::counter> requests_{{"endpoint", "code"}};
  metrics::metric_family<metrics::counter> aborted_{{"endpoint"}};
  metrics::counter refused_;
};

}  // namespace tandem::http
