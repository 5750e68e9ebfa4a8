// completion_call: one OpenAI completion run as one tandemd generate request — the daemon's
// chunks and final result turned into server-sent events or one JSON reply on a response_sink.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "daemon_link.h"
#include "openai_reply.h"
#include "openai_request.h"
#include "response_sink.h"

namespace tandem::http {

class completion_call : public std::enable_shared_from_this<completion_call> {
 public:
  completion_call(daemon_link& link, std::shared_ptr<response_sink> sink, generate_call call, reply_ids ids);

  // Sends the generate request; the sink gets the reply as it comes.
  void start();

  // The HTTP client went away: cancel the generation on tandemd (freeing its sequence slot) and
  // write nothing more.
  void abandon();

  // For the request log: "prompt 12, generated 8 tokens, finish length" once finished.
  std::string summary() const;

 private:
  void on_reply(const nlohmann::json& reply);
  void on_chunk(const nlohmann::json& text);
  void on_result(const nlohmann::json& result);
  void on_error(const nlohmann::json& reply);
  void open_stream();

  daemon_link& link_;
  std::shared_ptr<response_sink> sink_;  // reset once the reply is complete or the client is gone
  generate_call call_;
  reply_ids ids_;
  std::uint64_t id_ = 0;  // the daemon request's id
  bool started_ = false;  // events begun: errors from now on go into the stream
  bool done_ = false;
  nlohmann::json result_;
  std::string error_code_;  // of the error reply, for the log
};

}  // namespace tandem::http
