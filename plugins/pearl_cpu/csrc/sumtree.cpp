// Kernels, layout construction and thread pool of the native sum tree.
// See sumtree.hpp for the memory layout and the drift argument.

#include "sumtree.hpp"

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#include <sys/mman.h>
#define PEARL_HAVE_PTHREAD 1
#endif
#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
#include <immintrin.h>
#define PEARL_PAUSE() _mm_pause()
#else
#define PEARL_PAUSE() std::this_thread::yield()
#endif


#define PEARL_KERNEL_NS base
#include "sample_kernel.hpp"
#undef PEARL_KERNEL_NS

namespace pearl_cpu {
#if PEARL_HAVE_AVX2_KERNEL
namespace avx2 {
base::SampleFn sample_kernel_for(uint32_t S);  // sample_avx2.cpp
}
#endif

namespace {

// ---------------------------------------------------------------- fork safety
// Worker threads do not exist in a forked child; a pool created before the
// fork is abandoned (leaked, never joined) and a fresh one made on first use.
std::atomic<uint64_t> g_fork_epoch{0};
#ifdef PEARL_HAVE_PTHREAD
void on_fork_child() { g_fork_epoch.fetch_add(1, std::memory_order_relaxed); }
struct AtForkInit {
  AtForkInit() { pthread_atfork(nullptr, nullptr, &on_fork_child); }
} g_atfork_init;
#endif

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline void prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }

template <int SC>
inline uint32_t slots(const Layout& L) {
  return SC ? static_cast<uint32_t>(SC) : L.S;
}

inline void prefetch_span(const double* p, uint32_t n) {
  const uint32_t lines = (n * 8 + 63) / 64;
  for (uint32_t l = 0; l < lines; ++l) prefetch(p + 8 * l);
}

// ------------------------------------------------------ the summation order
// Every group: sequential inclusive prefix of its raw child sums c (slot
// order), written to P; returns the group total P(S-1), which is what the
// parent stores. This is the only place sums are formed.
template <int SC>
inline double group_prefix(const double* c, double* P, uint32_t S) {
  double p = c[0];
  P[0] = p;
  for (uint32_t j = 1; j < S; ++j) {
    p += c[j];
    P[j] = p;
  }
  return p;
}

// ------------------------------------------------------------------- update
// Write leaves in batch order (so the last duplicate wins) and record the
// leaf-level group index of each written leaf. items == nullptr means all.
void write_leaves(const Layout& L, const int64_t* idx, const double* prio, const uint32_t* items,
                  size_t c, uint64_t* g) {
  double* leaves = L.data + L.off[L.D];
  if (L.pow2) {
    const int sh = L.shift;
    if (items) {
      for (size_t j = 0; j < c; ++j) {
        const uint32_t k = items[j];
        const uint64_t i = static_cast<uint64_t>(idx[k]);
        leaves[i] = prio[k];
        g[j] = i >> sh;
      }
    } else {
      for (size_t k = 0; k < c; ++k) {
        const uint64_t i = static_cast<uint64_t>(idx[k]);
        leaves[i] = prio[k];
        g[k] = i >> sh;
      }
    }
  } else {
    for (size_t j = 0; j < c; ++j) {
      const size_t k = items ? items[j] : j;
      const uint64_t i = static_cast<uint64_t>(idx[k]);
      const uint64_t grp = i / L.F;
      leaves[grp * L.S + (i - grp * L.F)] = prio[k];
      g[j] = grp;
    }
  }
}

// Recompute the prefixes of group gg of level d and store its total in the
// parent node.
template <int SC>
inline void recompute(const Layout& L, int d, uint64_t gg, uint32_t S) {
  const uint64_t o = L.off[d] + gg * S;
  *L.node(d - 1, gg) = group_prefix<SC>(L.data + o, L.pre + o, S);
}

// Level D of a power-of-two tree, when it is sparse: write each leaf (batch
// order, so the last duplicate wins) and at once recompute its group, which is
// then still in cache; prefetch (for writing) the leaf and prefix lines of the
// item PF ahead. Every group is recomputed after the last write to it, so the
// result is the same pure function of the leaves as write_leaves followed by
// propagate_level. g[j] gets the level D-1 group of item j's parent.
template <int SC>
void write_leaves_and_recompute(const Layout& L, const int64_t* idx, const double* prio,
                                const uint32_t* items, size_t c, uint64_t* g) {
  const uint32_t S = slots<SC>(L);
  constexpr size_t PF = 8;
  const int sh = L.shift;
  const uint64_t mask = ~((uint64_t{1} << sh) - 1);
  double* raw = L.data + L.off[L.D];
  double* pre = L.pre + L.off[L.D];
  for (size_t j = 0; j < c; ++j) {
    if (j + PF < c) {
      const uint64_t ia = static_cast<uint64_t>(idx[items ? items[j + PF] : j + PF]) & mask;
      for (uint32_t l = 0; l < (S * 8 + 63) / 64; ++l) {
        __builtin_prefetch(raw + ia + 8 * l, 1, 3);
        __builtin_prefetch(pre + ia + 8 * l, 1, 3);
      }
    }
    const size_t k = items ? items[j] : j;
    const uint64_t i = static_cast<uint64_t>(idx[k]);
    raw[i] = prio[k];
    const uint64_t gg = i >> sh;
    recompute<SC>(L, L.D, gg, S);
    g[j] = L.div(gg);
  }
}

template <int SC>
void propagate_level(const Layout& L, int d, uint64_t* g, size_t c, bool dense, uint64_t lo,
                     uint64_t hi) {
  const uint32_t S = slots<SC>(L);
  if (dense) {
    for (uint64_t gg = lo; gg < hi; ++gg) recompute<SC>(L, d, gg, S);
    return;
  }
  constexpr size_t PF = 8;
  const double* raw = L.data + L.off[d];
  const double* pre = L.pre + L.off[d];
  uint64_t prev = ~uint64_t{0};
  for (size_t j = 0; j < c; ++j) {
    if (j + PF < c) {
      prefetch_span(raw + g[j + PF] * S, S);
      prefetch_span(pre + g[j + PF] * S, S);
    }
    const uint64_t gg = g[j];
    if (gg != prev) {
      recompute<SC>(L, d, gg, S);
      prev = gg;
    }
    g[j] = L.div(gg);
  }
}

// Recompute the parents of the groups listed in g (level dfrom), then of
// their parents, ..., up to the parents of level dto's groups. Only groups in
// [lo, hi) of level dto (and the groups below them) are touched. Once a
// level's group range is not larger than the list, the whole range is
// recomputed densely (sequential, prefetcher friendly); c == SIZE_MAX forces
// dense. Recomputing an unchanged group writes back the same bits.
template <int SC>
void propagate_kernel(const Layout& L, uint64_t* g, size_t c, int dfrom, int dto, uint64_t lo,
                      uint64_t hi) {
  if (dfrom < dto) return;
  const uint64_t F = L.F;
  uint64_t rlo[kMaxLevels + 1], rhi[kMaxLevels + 1];
  rlo[dto] = lo;
  rhi[dto] = hi;
  for (int d = dto + 1; d <= dfrom; ++d) {
    rlo[d] = std::min(rlo[d - 1] * F, L.G[d]);
    rhi[d] = std::min(rhi[d - 1] * F, L.G[d]);
  }
  bool dense = false;
  for (int d = dfrom; d >= dto; --d) {
    if (!dense && rhi[d] - rlo[d] <= c) dense = true;
    propagate_level<SC>(L, d, g, c, dense, rlo[d], rhi[d]);
  }
}

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Recompute everything from the leaves and compare bit for bit.
template <int SC>
bool check_kernel(const Layout& L) {
  const uint32_t S = slots<SC>(L);
  const uint32_t Freal = static_cast<uint32_t>(std::min<uint64_t>(L.F, S));
  for (int d = L.D; d >= 1; --d) {
    for (uint64_t gg = 0; gg < L.G[d]; ++gg) {
      const double* grp = L.data + L.off[d] + gg * S;
      const double* P = L.pre + L.off[d] + gg * S;
      for (uint32_t j = Freal; j < S; ++j)
        if (!same_bits(grp[j], 0.0)) return false;  // padding slots
      double p = grp[0];
      if (!same_bits(P[0], p)) return false;
      for (uint32_t j = 1; j < S; ++j) {
        p += grp[j];
        if (!same_bits(P[j], p)) return false;
      }
      if (!same_bits(*L.node(d - 1, gg), p)) return false;
    }
    // nodes of level d-1 past its last real node (padding of its last group)
    if (d > 1)
      for (uint64_t k = L.G[d]; k < L.G[d - 1] * L.F; ++k)
        if (!same_bits(*L.node(d - 1, k), 0.0)) return false;
  }
  for (uint64_t i = L.cap; i < L.G[L.D] * L.F; ++i)
    if (!same_bits(*L.node(L.D, i), 0.0)) return false;
  return true;
}

template <int SC>
SumTree::Kernels make_kernels() {
  SumTree::Kernels k;
  k.sample = base::sample_kernel_for(SC);
  k.propagate = &propagate_kernel<SC>;
  k.write_recompute = &write_leaves_and_recompute<SC>;
  k.check = &check_kernel<SC>;
  return k;
}

SumTree::Kernels kernels_for(uint32_t S) {
  switch (S) {
    case 2: return make_kernels<2>();
    case 4: return make_kernels<4>();
    case 8: return make_kernels<8>();
    case 16: return make_kernels<16>();
    case 24: return make_kernels<24>();
    case 32: return make_kernels<32>();
    case 40: return make_kernels<40>();
    case 48: return make_kernels<48>();
    case 56: return make_kernels<56>();
    case 64: return make_kernels<64>();
    default: return make_kernels<0>();
  }
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

uint32_t stride_for(uint64_t F) {
  if (F <= 2) return 2;
  if (F <= 4) return 4;
  if (F <= 8) return 8;
  if (F > (uint64_t{1} << 31)) throw std::length_error("sum tree fanout too large");
  return static_cast<uint32_t>((F + 7) / 8 * 8);
}

uint64_t checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw std::length_error("sum tree too large");
  return r;
}

uint64_t checked_add(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw std::length_error("sum tree too large");
  return r;
}

}  // namespace

// ================================================================ ThreadPool
ThreadPool::ThreadPool(int nthreads) : n_(std::max(1, nthreads)) {
  threads_.reserve(n_ - 1);
  for (int t = 1; t < n_; ++t) threads_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true, std::memory_order_relaxed);
    gen_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

// Claim and run tasks of the current job until none is left; returns how
// many this thread ran.
int ThreadPool::work() {
  int ran = 0;
  for (;;) {
    const uint64_t v = claim_.fetch_add(1, std::memory_order_acq_rel);
    const uint32_t task = static_cast<uint32_t>(v), ntasks = static_cast<uint32_t>(v >> 32);
    if (task >= ntasks) return ran;
    // The job cannot finish (and fn_/ctx_ cannot change) before this claimed
    // task is counted in done_, so reading them now is safe.
    fn_(ctx_, static_cast<int>(task));
    done_.fetch_add(1, std::memory_order_acq_rel);
    ++ran;
  }
}

void ThreadPool::strike(int64_t now) {
  // Strikes within 10 s of each other double the pause (20 ms .. 1 s), so on
  // a persistently oversubscribed machine the threads cost next to nothing.
  const bool recent = last_strike_ns_ && now - last_strike_ns_ < 10000000000LL;
  backoff_ns_ = recent ? std::min<int64_t>(2 * backoff_ns_, 1000000000) : 20000000;
  last_strike_ns_ = now;
  backoff_until_ns_ = now + backoff_ns_;
  ++strikes_;
}

void ThreadPool::run_raw(int ntasks, void (*fn)(void*, int), void* ctx) {
  if (ntasks <= 0) return;
  if (n_ <= 1 || ntasks == 1) {
    for (int t = 0; t < ntasks; ++t) fn(ctx, t);
    return;
  }
  ++runs_;  // the first runs may start before the new workers do: no strikes then
  fn_ = fn;
  ctx_ = ctx;
  done_.store(0, std::memory_order_relaxed);
  claim_.store(static_cast<uint64_t>(ntasks) << 32, std::memory_order_release);
  bool wake;
  {
    std::lock_guard<std::mutex> lk(mu_);
    gen_.fetch_add(1, std::memory_order_release);
    wake = sleepers_ > 0;
  }
  if (wake) cv_.notify_all();
  last_cold_ = wake || runs_ == 1;
  const int64_t t0 = now_ns();
  const int mine = work();
  if (done_.load(std::memory_order_acquire) != ntasks) {
    // Only tasks a worker already claimed can be outstanding. If that worker
    // was preempted (busy machine), stop burning the core it may be waiting for.
    const int64_t t1 = now_ns();
    for (unsigned spins = 0; done_.load(std::memory_order_acquire) != ntasks; ++spins) {
      if (spins < 2048)
        PEARL_PAUSE();
      else
        std::this_thread::yield();
    }
    const int64_t t2 = now_ns();
    // A fair imbalance is at most about one task, i.e. comparable to our own
    // share; waiting far longer means a worker was not running.
    if (runs_ > 2 && t2 - t1 > 200000 + 2 * (t1 - t0)) strike(t2);
    return;
  }
  // Workers that were awake (spinning) when the job was posted but ran less
  // than a quarter of their fair share were not on a core: the machine has no
  // idle core for them, and their spinning only takes time from everyone.
  // (Workers that had to be woken up are given the benefit of the doubt.)
  const int theirs = ntasks - mine;
  if (!wake && runs_ > 2 && 4 * theirs * n_ < ntasks * (n_ - 1)) strike(now_ns());
}

bool ThreadPool::busy() const { return backoff_until_ns_ != 0 && now_ns() < backoff_until_ns_; }

void ThreadPool::worker() {
  using clock = std::chrono::steady_clock;
  // How long an idle worker spins before sleeping: long enough to bridge the
  // Python-side gap between back-to-back batch calls, short enough not to
  // steal a core from the rest of the program for long.
  constexpr auto kSpin = std::chrono::microseconds(200);
  uint64_t seen = 0;  // gen_ starts at 0 and is only bumped by run_raw / the destructor
  for (;;) {
    uint64_t g = gen_.load(std::memory_order_acquire);
    if (g == seen) {
      auto t0 = clock::now();
      unsigned spins = 0;
      while ((g = gen_.load(std::memory_order_acquire)) == seen) {
        PEARL_PAUSE();
        if ((++spins & 63) == 0 && clock::now() - t0 > kSpin) {
          std::unique_lock<std::mutex> lk(mu_);
          ++sleepers_;
          cv_.wait(lk, [&] { return gen_.load(std::memory_order_acquire) != seen; });
          --sleepers_;
          t0 = clock::now();
        }
      }
    }
    seen = g;
    if (stop_.load(std::memory_order_relaxed)) return;
    work();
  }
}

// ================================================================== SumTree
SumTree::SumTree(uint64_t capacity, uint64_t fanout, int threads) : fanout_(fanout) {
  if (capacity < 1) throw std::invalid_argument("sum tree capacity must be >= 1");
  if (fanout < 2) throw std::invalid_argument("sum tree fanout must be >= 2");
  // A fanout wider than the capacity means a single group; size it to the capacity.
  uint64_t F = std::min<uint64_t>(fanout, std::max<uint64_t>(capacity, 2));
  L_.cap = capacity;
  L_.F = F;
  L_.S = stride_for(F);
  L_.pow2 = (F & (F - 1)) == 0;
  L_.shift = L_.pow2 ? __builtin_ctzll(F) : 0;

  std::vector<uint64_t> gs;  // groups per level, leaves first
  uint64_t g = ceil_div(capacity, F);
  gs.push_back(g);
  while (g > 1) {
    g = ceil_div(g, F);
    gs.push_back(g);
  }
  if (gs.size() > static_cast<size_t>(kMaxLevels)) throw std::length_error("sum tree too deep");
  L_.D = static_cast<int>(gs.size());
  L_.G[0] = 1;
  for (int d = 1; d <= L_.D; ++d) L_.G[d] = gs[L_.D - d];

  uint64_t cur = 8;  // the root's cache line
  L_.off[0] = 0;
  for (int d = 1; d <= L_.D; ++d) {
    L_.off[d] = cur;
    const uint64_t n = checked_mul(L_.G[d], L_.S);
    cur = checked_add(cur, checked_add(n, 7) / 8 * 8);
  }
  const uint64_t half = cur;  // pre starts here, with the same offsets
  size_t bytes = checked_mul(checked_mul(cur, 2), sizeof(double));
  size_t align = 64;
  if (bytes >= (size_t{4} << 20)) align = size_t{2} << 20;  // let THP back it with 2 MiB pages
  bytes = checked_add(bytes, align - 1) / align * align;
  void* mem = std::aligned_alloc(align, bytes);
  if (!mem) throw std::bad_alloc();
#if defined(PEARL_HAVE_PTHREAD) && defined(MADV_HUGEPAGE)
  if (align > 64) madvise(mem, bytes, MADV_HUGEPAGE);
#endif
  std::memset(mem, 0, bytes);
  L_.data = static_cast<double*>(mem);
  L_.pre = L_.data + half;
  bytes_ = bytes;
  K_ = kernels_for(L_.S);
  const char* env = std::getenv("PEARL_CPU_ISA");  // "baseline" forces the portable kernel
  set_isa(env && *env ? env : "auto");
  set_threads(threads);
}

SumTree::~SumTree() {
  if (pool_ && pool_fork_epoch_ != g_fork_epoch.load()) (void)pool_.release();  // see pool()
  pool_.reset();
  std::free(L_.data);
}

void SumTree::set_threads(int threads) {
  if (threads < 1) throw std::invalid_argument("threads must be >= 1");
  threads_ = threads;
  race_sample_ = PathRace{};
  race_update_ = PathRace{};
  if (pool_ && pool_->size() != threads) {
    if (pool_fork_epoch_ != g_fork_epoch.load()) (void)pool_.release();
    pool_.reset();
  }
  groups_scratch_.resize(threads);
  items_scratch_.resize(threads);
}

ThreadPool* SumTree::pool() {
  const uint64_t epoch = g_fork_epoch.load(std::memory_order_relaxed);
  if (pool_ && pool_fork_epoch_ != epoch) (void)pool_.release();  // threads gone after fork: leak it
  if (!pool_) {
    pool_.reset(new ThreadPool(threads_));
    pool_fork_epoch_ = epoch;
  }
  return pool_.get();
}

bool SumTree::go_parallel(size_t n, size_t threshold, PathRace* race) {
  if (threads_ <= 1 || n < threshold) return false;
  if (tuning_.contention_guard && (pool()->busy() || (race && !race->pick_parallel()))) {
    ++stats_.guarded_calls;
    return false;
  }
  ++stats_.parallel_calls;
  return true;
}

namespace {
// Times one call for a PathRace (only when the batch was eligible to split).
struct RaceTimer {
  PathRace* race;
  const ThreadPool* pool;
  bool par;
  size_t n;
  int64_t t0;
  RaceTimer(PathRace* r, const ThreadPool* p, bool parallel, size_t items)
      : race(r), pool(p), par(parallel), n(items), t0(r ? now_ns() : 0) {}
  ~RaceTimer() {
    if (race)
      race->record(par, par && pool->last_run_cold(),
                   static_cast<double>(now_ns() - t0) / static_cast<double>(n));
  }
};
}  // namespace

ParallelStats SumTree::parallel_stats() const {
  ParallelStats s = stats_;
  s.strikes = pool_ ? pool_->strikes() : 0;
  return s;
}

int64_t SumTree::first_bad_index(const int64_t* idx, size_t n, uint64_t cap) {
  constexpr size_t BLK = 512;
  for (size_t b = 0; b < n; b += BLK) {
    const size_t e = std::min(n, b + BLK);
    unsigned bad = 0;
    for (size_t k = b; k < e; ++k) bad |= static_cast<uint64_t>(idx[k]) >= cap;
    if (bad)
      for (size_t k = b; k < e; ++k)
        if (static_cast<uint64_t>(idx[k]) >= cap) return static_cast<int64_t>(k);
  }
  return -1;
}

int64_t SumTree::first_bad_priority(const double* p, size_t n) {
  constexpr size_t BLK = 512;
  for (size_t b = 0; b < n; b += BLK) {
    const size_t e = std::min(n, b + BLK);
    unsigned bad = 0;
    for (size_t k = b; k < e; ++k) bad |= !((p[k] >= 0.0) & (p[k] <= DBL_MAX));
    if (bad)
      for (size_t k = b; k < e; ++k)
        if (!(p[k] >= 0.0 && p[k] <= DBL_MAX)) return static_cast<int64_t>(k);
  }
  return -1;
}

int64_t SumTree::first_bad_mass(const double* x, size_t n, double limit) {
  constexpr size_t BLK = 512;
  for (size_t b = 0; b < n; b += BLK) {
    const size_t e = std::min(n, b + BLK);
    unsigned bad = 0;
    for (size_t k = b; k < e; ++k) bad |= !((x[k] >= 0.0) & (x[k] <= limit));
    if (bad)
      for (size_t k = b; k < e; ++k)
        if (!(x[k] >= 0.0 && x[k] <= limit)) return static_cast<int64_t>(k);
  }
  return -1;
}

void SumTree::update(const int64_t* idx, const double* prio, size_t n) {
  if (n == 0) return;
  const bool eligible = threads_ > 1 && n >= tuning_.update_parallel_min && n < (size_t{1} << 32);
  const bool par = eligible && go_parallel(n, tuning_.update_parallel_min, &race_update_);
  RaceTimer timer(eligible && tuning_.contention_guard ? &race_update_ : nullptr, pool_.get(), par, n);
  if (par)
    update_parallel(idx, prio, n);
  else
    update_serial(idx, prio, n);
}

void SumTree::update_serial(const int64_t* idx, const double* prio, size_t n) {
  auto& g = groups_scratch_[0];
  if (g.size() < n) g.resize(n);
  if (L_.pow2 && L_.D >= 2 && L_.G[L_.D] > n) {
    K_.write_recompute(L_, idx, prio, nullptr, n, g.data());
    K_.propagate(L_, g.data(), n, L_.D - 1, 1, 0, 1);
    return;
  }
  write_leaves(L_, idx, prio, nullptr, n, g.data());
  K_.propagate(L_, g.data(), n, L_.D, 1, 0, 1);
}

// Task t owns a contiguous range of the groups of a split level ds (and so a
// contiguous range of leaves). Every task scans the whole batch in order,
// keeps the items in its range (duplicates of one index always land in the
// same task, in batch order, so the last one wins) and recomputes its subtrees
// up to level ds. The few nodes above ds are then recomputed densely by the
// caller. Each node is written by exactly one task, with the same pure
// function of the leaves as in the serial path, so the result is bit-identical
// to the serial one whatever the thread count or timing.
void SumTree::update_parallel(const int64_t* idx, const double* prio, size_t n) {
  const int T = threads_;
  int ds = 0;
  for (int d = 1; d <= L_.D; ++d)
    if (L_.G[d] >= static_cast<uint64_t>(8 * T)) {
      ds = d;
      break;
    }
  if (ds == 0) {
    update_serial(idx, prio, n);
    return;
  }
  uint64_t span = 1;  // leaves (incl. padding) under one group of level ds
  for (int d = ds; d <= L_.D; ++d) span *= L_.F;
  const uint64_t Gs = L_.G[ds];
  for (int t = 0; t < T; ++t) {
    if (groups_scratch_[t].size() < n) groups_scratch_[t].resize(n);
    if (items_scratch_[t].size() < n) items_scratch_[t].resize(n);
  }
  auto job = [&](int t) {
    const uint64_t lo = Gs * t / T, hi = Gs * (t + 1) / T;
    const uint64_t leaf_lo = lo * span, width = (hi - lo) * span;
    uint32_t* items = items_scratch_[t].data();
    size_t c = 0;
    for (size_t k = 0; k < n; ++k) {
      items[c] = static_cast<uint32_t>(k);
      c += (static_cast<uint64_t>(idx[k]) - leaf_lo) < width;
    }
    uint64_t* g = groups_scratch_[t].data();
    if (L_.pow2 && ds < L_.D && (hi - lo) * (span >> L_.shift) > c) {
      K_.write_recompute(L_, idx, prio, items, c, g);
      K_.propagate(L_, g, c, L_.D - 1, ds, lo, hi);
    } else {
      write_leaves(L_, idx, prio, items, c, g);
      K_.propagate(L_, g, c, L_.D, ds, lo, hi);
    }
  };
  pool()->run(T, job);
  K_.propagate(L_, nullptr, std::numeric_limits<size_t>::max(), ds - 1, 1, 0, 1);
}

void SumTree::get(const int64_t* idx, double* out, size_t n) {
  const double* leaves = L_.data + L_.off[L_.D];
  auto gather = [&](size_t b, size_t e) {
    if (L_.pow2) {
      for (size_t k = b; k < e; ++k) out[k] = leaves[idx[k]];
    } else {
      for (size_t k = b; k < e; ++k) out[k] = leaves[L_.leaf_pos(static_cast<uint64_t>(idx[k]))];
    }
  };
  if (go_parallel(n, tuning_.get_parallel_min, nullptr)) {
    const size_t chunk = size_t{1} << 14;
    const int ntasks = static_cast<int>((n + chunk - 1) / chunk);
    auto job = [&](int t) { gather(chunk * t, std::min(n, chunk * (t + 1))); };
    pool()->run(ntasks, job);
  } else {
    gather(0, n);
  }
}

void SumTree::sample(const double* x, int64_t* out, size_t n) {
  const bool eligible = threads_ > 1 && n >= tuning_.sample_parallel_min;
  const bool par = eligible && go_parallel(n, tuning_.sample_parallel_min, &race_sample_);
  RaceTimer timer(eligible && tuning_.contention_guard ? &race_sample_ : nullptr, pool_.get(), par, n);
  if (par) {
    // ~4 tasks per thread (multiples of the 16-query block) for balance.
    const size_t want = (n + 4 * threads_ - 1) / (4 * threads_);
    const size_t chunk = std::max<size_t>(256, (want + 15) / 16 * 16);
    const int ntasks = static_cast<int>((n + chunk - 1) / chunk);
    auto job = [&](int t) {
      const size_t b = chunk * t, e = std::min(n, b + chunk);
      K_.sample(L_, x + b, out + b, e - b);
    };
    pool()->run(ntasks, job);
  } else {
    K_.sample(L_, x, out, n);
  }
}

bool SumTree::set_isa(const std::string& name) {
#if PEARL_HAVE_AVX2_KERNEL
  static const bool has_avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
#else
  const bool has_avx2 = false;
#endif
  bool avx2;
  if (name == "auto")
    avx2 = has_avx2;
  else if (name == "avx2")
    avx2 = true;
  else if (name == "baseline" || name == "sse2")
    avx2 = false;
  else
    return false;
  if (avx2 && !has_avx2) return false;
#if PEARL_HAVE_AVX2_KERNEL
  if (avx2) {
    K_.sample = avx2::sample_kernel_for(L_.S);
    isa_ = "avx2";
    return true;
  }
#endif
  K_.sample = base::sample_kernel_for(L_.S);
  isa_ = "baseline";
  return true;
}

bool SumTree::check_consistency() const { return K_.check(L_); }

void SumTree::leaves(double* out) const {
  const double* leaves = L_.data + L_.off[L_.D];
  for (uint64_t i = 0; i < L_.cap; ++i) out[i] = leaves[L_.leaf_pos(i)];
}

}  // namespace pearl_cpu
