// Streaming waits for tandemd's first reply before sending the 200: an unknown model, a full
// queue or a bad parameter then still gets its proper HTTP status instead of an error event.
#include "completion_call.h"

namespace tandem::http {

using json = nlohmann::json;

completion_call::completion_call(daemon_link& link, std::shared_ptr<response_sink> sink, generate_call call,
                                 reply_ids ids)
    : link_(link), sink_(std::move(sink)), call_(std::move(call)), ids_(std::move(ids)) {}

void completion_call::start() {
  id_ = link_.submit(call_.request, [self = shared_from_this()](const json& reply) { self->on_reply(reply); });
}

void completion_call::abandon() {
  if (!done_) link_.forget(id_, true);
  done_ = true;
  sink_.reset();
}

std::string completion_call::summary() const {
  if (!error_code_.empty()) return "error " + error_code_;
  if (!result_.is_object()) return done_ ? "abandoned" : "running";
  return "prompt " + std::to_string(result_.value("prompt_tokens", 0u)) + ", generated " +
         std::to_string(result_.value("generated_tokens", 0u)) + " tokens, finish " +
         result_.value("finish_reason", std::string("?"));
}

void completion_call::on_reply(const json& reply) {
  if (done_ || !sink_) return;
  if (reply.contains("chunk")) return on_chunk(reply["chunk"]);
  if (reply.contains("result") && reply["result"].is_object()) return on_result(reply["result"]);
  on_error(reply);
}

void completion_call::on_chunk(const json& text) {
  if (!call_.stream || !text.is_string()) return;
  open_stream();
  sink_->send_event(sse_event(text_chunk(call_, ids_, text.get_ref<const std::string&>())));
}

void completion_call::open_stream() {
  if (started_) return;
  started_ = true;
  sink_->begin_events();
  sink_->send_event(sse_event(first_chunk(call_, ids_)));
}

void completion_call::on_result(const json& result) {
  done_ = true;
  result_ = result;
  if (result.contains("model") && result["model"].is_string()) ids_.model = result["model"].get<std::string>();
  if (!call_.stream) {
    sink_->send_json(boost::beast::http::status::ok, full_reply(call_, ids_, result));
  } else {
    open_stream();  // a generation that produced no text still gets its role chunk
    sink_->send_event(sse_event(last_chunk(call_, ids_, result)));
    if (call_.include_usage) sink_->send_event(sse_event(usage_chunk(call_, ids_, result)));
    sink_->send_event(sse_done);
    sink_->end_events();
  }
  sink_.reset();
}

void completion_call::on_error(const json& reply) {
  done_ = true;
  const api_error e = from_daemon_reply(reply, call_.model);
  error_code_ = e.code.empty() ? std::to_string(e.status) : e.code;
  if (!started_) {
    sink_->send_error(e);
  } else {
    // Headers are gone: the error becomes an event (the openai package raises APIError on it).
    sink_->send_event(sse_event(error_body(e)));
    sink_->end_events();
  }
  sink_.reset();
}

}  // namespace tandem::http
