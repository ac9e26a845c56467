// Native n-ary sum tree of PEARL's CPU backend (pure C++, no Python in here).
//
// The contract (semantics, bad-input rules) is pearl_core/sumtree.py; the
// Python-facing checks live in module.cpp, this file only assumes its inputs
// were validated (indices in range, priorities finite and >= 0, masses in
// [0, total * (1 + rtol)]).
//
// Memory layout
// =============
// One 64-byte aligned block of doubles (2 MiB aligned + MADV_HUGEPAGE when it
// is large, so random accesses do not also miss the TLB), in two halves with
// the same shape: the raw sums ("data") and their in-group prefixes ("pre").
//
//   data ─┬─ [ root | 0 0 0 0 0 0 0 ]                    level 0: 1 cache line
//         ├─ [ group 0 ]                                   level 1: 1 group
//         ├─ [ group 0 | group 1 | ... | group G2-1 ]     level 2: G2 = F groups
//         ┊
//         └─ [ group 0 | group 1 | ... | group GD-1 ]     level D: the leaves,
//   pre ──┬─ [ unused line ]                                GD = ceil(capacity / F)
//         ├─ [ prefixes of group 0 ]                       same offsets as data
//         ┊
//         └─ [ prefixes of leaf group 0 | ... ]
//
//   one group of data (the F children of one node, contiguous), S doubles:
//   ┌────┬────┬─────┬────────┬───────────────┐
//   │ c0 │ c1 │ ... │ c(F-1) │ zeros (S - F) │    c = child sums, or leaf
//   └────┴────┴─────┴────────┴───────────────┘        priorities at level D
//   the same group in pre:
//   ┌────┬───────┬─────┬────────┬───────────────────┐
//   │ c0 │ c0+c1 │ ... │ P(F-1) │ P(F-1) ... P(F-1) │  inclusive prefixes P
//   └────┴───────┴─────┴────────┴───────────────────┘
//
//   S = F rounded up to 2, 4, 8 or a multiple of 8 (S = F for powers of two).
//
// * Node k of level d (0-based, left to right) is the parent of group k of
//   level d+1 and lives in group k / F, slot k % F of level d. Leaf i is node i
//   of level D (at data + off[D] + i for power-of-two fanouts); the root is
//   data[0]. Walking down: child = node * F + slot.
// * Every level starts on a 64-byte boundary and S is 2, 4 or a multiple of 8,
//   so a group of >= 8 slots starts on a cache line and smaller ones never
//   straddle one. (Padding 2- and 4-slot groups to a full line would cost 4x /
//   2x the memory and the cache capacity that the latency-bound descent
//   needs, so they are packed at their natural alignment.)
// * Padding slots (s >= F in a group, leaves >= capacity) are always 0.0, so
//   kernels treat every group as S wide: 0 changes no sum and no prefix, and a
//   zero slot is never selected by sample().
// * sample() reads only pre (S independent compares per level instead of a
//   chain of S dependent additions), so its working set is half the block;
//   update() recomputes pre from data; get() reads data.
//
// Sums and drift
// ==============
// Every node is recomputed from its children whenever a leaf below it changes;
// no deltas are ever propagated. So there is no drift, duplicates in a batch are
// harmless, and every stored value is a pure function of the current leaves
// (independent of update history, batch order and thread count). A group's
// prefixes are P(0) = c0, P(j) = P(j-1) + c(j) in slot order, and its parent
// stores exactly P(S-1). Prefixes never decrease and stay equal across a zero
// child, so "the number of prefixes <= r" is the first child whose prefix
// exceeds r, and never a zero child. A mass >= the root total fails every
// level-1 compare and takes the drift fallback (last non-zero child, then the
// right edge all the way down).

#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace pearl_cpu {

// --------------------------------------------------------------------------
// A small persistent pool. run(ntasks, fn) executes fn(task) for every task in
// [0, ntasks) and returns when all are done. Tasks are claimed dynamically with
// one atomic add, and the caller claims tasks too: if a worker is slow to wake
// (or another process holds its core) the caller simply does more of the
// work, so a parallel call is never much slower than a serial one. Workers
// spin briefly after a job (back-to-back batches then start within ~100 ns)
// and then sleep on a condition variable. Not reentrant: one run() at a time
// (the tree's mutex guarantees that).
//
// Contention guard: on an oversubscribed machine the workers help little and
// hurt a lot: a spinning worker takes CPU time from the caller, and one that
// is preempted while holding a claimed task makes the caller wait for the OS
// to run it again (milliseconds, far more than the batch takes serially). So
// when awake workers ran less than a quarter of their share of a job, or the
// caller waited much longer than its own share of the work, the pool reports
// busy() for a while (20 ms, doubling up to 1 s while it keeps happening);
// callers run serially meanwhile and the workers go to sleep.
class ThreadPool {
 public:
  explicit ThreadPool(int nthreads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_; }
  bool busy() const;
  uint64_t strikes() const { return strikes_; }
  // Whether the last run() had to start or wake its workers.
  bool last_run_cold() const { return last_cold_; }

  template <class Fn>
  void run(int ntasks, Fn& fn) {
    run_raw(ntasks, &invoke<Fn>, &fn);
  }

 private:
  template <class Fn>
  static void invoke(void* ctx, int tid) {
    (*static_cast<Fn*>(ctx))(tid);
  }
  void run_raw(int ntasks, void (*fn)(void*, int), void* ctx);
  int work();
  void strike(int64_t now_ns);
  void worker();

  int n_;
  std::vector<std::thread> threads_;
  void (*fn_)(void*, int) = nullptr;
  void* ctx_ = nullptr;
  alignas(64) std::atomic<uint64_t> gen_{0};     // bumped per job: wakes workers
  alignas(64) std::atomic<uint64_t> claim_{0};   // (ntasks << 32) | next task
  alignas(64) std::atomic<int> done_{0};         // tasks finished
  alignas(64) std::mutex mu_;
  std::condition_variable cv_;
  int sleepers_ = 0;
  std::atomic<bool> stop_{false};
  int64_t backoff_until_ns_ = 0;  // steady clock; only touched by the caller of run()
  int64_t backoff_ns_ = 0;
  int64_t last_strike_ns_ = 0;
  uint64_t strikes_ = 0;
  uint64_t runs_ = 0;
  bool last_cold_ = true;
};

// --------------------------------------------------------------------------
constexpr int kMaxLevels = 66;  // fanout 2, capacity < 2^64 needs 64

struct Layout {
  double* data = nullptr;  // raw sums: root at data[0]; level d starts at data + off[d]
  double* pre = nullptr;   // in-group prefixes, same offsets
  uint64_t cap = 0;        // number of real leaves
  uint64_t F = 0;          // fanout used for index arithmetic
  uint32_t S = 0;          // slots per group (F padded, see above)
  int D = 0;               // number of group levels; leaves are level D
  bool pow2 = false;       // F is a power of two (then S == F)
  int shift = 0;           // log2(F) when pow2
  uint64_t off[kMaxLevels + 1] = {};  // offset of level d in doubles (off[0] = 0: root)
  uint64_t G[kMaxLevels + 1] = {};    // number of groups of level d (G[0] = 1: the root "group")

  uint64_t div(uint64_t n) const { return pow2 ? (n >> shift) : (n / F); }
  // Position of node n inside its level (leaf i: leaf_pos(i) past off[D]).
  uint64_t pos(uint64_t n) const { return pow2 ? n : (n / F) * S + n % F; }
  uint64_t leaf_pos(uint64_t i) const { return pos(i); }
  // Address of (the raw sum of) node n of level d (d = 0: the root).
  double* node(int d, uint64_t n) const { return data + off[d] + pos(n); }
};

// Thresholds (items per call) above which a batch is split across threads.
// Measured with scripts/bench_native.py --thresholds on a 2-core EPYC
// (scripts/RESULTS.md).
struct Tuning {
  size_t sample_parallel_min = 1024;
  size_t update_parallel_min = 256;
  size_t get_parallel_min = 1u << 16;
  bool contention_guard = true;  // honour ThreadPool::busy() and PathRace (off: always split; tests)
};

struct ParallelStats {
  uint64_t parallel_calls = 0;  // batches split across threads
  uint64_t guarded_calls = 0;   // big enough, but run serially: pool busy() or slower
  uint64_t strikes = 0;         // times the pool detected contention
};

// Races the serial and the threaded path of one operation on big batches:
// keeps a moving average of the time per item of each, takes the threaded one
// only while it is clearly faster, and probes the other one now and then,
// so a machine whose other cores are busy (where splitting only adds time
// slicing) settles on serial, and an idle one on threads. Probes come every
// 32 calls after the winner changes, and twice as far apart each time they
// confirm it (up to every 1024 calls), so they cost little either way.
struct PathRace {
  double serial_ns = 0.0, parallel_ns = 0.0;  // ns per item (0: not measured yet)
  bool winner_parallel = true;
  uint32_t interval = 32, countdown = 32, probes_left = 0;
  bool last_par_cold = false;

  bool pick_parallel() {
    if (parallel_ns == 0.0) return true;
    if (serial_ns == 0.0) return false;
    // Hysteresis: the threaded path must be 15% faster to win, and loses
    // again only when it is less than 5% faster, so noise does not flip it.
    const bool par = parallel_ns < (winner_parallel ? 0.95 : 0.85) * serial_ns;
    if (par != winner_parallel) {
      winner_parallel = par;
      interval = countdown = 32;
      probes_left = 0;
    }
    if (probes_left > 0) {
      --probes_left;
      return !par;
    }
    if (--countdown == 0) {
      interval = interval < 1024 ? 2 * interval : interval;
      countdown = interval;
      // The threaded path is probed twice in a row: its first run may only
      // wake the sleeping workers (and is then not recorded).
      probes_left = par ? 0 : 1;
      return !par;
    }
    return par;
  }
  // cold: a threaded run that had to start or wake its workers. It is not
  // recorded, unless the call just before was a cold threaded run too: then
  // calls come further apart than the workers stay awake, and cold runs are
  // the steady state.
  void record(bool par, bool cold, double ns_per_item) {
    const bool skip = par && cold && !last_par_cold;
    last_par_cold = par && cold;
    if (skip) return;
    double& e = par ? parallel_ns : serial_ns;
    if (e != 0.0 && par != winner_parallel &&
        (ns_per_item < 0.75 * e || ns_per_item > 1.25 * e) && countdown > 32) {
      // A probe that disagrees with its average: the machine changed. Probe
      // again soon instead of waiting out a long interval.
      interval = countdown = 32;
    }
    e = e == 0.0 ? ns_per_item : 0.875 * e + 0.125 * ns_per_item;
  }
};

class SumTree {
 public:
  SumTree(uint64_t capacity, uint64_t fanout, int threads);
  ~SumTree();
  SumTree(const SumTree&) = delete;
  SumTree& operator=(const SumTree&) = delete;

  uint64_t capacity() const { return L_.cap; }
  uint64_t fanout() const { return fanout_; }
  int depth() const { return L_.D; }
  uint32_t group_slots() const { return L_.S; }
  size_t memory_bytes() const { return bytes_; }
  int threads() const { return threads_; }
  void set_threads(int threads);  // caller holds mu
  Tuning& tuning() { return tuning_; }
  ParallelStats parallel_stats() const;
  // Instruction set of the sample kernel: "auto" (AVX2 when the CPU has it),
  // "avx2" or "baseline". Returns false (and changes nothing) if unavailable.
  bool set_isa(const std::string& name);
  const std::string& isa() const { return isa_; }

  double total() const { return L_.data[0]; }

  // --- validation helpers (pure, no tree state): index of the first bad item or -1
  static int64_t first_bad_index(const int64_t* idx, size_t n, uint64_t cap);
  static int64_t first_bad_priority(const double* p, size_t n);
  static int64_t first_bad_mass(const double* x, size_t n, double limit);

  // --- operations on validated input; caller holds mu
  void update(const int64_t* idx, const double* prio, size_t n);
  void get(const int64_t* idx, double* out, size_t n);
  void sample(const double* x, int64_t* out, size_t n);

  // Recompute every inner node from its children and compare bit for bit.
  bool check_consistency() const;
  // Copy of the leaf priorities (capacity doubles).
  void leaves(double* out) const;

  // Serialises operations on one tree (Python threads may call concurrently
  // once the GIL is released). Lock order: never wait for the GIL while
  // holding mu.
  std::mutex mu;

  struct Kernels {
    void (*sample)(const Layout&, const double*, int64_t*, size_t);
    void (*propagate)(const Layout&, uint64_t*, size_t, int, int, uint64_t, uint64_t);
    void (*write_recompute)(const Layout&, const int64_t*, const double*, const uint32_t*, size_t,
                            uint64_t*);
    bool (*check)(const Layout&);
  };

 private:
  ThreadPool* pool();
  bool go_parallel(size_t n, size_t threshold, PathRace* race);
  void update_serial(const int64_t* idx, const double* prio, size_t n);
  void update_parallel(const int64_t* idx, const double* prio, size_t n);

  Layout L_;
  uint64_t fanout_;
  size_t bytes_ = 0;
  int threads_ = 1;
  Tuning tuning_;
  Kernels K_{};
  std::string isa_ = "baseline";
  std::unique_ptr<ThreadPool> pool_;
  uint64_t pool_fork_epoch_ = 0;
  ParallelStats stats_;
  PathRace race_sample_, race_update_;
  // per-thread scratch (grown, never shrunk): group indices and batch positions
  std::vector<std::vector<uint64_t>> groups_scratch_;
  std::vector<std::vector<uint32_t>> items_scratch_;
};

}  // namespace pearl_cpu
