// The layer split: one model over several GPUs by contiguous layer ranges, each range a
// cuda_stage on its device, run in order with the residual stream handed from one to the next.
#include <utility>

#include "backend/cuda/cuda_multi_backend.h"

namespace tandem {
namespace {

// Each stage holds its layers and their K/V; a forward pass runs them in order, each device
// taking the previous one's activations (peer-to-peer where the devices allow it, else the
// driver stages through host memory). The last stage holds the output head.
class cuda_split_backend final : public cuda_multi_backend {
 public:
  cuda_split_backend(const model_desc& desc, std::vector<std::unique_ptr<cuda_stage>> stages)
      : cuda_multi_backend(desc, std::move(stages), 0) {
    output_ = stages_.size() - 1;
  }

 private:
  status run_stages(const batch& b, cuda_stage_cache& cache, bool argmax) override {
    for (size_t i = 0; i < stages_.size(); ++i) {
      cuda_stage::input in;
      if (i > 0) in = {stages_[i - 1]->hidden(), stages_[i - 1]->device(), stages_[i - 1]->done()};
      TANDEM_TRY(stages_[i]->run_stage(b, cache, *cache.parts[i], in, argmax && i == output_));
    }
    return {};
  }
};

}  // namespace

std::unique_ptr<cuda_backend_api> make_cuda_split_backend(const model_desc& desc,
                                                          std::vector<std::unique_ptr<cuda_stage>> stages) {
  return std::make_unique<cuda_split_backend>(desc, std::move(stages));
}

}  // namespace tandem
