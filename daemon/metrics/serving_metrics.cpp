// serving_metrics: the families of tandemd's exposition text, in a fixed order: counters and
// histograms kept here, then the gauges of the moment from the status op's figures.
#include "metrics/serving_metrics.h"

#include "metrics/exposition.h"

namespace tandem::daemon {

using json = nlohmann::json;
using metrics::exposition_writer;
using metrics::label_set;
using metrics::metric_type;

namespace {

double num(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

void write_model_gauges(exposition_writer& w, const json& models) {
  struct gauge_def {
    const char* name;
    const char* help;
    double (*value)(const json& m);
    bool resident_only;
  };
  static const gauge_def defs[] = {
      {"tandem_model_resident", "Whether the alias's model is loaded (1) or not: loading, unloaded or evicted (0).",
       [](const json& m) { return m.contains("device") ? 1.0 : 0.0; }, false},
      {"tandem_queue_depth", "Requests waiting for the model: in its queue or parked while it loads.",
       [](const json& m) { return num(m, "queued"); }, false},
      {"tandem_sequences_running", "Requests in one of the model's sequence slots (prefilling or decoding).",
       [](const json& m) { return num(m.value("sequences", json::object()), "running"); }, true},
      {"tandem_sequences_waiting", "Requests the engine holds for a free sequence slot.",
       [](const json& m) { return num(m.value("sequences", json::object()), "waiting"); }, true},
      {"tandem_sequence_slots", "Sequences the model decodes together (parallel).",
       [](const json& m) { return num(m, "parallel"); }, true},
      {"tandem_model_bytes", "Bytes the model holds: mapped weights plus KV cache (what the memory budget counts).",
       [](const json& m) { return num(m, "bytes"); }, true},
  };
  for (const auto& d : defs) {
    w.family(d.name, d.help, metric_type::gauge);
    for (const auto& m : models)
      if (!d.resident_only || m.contains("device")) w.sample(d.name, {{"model", m.value("name", "")}}, d.value(m));
  }
  w.family("tandem_model_info", "A resident model: its architecture, backend and device (value always 1).",
           metric_type::gauge);
  for (const auto& m : models)
    if (m.contains("device"))
      w.sample("tandem_model_info", {{"model", m.value("name", "")}, {"arch", m.value("arch", "")},
                                     {"backend", m.value("backend", "")}, {"device", m.value("device", "")}}, 1.0);
}

void write_device_gauges(exposition_writer& w, const json& devices) {
  w.family("tandem_device_model_bytes",
           "Bytes tandemd's resident models hold on the device (a model split over GPUs: under cuda:A+B).",
           metric_type::gauge);
  for (const auto& d : devices) w.sample("tandem_device_model_bytes", {{"device", d.value("device", "")}}, num(d, "model_bytes"));
  struct mem_def {
    const char* name;
    const char* help;
    double (*value)(const json& d);
  };
  static const mem_def defs[] = {
      {"tandem_device_memory_total_bytes", "The device's memory: the host's for cpu, the GPU's own for cuda:N.",
       [](const json& d) { return num(d, "total_bytes"); }},
      {"tandem_device_memory_available_bytes", "Memory free on the device (the host's MemAvailable for cpu).",
       [](const json& d) { return num(d, "available_bytes"); }},
      {"tandem_device_memory_used_bytes", "Total less available: used by anyone, tandemd and other processes.",
       [](const json& d) { return num(d, "total_bytes") - num(d, "available_bytes"); }},
  };
  // A GPU that did not answer within the status op's limit has no figures: no sample then.
  for (const auto& def : defs) {
    w.family(def.name, def.help, metric_type::gauge);
    for (const auto& d : devices)
      if (d.contains("total_bytes")) w.sample(def.name, {{"device", d.value("device", "")}}, def.value(d));
  }
}

void write_daemon_gauges(exposition_writer& w, const json& status) {
  w.family("tandem_build_info", "tandemd's version and protocol (value always 1).", metric_type::gauge);
  w.sample("tandem_build_info", {{"version", status.value("version", "")},
                                 {"protocol", std::to_string(status.value("protocol", 0))}}, 1.0);
  w.gauge("tandem_uptime_seconds", "Seconds since tandemd started.", num(status, "uptime_seconds"));
  w.gauge("tandem_draining", "1 while tandemd drains for a stop and takes no new work.",
          status.value("draining", false) ? 1.0 : 0.0);
  w.gauge("tandem_connections", "Open client connections on the socket.", num(status, "connections"));
  w.gauge("tandem_in_flight_requests", "Requests received and not yet answered, over all connections.",
          num(status, "in_flight"));
  w.gauge("tandem_queued_requests", "Requests waiting for a model, over all models.", num(status, "queued"));
  const json mem = status.value("memory", json::object());
  w.gauge("tandem_resident_memory_bytes", "tandemd's resident set size.", num(mem, "rss_bytes"));
  w.gauge("tandem_memory_budget_bytes", "The memory budget for all resident models; 0: unlimited.",
          num(mem, "budget_bytes"));
  w.gauge("tandem_memory_budget_used_bytes",
          "Bytes counted against the budget: resident, draining and retiring models and loads in progress.",
          num(mem, "budget_used_bytes"));
  const json models = status.value("models", json::array());
  double resident = 0;
  for (const auto& m : models) resident += m.contains("device") ? 1 : 0;
  w.gauge("tandem_models_resident", "Models loaded and able to serve.", resident);
  write_model_gauges(w, models);
  write_device_gauges(w, status.value("devices", json::array()));
}

}  // namespace

serving_metrics::serving_metrics() {
  // Zero from the start, so that rate() sees the first request as an increase.
  requests_.at({"generate", "ok"});
  requests_.at({"generate", "cancelled"});
}

void serving_metrics::request_done(std::string_view op, std::string_view outcome) {
  requests_.at({std::string(op), std::string(outcome)}).add();
}

void serving_metrics::swap_done(const std::string& alias, std::string_view outcome, double seconds) {
  swaps_.at({alias, std::string(outcome)}).add();
  if (outcome == "ok") model(alias).swap_seconds.observe(seconds);
}

std::string serving_metrics::render(const json& status) {
  // Every alias has its series from the start, at zero.
  for (const auto& m : status.value("models", json::array())) model(m.value("name", ""));
  exposition_writer w;
  w.family("tandem_requests_total",
           "Requests answered, by op and outcome: ok, cancelled, or the error code of the reply.",
           metric_type::counter);
  requests_.each([&](const label_set& l, const metrics::counter& c) { w.sample("tandem_requests_total", l, c.value()); });

  struct token_def {
    const char* name;
    const char* help;
    const metrics::counter model_series::*member;
  };
  static const token_def tokens[] = {
      {"tandem_prompt_tokens_total", "Prompt tokens of finished generations (reused ones included).",
       &model_series::prompt_tokens},
      {"tandem_prompt_tokens_reused_total", "Prompt tokens whose KV a cached prefix already held (not prefilled).",
       &model_series::reused_tokens},
      {"tandem_generated_tokens_total", "Tokens generated, counted when the generation finishes.",
       &model_series::generated_tokens},
  };
  for (const auto& t : tokens) {
    w.family(t.name, t.help, metric_type::counter);
    models_.each([&](const label_set& l, const model_series& s) { w.sample(t.name, l, (s.*t.member).value()); });
  }
  struct histogram_def {
    const char* name;
    const char* help;
    const metrics::histogram model_series::*member;
  };
  static const histogram_def histograms[] = {
      {"tandem_time_to_first_token_seconds",
       "From tandemd receiving a generate request to its first token: queue wait, prompt encoding and prefill.",
       &model_series::first_token},
      {"tandem_inter_token_latency_seconds",
       "Between successive tokens of one generation; _count grows as tokens are made.", &model_series::inter_token},
      {"tandem_swap_duration_seconds", "Successful swaps of the alias, from the request to the alias repointed.",
       &model_series::swap_seconds},
  };
  for (const auto& h : histograms) {
    w.family(h.name, h.help, metric_type::histogram);
    models_.each([&](const label_set& l, const model_series& s) { w.histogram(h.name, l, (s.*h.member).snapshot()); });
  }
  w.family("tandem_swaps_total", "Swaps finished, by alias and outcome: ok or the error code.", metric_type::counter);
  swaps_.each([&](const label_set& l, const metrics::counter& c) { w.sample("tandem_swaps_total", l, c.value()); });

  write_daemon_gauges(w, status);
  return w.take();
}

}  // namespace tandem::daemon
