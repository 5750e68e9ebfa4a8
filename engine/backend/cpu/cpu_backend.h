// The CPU reference backend: computes straight from the (mmapped, possibly quantized) weights,
// accumulates in float32 and spreads mat-vecs over a thread pool.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace tandem {

struct cpu_backend_options {
  unsigned n_threads = 0;  // 0: all cores
};

// The model description (and the file behind it) must outlive the backend. forward() is not
// safe to call from two threads at once on one instance.
result<std::unique_ptr<backend>> make_cpu_backend(const model_desc& desc,
                                                  const cpu_backend_options& opt = {});

}  // namespace tandem
