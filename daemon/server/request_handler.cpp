// request_handler: one function per op family; every path ends in exactly one final reply.
#include "server/request_handler.h"

#include <unistd.h>

#include <fstream>

#include "config/model_table.h"
#include "log.h"
#include "metrics/exposition.h"
#include "protocol/reply.h"
#include "server/connection.h"
#include "server/connection_manager.h"
#include "server/device_memory.h"

namespace tandem::daemon {

using proto::error_code;
using proto::wire_error;
using json = nlohmann::json;

namespace {

json stats_json(const generation_stats& s, const std::string& model, bool with_text) {
  auto rate = [](std::uint64_t n, double secs) { return secs > 0 ? static_cast<double>(n) / secs : 0.0; };
  json r = {{"model", model},
            {"finish_reason", s.finish_reason},
            {"prompt_tokens", s.prompt_tokens},
            {"reused_tokens", s.reused_tokens},
            {"generated_tokens", s.generated_tokens},
            {"first_token_seconds", s.first_token_seconds},
            {"prefill_seconds", s.prefill_seconds},
            {"decode_seconds", s.decode_seconds},
            {"prefill_tok_s", rate(s.prompt_tokens, s.prefill_seconds)},
            // The first token comes out of prefill; the rate counts the decode passes after it.
            {"decode_tok_s", rate(s.generated_tokens > 0 ? s.generated_tokens - 1 : 0, s.decode_seconds)}};
  if (with_text) r["text"] = s.text;
  return r;
}

json info_json(const model_info& i) {
  json j = {{"path", i.path},         {"arch", i.arch},       {"backend", i.backend},   {"device", i.device},
            {"n_vocab", i.n_vocab},   {"n_ctx", i.n_ctx},     {"kv_type", i.kv_type},   {"parallel", i.parallel},
            {"file_bytes", i.file_bytes}, {"cache_bytes", i.cache_bytes}};
  if (i.load) j["load"] = load_json(*i.load);
  return j;
}

std::uint64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  std::uint64_t size = 0, rss = 0;
  f >> size >> rss;
  return rss * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

void request_handler::handle(const std::shared_ptr<connection>& c, proto::request req) {
  const auto id = req.id;
  const std::string_view op = proto::op_name(req.body);
  log(log_level::debug, "request ", id, ": ", op);
  std::visit(
      [&](auto& body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, proto::hello_request>) {
          c->send(proto::result_frame(id, {{"server", "tandemd"}, {"version", TANDEM_VERSION},
                                           {"protocol", proto::protocol_version}, {"max_frame", ctx_.max_frame}}));
          ctx_.metrics.request_done(op, "ok");
        } else if constexpr (std::is_same_v<T, proto::status_request>) {
          c->send(proto::result_frame(id, status_json()));
          ctx_.metrics.request_done(op, "ok");
        } else if constexpr (std::is_same_v<T, proto::metrics_request>) {
          c->send(proto::result_frame(id, {{"content_type", metrics::exposition_content_type}, {"text", metrics_text()}}));
          ctx_.metrics.request_done(op, "ok");
        } else if constexpr (std::is_same_v<T, proto::models_request>) {
          c->send(proto::result_frame(id, {{"models", ctx_.registry.describe()}}));
          ctx_.metrics.request_done(op, "ok");
        } else if constexpr (std::is_same_v<T, proto::cancel_request>) {
          c->send(proto::result_frame(id, {{"cancelled", c->cancel_request(body.target)}}));
          ctx_.metrics.request_done(op, "ok");
        } else if (draining_) {
          c->send(proto::error_frame(id, {error_code::shutting_down, "tandemd is shutting down"}));
          ctx_.metrics.request_done(op, proto::to_string(error_code::shutting_down));
        } else if constexpr (std::is_same_v<T, proto::generate_request>) {
          generate(c, id, std::move(body));
        } else if constexpr (std::is_same_v<T, proto::tokenize_request>) {
          tokenize(c, id, body);
        } else if constexpr (std::is_same_v<T, proto::detokenize_request>) {
          detokenize(c, id, std::move(body));
        } else {
          admin(c, id, req.body);
        }
      },
      req.body);
}

void request_handler::count_undecodable(const wire_error& e) const {
  ctx_.metrics.request_done("invalid", proto::to_string(e.code));
}

bool request_handler::track(const std::shared_ptr<connection>& c, proto::request_id id, std::string_view op) {
  if (c->begin_request(id)) return true;
  c->send(proto::error_frame(id, {error_code::duplicate_id, "request id " + std::to_string(id) + " is already in flight"}));
  ctx_.metrics.request_done(op, proto::to_string(error_code::duplicate_id));
  return false;
}

void request_handler::generate(const std::shared_ptr<connection>& c, proto::request_id id, proto::generate_request g) {
  auto cancelled = c->begin_request(id);
  auto* metrics = &ctx_.metrics;
  if (!cancelled) {
    c->send(proto::error_frame(id, {error_code::duplicate_id, "request id " + std::to_string(id) + " is already in flight"}));
    metrics->request_done("generate", proto::to_string(error_code::duplicate_id));
    return;
  }
  const std::string model = g.model.empty() ? ctx_.registry.default_alias() : g.model;
  const auto received = std::chrono::steady_clock::now();
  model_job job;
  job.cancelled = cancelled;
  // The alias's series are looked up only here, where the alias is known to exist: a client
  // naming aliases at random makes no series.
  job.run = [c, id, g = std::move(g), cancelled, model, metrics, received](served_model& m) {
    auto& series = metrics->model(model);
    if (cancelled->load()) {
      generation_stats s;
      s.finish_reason = "cancelled";
      metrics->request_done("generate", "cancelled");
      c->post_final(id, proto::result_frame(id, stats_json(s, model, !g.stream)));
      return;
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - received).count();
    generation_input in{g.prompt, g.messages, g.sampling, g.max_tokens, g.stop, &series.inter_token};
    auto r = m.generate(in, [&](std::string_view text) {
      if (g.stream && !text.empty()) c->post_send(proto::chunk_frame(id, std::string(text)));
      return !cancelled->load();
    });
    if (!r) {
      metrics->request_done("generate", proto::to_string(error_code::engine_error));
      c->post_final(id, proto::error_frame(id, {error_code::engine_error, r.message()}));
      return;
    }
    series.prompt_tokens.add(r->prompt_tokens);
    series.reused_tokens.add(r->reused_tokens);
    series.generated_tokens.add(r->generated_tokens);
    if (r->generated_tokens > 0) series.first_token.observe(waited + r->setup_seconds + r->first_token_seconds);
    // Counted before the reply leaves: a client that scrapes right after it sees its request.
    metrics->request_done("generate", r->finish_reason == "cancelled" ? "cancelled" : "ok");
    c->post_final(id, proto::result_frame(id, stats_json(*r, model, !g.stream)));
  };
  job.fail = [c, id, metrics](const wire_error& e) {
    metrics->request_done("generate", proto::to_string(e.code));
    c->post_final(id, proto::error_frame(id, e));
  };
  if (auto err = ctx_.registry.submit(model, std::move(job))) {
    c->send(proto::error_frame(id, *err));
    c->end_request(id);
    metrics->request_done("generate", proto::to_string(err->code));
  }
}

void request_handler::with_model(const std::shared_ptr<connection>& c, proto::request_id id, std::string_view op,
                                 const std::string& alias, std::function<std::string(served_model&)> work) {
  auto inst = ctx_.registry.resident(alias);
  if (!track(c, id, op)) return;
  if (inst) {
    boost::asio::post(ctx_.aux, [c, id, inst = *inst, work = std::move(work)] {
      c->post_final(id, work(inst->model()));
    });
    return;
  }
  auto* metrics = &ctx_.metrics;
  model_job job;
  job.run = [c, id, work = std::move(work)](served_model& m) { c->post_final(id, work(m)); };
  job.fail = [c, id, metrics, op](const wire_error& e) {
    metrics->request_done(op, proto::to_string(e.code));
    c->post_final(id, proto::error_frame(id, e));
  };
  if (auto err = ctx_.registry.submit(alias, std::move(job))) {
    c->send(proto::error_frame(id, *err));
    c->end_request(id);
    metrics->request_done(op, proto::to_string(err->code));
  }
}

void request_handler::tokenize(const std::shared_ptr<connection>& c, proto::request_id id,
                               const proto::tokenize_request& t) {
  with_model(c, id, "tokenize", t.model, [id, text = t.text, add = t.add_special, metrics = &ctx_.metrics](served_model& m) {
    auto r = m.tokenize(text, add);
    metrics->request_done("tokenize", r ? "ok" : proto::to_string(error_code::bad_request));
    return r ? proto::result_frame(id, {{"tokens", *r}, {"count", r->size()}})
             : proto::error_frame(id, {error_code::bad_request, r.message()});
  });
}

void request_handler::detokenize(const std::shared_ptr<connection>& c, proto::request_id id,
                                 proto::detokenize_request d) {
  with_model(c, id, "detokenize", d.model, [id, toks = std::move(d.tokens), metrics = &ctx_.metrics](served_model& m) {
    auto r = m.detokenize(toks);
    metrics->request_done("detokenize", r ? "ok" : proto::to_string(error_code::bad_request));
    return r ? proto::result_frame(id, {{"text", *r}}) : proto::error_frame(id, {error_code::bad_request, r.message()});
  });
}

void request_handler::admin(const std::shared_ptr<connection>& c, proto::request_id id, proto::request_body body) {
  if (!track(c, id, proto::op_name(body))) return;
  boost::asio::post(ctx_.admin, [this, c, id, body = std::move(body)] {
    model_info info;
    std::optional<wire_error> err;
    json result;
    // The device list and ratios are checked here, where the plan's parsers are: a bad one is the
    // request's fault (bad_request), not a failed load.
    if (const auto* l = std::get_if<proto::load_request>(&body)) {
      log(log_level::info, "loading '", l->name, "' from ", l->path);
      if (auto bad = check_device_fields(l->settings)) err = wire_error{error_code::bad_request, "load: " + *bad};
      else err = ctx_.registry.load(l->name, l->path, l->settings, info);
      result = {{"name", l->name}, {"model", info_json(info)}};
    } else if (const auto* s = std::get_if<proto::swap_request>(&body)) {
      log(log_level::info, "swapping '", s->name, "' to ", s->path);
      if (auto bad = check_device_fields(s->settings)) err = wire_error{error_code::bad_request, "swap: " + *bad};
      else err = ctx_.registry.swap(s->name, s->path, s->settings, info);
      result = {{"name", s->name}, {"model", info_json(info)}};
    } else if (const auto* u = std::get_if<proto::unload_request>(&body)) {
      log(log_level::info, "unloading '", u->name, "'");
      err = ctx_.registry.unload(u->name);
      result = {{"name", u->name}};
    } else {
      err = wire_error{error_code::internal, "not an admin op"};
    }
    if (err) log(log_level::warning, proto::op_name(body), " failed: ", err->message);
    ctx_.metrics.request_done(proto::op_name(body), err ? proto::to_string(err->code) : "ok");
    c->post_final(id, err ? proto::error_frame(id, *err) : proto::result_frame(id, result));
  });
}

json request_handler::status_json() const {
  const auto up = std::chrono::duration<double>(std::chrono::steady_clock::now() - ctx_.started).count();
  auto models = ctx_.registry.describe();
  std::uint64_t model_bytes = 0, queued = 0;
  for (const auto& m : models) {
    model_bytes += m.value("file_bytes", std::uint64_t{0}) + m.value("cache_bytes", std::uint64_t{0});
    queued += m.value("queued", std::uint64_t{0});
  }
  return {{"version", TANDEM_VERSION},
          {"protocol", proto::protocol_version},
          {"pid", getpid()},
          {"uptime_seconds", up},
          {"draining", draining_.load()},
          {"connections", ctx_.connections.size()},
          {"in_flight", ctx_.connections.in_flight()},
          {"queued", queued},
          {"memory", {{"rss_bytes", resident_bytes()},
                      {"model_bytes", model_bytes},
                      {"budget_bytes", ctx_.registry.memory_budget()},
                      {"budget_used_bytes", ctx_.registry.used_bytes()}}},
          {"devices", devices_json(models)},
          {"models", models},
          {"loads", ctx_.registry.describe_loads()}};
}

std::string request_handler::metrics_text() const { return ctx_.metrics.render(status_json()); }

}  // namespace tandem::daemon
