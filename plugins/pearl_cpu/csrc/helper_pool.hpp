// A help-first helper thread for the native learner steps (csrc/dqn_mlp.cpp's header explains the
// design; dqn_mlp.cpp and ac_mlp.cpp both use it).
//
// The caller posts a task, does its own share, then takes the task back and runs it itself if the
// helper has not started it (busy core, asleep): the caller never waits for a helper that an actor
// keeps off the core before it starts. If the helper has started but is still running after a short
// spin, the caller sleeps until it is done instead of spinning, so a helper preempted mid-task (an
// actor took its core) can be moved onto the caller's freed core (wait_done). An idle helper spins
// briefly (with sched_yield), then sleeps on a condition variable. Fork-aware (HelperSlot): a forked
// child never touches the parent's helper.

#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include <sched.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace pearl_native {

// Flushes denormal floats to zero on this thread while it lives (SSE's FTZ and DAZ bits), then restores
// the thread's mode. A learner's Adam moments drift into denormals (|x| < 1.2e-38) as training goes on,
// and arithmetic on them is slow: training the native SAC step on random Pendulum-sized data, 27% of the
// Adam moments were denormal after 1,800 steps and the 2-thread step had slowed from ~4.8 to 7.1 ms; with
// the flush none were, and it stayed at 4.2-4.8 ms (DQN 256-256: 30% denormal, ~650-700 us a step against
// ~585-640). XLA (JAX, SBX) and TensorFlow run their CPU kernels in this mode; torch's default keeps
// denormals, so a value under 1.2e-38 that torch keeps is 0 here (far inside the steps' tolerance against
// torch). A no-op off x86.
class FlushDenormals {
 public:
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;
#if defined(__x86_64__) || defined(__i386__)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }  // FTZ (bit 15), DAZ (bit 6)
  ~FlushDenormals() { _mm_setcsr(saved_); }

 private:
  unsigned int saved_;
#else
  FlushDenormals() = default;
#endif
};

// One helper thread running posted tasks, help-first (see the file's header).
// Only the thread that owns the kernel posts; one task at a time.
class Helper {
 public:
  Helper() : pid_(getpid()), th_([this] { loop(); }) {}
  pid_t pid() const { return pid_; }
  ~Helper() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    th_.join();
  }
  Helper(const Helper&) = delete;
  Helper& operator=(const Helper&) = delete;

  // Hand `task` to the helper; the caller must call finish() before posting again.
  void post(std::function<void()> task) {
    task_ = std::move(task);
    state_.store(kPosted, std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_seq_cst)) {
      std::lock_guard<std::mutex> lk(mu_);  // the helper checks the state under this lock before waiting
      cv_.notify_one();
    }
  }

  // The posted task has run when this returns: by the helper, or here if the helper had not started it.
  void finish() {
    int expect = kPosted;
    if (state_.compare_exchange_strong(expect, kIdle, std::memory_order_acq_rel)) {
      task_();  // not started: the caller runs it
    } else {
      wait_done();
      state_.store(kIdle, std::memory_order_relaxed);
    }
    task_ = nullptr;
  }

 private:
  enum : int { kIdle = 0, kPosted = 1, kRunning = 2, kDone = 3 };
  // After a task, look for the next one this long (a step posts several, tens of microseconds apart),
  // yielding the core to any other runnable thread between looks; then sleep.
  static constexpr std::chrono::microseconds kSpin{2000};
  // How long the caller spins for a started task before it sleeps (see wait_done): longer than the
  // usual imbalance between the two halves of a step's work, far shorter than a preempted thread's wait
  // for its core (a scheduler time slice, milliseconds).
  static constexpr std::chrono::microseconds kWaitSpin{50};

  // The task has started on the helper: spin while it is likely still running on its core, then sleep
  // until it is done. A helper that is still unfinished after kWaitSpin has most likely been preempted
  // (an actor took its core): spinning here would keep this core busy too, so the scheduler could not
  // move the helper (or the actor) onto it. Sleeping frees the core, and the idle core pulls a runnable
  // thread over at once.
  void wait_done() {
    const auto until = std::chrono::steady_clock::now() + kWaitSpin;
    for (int i = 0;; ++i) {
      if (state_.load(std::memory_order_acquire) == kDone) return;
      if ((i & 63) == 63 && std::chrono::steady_clock::now() >= until) break;
    }
    std::unique_lock<std::mutex> lk(mu_);
    caller_sleeping_.store(true, std::memory_order_seq_cst);
    done_cv_.wait(lk, [this] { return state_.load(std::memory_order_seq_cst) == kDone; });
    caller_sleeping_.store(false, std::memory_order_relaxed);
  }

  bool take() {
    int expect = kPosted;
    if (!state_.compare_exchange_strong(expect, kRunning, std::memory_order_acq_rel)) return false;
    task_();
    state_.store(kDone, std::memory_order_seq_cst);
    if (caller_sleeping_.load(std::memory_order_seq_cst)) {
      std::lock_guard<std::mutex> lk(mu_);  // the caller checks the state under this lock before waiting
      done_cv_.notify_one();
    }
    return true;
  }

  void loop() {
    const FlushDenormals ftz;  // the helper runs only steps' tasks, in the steps' mode
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + kSpin;
      bool ran = false;
      while (std::chrono::steady_clock::now() < until) {
        if (take()) {
          ran = true;
          break;
        }
        sched_yield();
      }
      if (ran) continue;
      std::unique_lock<std::mutex> lk(mu_);
      sleeping_.store(true, std::memory_order_seq_cst);
      cv_.wait(lk, [this] { return stop_ || state_.load(std::memory_order_seq_cst) == kPosted; });
      sleeping_.store(false, std::memory_order_seq_cst);
      if (stop_) return;
      lk.unlock();
      take();
    }
  }

  std::function<void()> task_;
  std::atomic<int> state_{kIdle};
  std::atomic<bool> sleeping_{false};
  std::mutex mu_;
  std::condition_variable cv_;       // the helper sleeps on it between tasks
  std::condition_variable done_cv_;  // the caller sleeps on it for a started task (wait_done)
  std::atomic<bool> caller_sleeping_{false};
  bool stop_ = false;
  const pid_t pid_;  // the process whose thread th_ is
  std::thread th_;   // last: started once everything above is built
};

// The kernel's helper, fork-aware: a forked child has the Helper's memory but not its thread (and its
// mutex and condition variable may be mid-use), so there it is never touched again (left allocated,
// neither joined nor destroyed: joining would hang) and get() makes a fresh one on first use.
class HelperSlot {
 public:
  HelperSlot() = default;
  HelperSlot(const HelperSlot&) = delete;
  HelperSlot& operator=(const HelperSlot&) = delete;
  ~HelperSlot() { reset(); }
  bool on() const { return on_; }
  void set(bool on) {
    on_ = on;
    if (!on) reset();
  }
  // The helper of this process, or nullptr when off.
  Helper* get() {
    if (!on_) return nullptr;
    if (p_ != nullptr && p_->pid() != getpid()) p_ = nullptr;  // a forked child: the parent's, left alone
    if (p_ == nullptr) p_ = new Helper();
    return p_;
  }

 private:
  void reset() {
    if (p_ != nullptr && p_->pid() == getpid()) delete p_;
    p_ = nullptr;
  }
  bool on_ = false;
  Helper* p_ = nullptr;
};

// Runs `mine` here and `theirs` on the helper (when there is one), both done on return.
template <typename A, typename B>
void both(Helper* helper, A&& mine, B&& theirs) {
  if (helper == nullptr) {
    mine();
    theirs();
    return;
  }
  helper->post(std::forward<B>(theirs));
  mine();
  helper->finish();
}

}  // namespace pearl_native
