// The tensor split's exchange: sums and broadcasts across ranks equal the CPU's rank-order sums
// bit for bit, through peer access and through host memory, for sizes that go as flagged words
// (odd ones too) and as flagged slices (the scalar path, several slot-sized pieces), interleaved
// over many calls (both slot parities). With one
// GPU two host-memory ranks share device 0 on separate streams. Also the transport names.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <random>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_collective.h"
#include "core/exchange_layout.h"

namespace tandem {
namespace {

TEST(collective_transport, names_parse_and_bad_words_are_errors) {
  for (auto t : {collective_transport::automatic, collective_transport::peer, collective_transport::host,
                 collective_transport::nccl}) {
    auto p = parse_collective_transport(collective_transport_name(t));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, t);
  }
  auto bad = parse_collective_transport("nvlink");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("'nvlink'"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("auto, peer, host or nccl"), std::string::npos) << bad.message();
}

TEST(collective_transport, refuses_too_few_or_repeated_devices) {
  auto one = make_cuda_collectives({0}, collective_transport::host);
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.message().find("at least two devices"), std::string::npos) << one.message();
  auto same = make_cuda_collectives({1, 1}, collective_transport::host);
  ASSERT_FALSE(same.ok());
  EXPECT_NE(same.message().find("distinct devices"), std::string::npos) << same.message();
}

struct rank_side {
  int device = 0;
  cudaStream_t stream = nullptr;
  float* buf = nullptr;
};

// Runs `calls` exchanges over the ranks (one stream each, launched from this thread) and checks
// every rank's result against the CPU.
void check_exchange(const std::vector<int>& devices, bool host_memory) {
  auto comms = make_exchange_collectives(devices, host_memory);
  ASSERT_TRUE(comms.ok()) << comms.message();
  const size_t R = devices.size();
  const int64_t cap = k_exchange_capacity;
  const std::vector<size_t> sizes = {4096, 1,     3,     5120, 1000, 40960, size_t(cap) + 100, 7,
                                     65536, 65537, 65539, 3 * size_t(cap) + 5};
  size_t max_n = 0;
  for (size_t n : sizes) max_n = std::max(max_n, n);
  std::vector<rank_side> ranks(R);
  for (size_t r = 0; r < R; ++r) {
    ranks[r].device = devices[r];
    ASSERT_EQ(cudaSetDevice(devices[r]), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&ranks[r].stream, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&ranks[r].buf), max_n * sizeof(float)), cudaSuccess);
  }
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  for (int round = 0; round < 3; ++round) {
    for (size_t k = 0; k < sizes.size(); ++k) {
      const size_t n = sizes[k];
      const bool bcast = (k + round) % 4 == 3;
      const int root = int((k + round) % R);
      std::vector<std::vector<float>> in(R, std::vector<float>(n));
      for (auto& v : in)
        for (float& x : v) x = d(rng);
      for (size_t r = 0; r < R; ++r) {
        ASSERT_EQ(cudaSetDevice(ranks[r].device), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(ranks[r].buf, in[r].data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
      }
      for (size_t r = 0; r < R; ++r) {
        ASSERT_EQ(cudaSetDevice(ranks[r].device), cudaSuccess);
        auto st = bcast ? (*comms)[r]->broadcast(ranks[r].buf, n, root, ranks[r].stream)
                        : (*comms)[r]->all_reduce_sum(ranks[r].buf, n, ranks[r].stream);
        ASSERT_TRUE(st.ok()) << st.message();
      }
      std::vector<float> want(n, 0.f);
      for (size_t i = 0; i < n; ++i) {
        if (bcast) {
          want[i] = in[size_t(root)][i];
          continue;
        }
        float s = 0.f;
        for (size_t r = 0; r < R; ++r) s += in[r][i];
        want[i] = s;
      }
      for (size_t r = 0; r < R; ++r) {
        ASSERT_EQ(cudaSetDevice(ranks[r].device), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(ranks[r].stream), cudaSuccess);
        std::vector<float> got(n);
        ASSERT_EQ(cudaMemcpy(got.data(), ranks[r].buf, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) bad += got[i] != want[i];
        ASSERT_EQ(bad, 0u) << (bcast ? "broadcast" : "sum") << " of " << n << " floats, rank " << r << ", round "
                           << round;
      }
    }
  }
  for (auto& s : ranks) {
    cudaSetDevice(s.device);
    cudaFree(s.buf);
    cudaStreamDestroy(s.stream);
  }
}

TEST(cuda_exchange, host_memory_two_ranks) {
  const int n = cuda_device_count();
  if (n == 0) GTEST_SKIP() << "no CUDA device";
  check_exchange(n >= 2 ? std::vector<int>{0, 1} : std::vector<int>{0, 0}, true);
}

TEST(cuda_exchange, peer_access_two_ranks) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  int ok = 0;
  ASSERT_EQ(cudaDeviceCanAccessPeer(&ok, 0, 1), cudaSuccess);
  if (!ok) GTEST_SKIP() << "devices 0 and 1 have no peer access";
  check_exchange({0, 1}, false);
}

TEST(cuda_exchange, automatic_picks_a_transport_that_works) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  collective_transport used = collective_transport::automatic;
  auto comms = make_cuda_collectives({0, 1}, collective_transport::automatic, &used);
  ASSERT_TRUE(comms.ok()) << comms.message();
  EXPECT_TRUE(used == collective_transport::peer || used == collective_transport::host);
  EXPECT_EQ((*comms)[1]->rank(), 1);
  EXPECT_EQ((*comms)[0]->size(), 2);
}

// Microseconds per all-reduce of n floats: one thread per rank, as the tensor split drives them,
// `iters` calls back to back after a warm-up; the slowest rank's time.
double us_per_call(std::vector<std::unique_ptr<cuda_collective>>& comms, const std::vector<int>& devices, size_t n,
                   int iters) {
  std::barrier sync(std::ptrdiff_t(devices.size()));
  std::vector<double> us(devices.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < devices.size(); ++r)
    threads.emplace_back([&, r] {
      cudaSetDevice(devices[r]);
      cudaStream_t s = nullptr;
      float* buf = nullptr;
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      cudaMalloc(reinterpret_cast<void**>(&buf), n * sizeof(float));
      cudaMemset(buf, 0, n * sizeof(float));
      for (int i = 0; i < 10; ++i) EXPECT_TRUE(comms[r]->all_reduce_sum(buf, n, s).ok());
      cudaStreamSynchronize(s);
      sync.arrive_and_wait();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) EXPECT_TRUE(comms[r]->all_reduce_sum(buf, n, s).ok());
      EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      us[r] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
      cudaFree(buf);
      cudaStreamDestroy(s);
    });
  for (auto& t : threads) t.join();
  return *std::max_element(us.begin(), us.end());
}

// Not a check: prints the per-call cost of each transport for decode- and prefill-sized messages.
TEST(big, exchange_latency) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  const std::vector<int> devices = {0, 1};
  for (auto t : {collective_transport::peer, collective_transport::host, collective_transport::nccl}) {
    auto comms = make_cuda_collectives(devices, t);
    if (!comms) {
      std::printf("%s: %s\n", collective_transport_name(t).data(), comms.message().c_str());
      continue;
    }
    for (size_t n : {size_t(4096), size_t(5120), size_t(8 * 5120), size_t(2048) * 4096}) {
      const int iters = n > 100000 ? 20 : 2000;
      const double us = us_per_call(*comms, devices, n, iters);
      std::printf("%-4s all-reduce %8zu floats: %8.2f us/call, %7.1f GB/s per rank\n",
                  collective_transport_name(t).data(), n, us, n * 4.0 / (us * 1e-6) / 1e9);
    }
  }
}

}  // namespace
}  // namespace tandem
