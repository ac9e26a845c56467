// Kernel-only micro-benchmark of the native sum tree (no Python): ns per item
// of sample (AVX2 and baseline kernels) and update, best of --reps runs of 64
// pre-generated batches, and optionally 1 vs N threads. "Best of" because on
// a shared machine the minimum is the stable estimate of what the code does.
//
// Build and run (from the repository root; one command per line):
//   g++ -O3 -std=c++17 -ffp-contract=off -mavx2 -DPEARL_HAVE_AVX2_KERNEL=1 -Iplugins/pearl_cpu/csrc
//       -c plugins/pearl_cpu/csrc/sample_avx2.cpp -o /tmp/avx2.o
//   g++ -O3 -std=c++17 -ffp-contract=off -DPEARL_HAVE_AVX2_KERNEL=1 -Iplugins/pearl_cpu/csrc
//       plugins/pearl_cpu/scripts/bench_kernel.cpp plugins/pearl_cpu/csrc/sumtree.cpp /tmp/avx2.o
//       -o /tmp/bench_kernel -lpthread
//   /tmp/bench_kernel [capacity=1048576] [fanouts=2,4,8,16,32,64] [batch=4096] [reps=25] [threads=1]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "sumtree.hpp"

using pearl_cpu::SumTree;

static double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int main(int argc, char** argv) {
  const uint64_t cap = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (1u << 20);
  std::vector<int> fanouts;
  {
    std::stringstream ss(argc > 2 ? argv[2] : "2,4,8,16,32,64");
    for (std::string f; std::getline(ss, f, ',');) fanouts.push_back(std::atoi(f.c_str()));
  }
  const size_t batch = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 4096;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 25;
  const int threads = argc > 5 ? std::atoi(argv[5]) : 1;
  constexpr int NB = 64;

  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  std::printf("capacity %llu, batch %zu, best of %d x %d batches, threads %d\n",
              static_cast<unsigned long long>(cap), batch, reps, NB, threads);
  std::printf("%6s %5s %16s %16s %14s\n", "fanout", "depth", "sample avx2 ns", "sample base ns", "update ns");
  for (int F : fanouts) {
    SumTree t(cap, F, threads);
    t.tuning().contention_guard = false;  // measure the split itself when threads > 1
    std::vector<int64_t> all(cap);
    std::vector<double> prio(cap);
    for (uint64_t i = 0; i < cap; ++i) {
      all[i] = static_cast<int64_t>(i);
      prio[i] = U(rng) + 1e-3;
    }
    t.update(all.data(), prio.data(), cap);
    std::vector<std::vector<double>> xs(NB, std::vector<double>(batch)), ps(NB, std::vector<double>(batch));
    std::vector<std::vector<int64_t>> is(NB, std::vector<int64_t>(batch));
    for (auto& x : xs)
      for (auto& v : x) v = U(rng) * t.total() * 0.999999;
    for (auto& x : is)
      for (auto& v : x) v = static_cast<int64_t>(rng() % cap);
    for (auto& x : ps)
      for (auto& v : x) v = U(rng) + 1e-3;
    std::vector<int64_t> out(batch);
    const bool has_avx2 = t.set_isa("avx2");
    double best[3] = {1e30, 1e30, 1e30};
    for (int r = 0; r < reps; ++r) {
      for (int k = 0; k < 2; ++k) {
        if (k == 0 && !has_avx2) continue;
        t.set_isa(k == 0 ? "avx2" : "baseline");
        const auto t0 = std::chrono::steady_clock::now();
        for (int b = 0; b < NB; ++b) t.sample(xs[b].data(), out.data(), batch);
        best[k] = std::min(best[k], seconds_since(t0) / (NB * batch));
      }
      const auto t0 = std::chrono::steady_clock::now();
      for (int b = 0; b < NB; ++b) t.update(is[b].data(), ps[b].data(), batch);
      best[2] = std::min(best[2], seconds_since(t0) / (NB * batch));
    }
    std::printf("%6d %5d %16.1f %16.1f %14.1f\n", F, t.depth(), has_avx2 ? best[0] * 1e9 : 0.0,
                best[1] * 1e9, best[2] * 1e9);
  }
  return 0;
}
