// The tensor split's collectives through NCCL (TANDEM_CUDA_EXCHANGE=nccl, builds with NCCL only).
#include <set>

#include "backend/cuda/cuda_collective.h"

#ifdef TANDEM_HAVE_NCCL
#include <nccl.h>
#endif

namespace tandem {

#ifdef TANDEM_HAVE_NCCL
namespace {

#define TANDEM_NCCL_TRY(expr)                                                                         \
  do {                                                                                                \
    const ncclResult_t tandem_nccl_r_ = (expr);                                                       \
    if (tandem_nccl_r_ != ncclSuccess)                                                                \
      return make_error("NCCL: ", #expr, ": ", ncclGetErrorString(tandem_nccl_r_), " (", __FILE__, ":", \
                        __LINE__, ")");                                                              \
  } while (0)

class nccl_rank final : public cuda_collective {
 public:
  nccl_rank(ncclComm_t comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ~nccl_rank() override { ncclCommDestroy(comm_); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  status all_reduce_sum(float* buf, size_t n, cudaStream_t stream) override {
    TANDEM_NCCL_TRY(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm_, stream));
    return {};
  }
  status broadcast(float* buf, size_t n, int root, cudaStream_t stream) override {
    TANDEM_NCCL_TRY(ncclBroadcast(buf, buf, n, ncclFloat32, root, comm_, stream));
    return {};
  }

 private:
  ncclComm_t comm_;
  int rank_, size_;
};

}  // namespace

result<std::vector<std::unique_ptr<cuda_collective>>> make_nccl_collectives(const std::vector<int>& devices) {
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  TANDEM_NCCL_TRY(ncclCommInitAll(comms.data(), int(devices.size()), devices.data()));
  std::vector<std::unique_ptr<cuda_collective>> out;
  for (size_t i = 0; i < comms.size(); ++i)
    out.push_back(std::make_unique<nccl_rank>(comms[i], int(i), int(comms.size())));
  return out;
}

#else

result<std::vector<std::unique_ptr<cuda_collective>>> make_nccl_collectives(const std::vector<int>&) {
  return make_error("this build has no NCCL (TANDEM_CUDA_EXCHANGE=nccl); use auto, peer or host");
}

#endif

}  // namespace tandem
