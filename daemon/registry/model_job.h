// A unit of work for a model's worker thread: generate on it, or be told why it never ran.
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include "protocol/wire_error.h"
#include "registry/served_model.h"

namespace tandem::daemon {

struct model_job {
  // Set by cancel or a disconnect; run() checks it first, so a job cancelled while queued ends at once.
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  std::function<void(served_model&)> run;               // on the model's worker thread
  std::function<void(const proto::wire_error&)> fail;   // dropped without running: load failed, shutdown
};

}  // namespace tandem::daemon
