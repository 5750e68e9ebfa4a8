// upload_pieces: the pieces cut into chunks of at most one staging buffer, taken in order by worker
// threads; each worker owns a stream, two pinned buffers and their events, so a buffer is refilled
// only once its previous copy has left it.
#include "backend/cuda/cuda_upload.h"

#include <cuda_runtime.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "backend/cuda/cuda_context.h"
#include "kernels/cuda_check.h"

namespace tandem {
namespace {

// Whole rows of a piece that fit one buffer, or one buffer's worth of a row longer than that.
std::vector<upload_piece> chunks_of(const std::vector<upload_piece>& pieces, uint64_t slot) {
  std::vector<upload_piece> out;
  for (const upload_piece& p : pieces) {
    if (p.len == 0 || p.n_rows == 0) continue;
    if (p.len > slot || p.n_rows == 1) {
      for (uint64_t r = 0; r < p.n_rows; ++r)
        for (uint64_t off = 0; off < p.len; off += slot)
          out.push_back({p.dst + r * p.len + off, p.src + r * p.src_pitch + off, 1, 0, std::min(slot, p.len - off)});
      continue;
    }
    const uint64_t per = slot / p.len;
    for (uint64_t r0 = 0; r0 < p.n_rows; r0 += per)
      out.push_back({p.dst + r0 * p.len, p.src + r0 * p.src_pitch, std::min(per, p.n_rows - r0), p.src_pitch, p.len});
  }
  return out;
}

// What one worker holds; released on every path out.
struct worker_state {
  cudaStream_t stream = nullptr;
  cudaEvent_t done[2] = {nullptr, nullptr};
  pinned_buffer buf[2];
  ~worker_state() {
    if (stream) TANDEM_CUDA_LOG(cudaStreamSynchronize(stream));
    for (cudaEvent_t e : done)
      if (e) TANDEM_CUDA_LOG(cudaEventDestroy(e));
    if (stream) TANDEM_CUDA_LOG(cudaStreamDestroy(stream));
  }
};

struct shared_state {
  shared_state(const std::vector<upload_piece>& c, const upload_options& o, uint64_t s) : chunks(c), opt(o), slot(s) {}
  const std::vector<upload_piece>& chunks;
  const upload_options& opt;
  uint64_t slot;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  status first_error;
};

// The file's bytes behind [src, src + n) of its mapping, read into buf.
status read_at(const file_source& f, const uint8_t* src, uint64_t n, uint8_t* buf) {
  uint64_t off = uint64_t(src - f.base), got = 0;
  while (got < n) {
    const ssize_t r = ::pread(f.fd, buf + got, n - got, off_t(off + got));
    if (r > 0) {
      got += uint64_t(r);
    } else if (r == 0) {
      return make_error("CUDA upload: the model file ends at ", off + got, " bytes: it changed since it was loaded");
    } else if (errno != EINTR) {
      return make_error("CUDA upload: reading the model file at ", off + got, ": ", std::strerror(errno));
    }
  }
  return {};
}

status run_worker(shared_state& sh) {
  TANDEM_CUDA_TRY(cudaSetDevice(sh.opt.device));
  worker_state w;
  TANDEM_CUDA_TRY(cudaStreamCreateWithFlags(&w.stream, cudaStreamNonBlocking));
  for (int b = 0; b < 2; ++b) {
    TANDEM_TRY(w.buf[b].ensure(sh.slot));
    TANDEM_CUDA_TRY(cudaEventCreateWithFlags(&w.done[b], cudaEventDisableTiming));
  }
  for (int k = 0; !sh.failed.load(std::memory_order_relaxed); ++k) {
    const size_t i = sh.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= sh.chunks.size()) break;
    const upload_piece& c = sh.chunks[i];
    const int b = k & 1;
    TANDEM_CUDA_TRY(cudaEventSynchronize(w.done[b]));
    auto* buf = w.buf[b].get<uint8_t>();
    if (c.n_rows == 1 && sh.opt.file.covers(c.src, c.len)) {
      TANDEM_TRY(read_at(sh.opt.file, c.src, c.len, buf));
    } else if (c.n_rows == 1) {
      std::memcpy(buf, c.src, c.len);
    } else {
      for (uint64_t r = 0; r < c.n_rows; ++r) std::memcpy(buf + r * c.len, c.src + r * c.src_pitch, c.len);
    }
    TANDEM_CUDA_TRY(cudaMemcpyAsync(c.dst, buf, c.bytes(), cudaMemcpyHostToDevice, w.stream));
    TANDEM_CUDA_TRY(cudaEventRecord(w.done[b], w.stream));
    if (sh.opt.progress) sh.opt.progress->add(c.bytes());
  }
  TANDEM_CUDA_TRY(cudaStreamSynchronize(w.stream));
  return {};
}

void worker_main(shared_state& sh) {
  status s = run_worker(sh);
  if (s.ok()) return;
  sh.failed.store(true, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(sh.mu);
  if (sh.first_error.ok()) sh.first_error = std::move(s);
}

}  // namespace

int upload_threads(int requested) {
  if (requested > 0) return requested;
  if (const char* e = std::getenv("TANDEM_CUDA_UPLOAD_THREADS")) {
    const int n = std::atoi(e);
    if (n > 0) return std::min(n, 64);
  }
  return k_default_upload_threads;
}

status upload_pieces(const std::vector<upload_piece>& pieces, const upload_options& opt) {
  if (opt.slot_bytes == 0) return make_error("CUDA upload: staging buffers of 0 bytes");
  const std::vector<upload_piece> chunks = chunks_of(pieces, opt.slot_bytes);
  if (chunks.empty()) return {};
  // No more threads than chunks, and no buffers larger than the largest chunk.
  uint64_t largest = 0;
  for (const upload_piece& c : chunks) largest = std::max(largest, c.bytes());
  const int n = int(std::min<size_t>(size_t(upload_threads(opt.threads)), chunks.size()));
  shared_state sh(chunks, opt, largest);
  if (n == 1) {
    worker_main(sh);
  } else {
    std::vector<std::thread> threads;
    threads.reserve(size_t(n));
    for (int t = 0; t < n; ++t) threads.emplace_back(worker_main, std::ref(sh));
    for (auto& t : threads) t.join();
  }
  return std::move(sh.first_error);
}

}  // namespace tandem
