// pearl_cpu._learner_ac: one actor-critic update of ReLU MLPs as a single native call.
//
// Why: pearl_core's TD3, DDPG and SAC trainers run eager torch (autograd, a few hundred small
// ops per update) on one thread; at 256-256 networks and batch 256 most of an update is the
// matrix products, the rest dispatch. Here the products call the BLAS numpy uses (its
// cblas_sgemm, handed over as a function pointer, as csrc/dqn_mlp.cpp does) and everything
// between them is fused loops.
//
// Two kernels, each the torch trainer's update_policy step for step (the trainers' code is the
// specification; plugins/pearl_cpu/tests/test_cpu_learner_actor_critic.py checks them against it):
//
// TD3MLPKernel (TD3 with 2 critics, DDPG with 1; pearl_core/algorithms/td3.py, ddpg.py):
//   1. a' = tanh(mu'(s')) (+ noise, then clamped to [-1, 1], when the caller passes the smoothing
//      noise: TD3 draws and clips it in torch); q' = min_i Qi'(s', a');
//      y = r + discount[b] * (1 - done) * q';
//   2. delta_i = Qi(s, a) - y; loss = mean(w * sum_i delta_i^2); backward; global gradient-norm
//      clipping over every critic (torch.nn.utils.clip_grad_norm_); Adam (the critics' optimizer);
//   3. when the caller says an actor step is due: loss = -mean(Q1(s, tanh(mu(s)))) with the updated
//      critic 1, gradients for the actor only, clipping, Adam (the actor's optimizer); then the
//      Polyak step of every target (torch's lerp).
//   Returns (|delta_1| + |delta_2|) / 2 per sample (|delta_1| with one critic), the critic loss,
//   mean Q1(s, a), and the actor loss (NaN when no actor step ran).
//
// SACMLPKernel (pearl_core/algorithms/sac.py):
//   sample(x, eps): [m | l] = actor(x), l clamped to [-20, 2], u = m + exp(l) eps, a = tanh(u),
//     log pi = sum_j [-(eps^2 / 2 + l + log(2 pi) / 2) - 2 (log 2 - u - softplus(-2u))];
//   1. (a', lp') = sample(s', eps_next); y = r + discount[b] (1 - done) (min_i Qi'(s', a') - alpha lp');
//   2. the critic step of TD3MLPKernel;
//   3. (a, lp) = sample(s, eps_pi); loss = mean(alpha lp - min_i Qi(s, a)) with the updated critics,
//      gradients for the actor only, clipping, Adam;
//   4. with automatic entropy tuning: loss = -mean(log_alpha (lp + target_entropy)), Adam on
//      log_alpha (no clipping);
//   5. the Polyak step of both target critics.
//   The random draws (eps_next, eps_pi, TD3's noise) are the caller's: the trainer draws them from
//   its own torch generator, in the order and shapes its torch path does.
//
// Parameters, target parameters and Adam state are the caller's arrays (numpy views of the torch
// tensors), held by reference for the kernel's life and written in place. Every per-call input is
// checked before anything is written: bad input raises ValueError and changes nothing. The GIL is
// released for the arithmetic.
//
// Threads (`threads` = 2): independent work runs on the caller's thread and one help-first helper
// (csrc/helper_pool.hpp, the DQN step's design): the target networks' forwards next to the online
// critics' forwards and the actor's forward on s (the critic step does not change the actor, so step
// 3's policy output is computed there, not alone after the critic step), critic 1's backward next to
// critic 2's, the two critics' forwards and input gradients in SAC's actor step, each layer's weight
// gradient next to its input gradient where one network is back-propagated alone, half of every Adam
// update next to the other half, and the Polyak steps. Every product and loop is the same call on the
// same data whichever thread runs it, so the result is bitwise that of `threads` = 1 (the tests check
// it). BLAS then runs one thread in each. Both threads flush denormals to zero during a step
// (FlushDenormals, csrc/helper_pool.hpp).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "helper_pool.hpp"
#include "learner_common.hpp"

namespace py = pybind11;
using namespace pearl_native;

namespace {

using Bufs = std::vector<std::vector<float>>;

struct Lin {
  int64_t in = 0, out = 0;
  float *W = nullptr, *b = nullptr;    // online parameters
  float *Wt = nullptr, *bt = nullptr;  // target parameters (nullptr: the network has no target)
  float *gW = nullptr, *gb = nullptr;  // gradients, in the optimizer group's flat buffer
};

struct Net {
  std::string name;
  std::vector<Lin> L;
  bool has_target = false;
  int64_t in() const { return L.front().in; }
  int64_t out() const { return L.back().out; }
};

// The parameters of one torch optimizer (in its order), their Adam state and gradients.
struct Group {
  std::vector<float*> p, m, v;
  std::vector<int64_t> n, off;  // sizes, and offsets into grads
  float* steps = nullptr;
  std::vector<float> grads;  // flat; every parameter's gradient is a slice
};

class Kernel {
 protected:
  Kernel(const char* who, uintptr_t sgemm, bool ilp64, int64_t batch) : who_(who), B_(batch) {
    if (sgemm == 0) fail(who_, "no sgemm function pointer");
    if (B_ < 1) fail(who_, "batch size must be >= 1");
    gemm_.fn = sgemm;
    gemm_.ilp64 = ilp64;
  }

  // A network from [(W, b), ...] (and its target, when `target` is not None).
  Net parse_net(const std::string& name, const py::handle& online_obj, const py::handle& target_obj) {
    Net net;
    net.name = name;
    auto online = online_obj.cast<py::list>();
    const size_t L = online.size();
    if (L == 0) fail(who_, name + " has no layers");
    net.has_target = !target_obj.is_none();
    py::list target;
    if (net.has_target) {
      target = target_obj.cast<py::list>();
      if (target.size() != L) fail(who_, name + " and its target differ in depth");
    }
    for (size_t i = 0; i < L; ++i) {
      auto pair = online[i].cast<py::sequence>();
      if (pair.size() != 2) fail(who_, name + " layer " + std::to_string(i) + " must be (weight, bias)");
      if (!py::isinstance<py::array>(pair[0])) fail(who_, name + " layer " + std::to_string(i) + " weight is not a numpy array");
      auto W0 = pair[0].cast<py::array>();
      if (W0.ndim() != 2) fail(who_, name + " layer " + std::to_string(i) + " weight must be 2-D");
      Lin l;
      l.out = W0.shape(0);
      l.in = W0.shape(1);
      const std::string n = name + " layer " + std::to_string(i);
      if (i > 0 && l.in != net.L.back().out)
        fail(who_, n + " takes " + std::to_string(l.in) + " inputs; the previous layer gives " +
                       std::to_string(net.L.back().out));
      l.W = keep(held(who_, pair[0], {l.out, l.in}, n + " weight"));
      l.b = keep(held(who_, pair[1], {l.out}, n + " bias"));
      if (net.has_target) {
        auto tpair = target[i].cast<py::sequence>();
        if (tpair.size() != 2) fail(who_, name + " target layer " + std::to_string(i) + " must be (weight, bias)");
        l.Wt = keep(held(who_, tpair[0], {l.out, l.in}, n + " target weight"));
        l.bt = keep(held(who_, tpair[1], {l.out}, n + " target bias"));
      }
      net.L.push_back(l);
    }
    return net;
  }

  // The Adam state of the optimizer over `nets` (parameters in order W0, b0, W1, ... per net).
  Group parse_group(const std::string& name, const std::vector<Net*>& nets, const py::handle& m_obj,
                    const py::handle& v_obj, const py::handle& steps_obj) {
    Group g;
    auto ms = m_obj.cast<py::list>();
    auto vs = v_obj.cast<py::list>();
    size_t count = 0;
    int64_t flat = 0;
    for (const Net* net : nets)
      for (const Lin& l : net->L) {
        count += 2;
        flat += l.out * l.in + l.out;
      }
    if (ms.size() != count || vs.size() != count)
      fail(who_, "expected " + std::to_string(count) + " " + name + " Adam moment arrays of each kind; found " +
                     std::to_string(ms.size()) + " exp_avg and " + std::to_string(vs.size()) + " exp_avg_sq");
    g.grads.assign(static_cast<size_t>(flat), 0.0f);
    size_t k = 0;
    int64_t off = 0;
    for (Net* net : nets) {
      for (size_t i = 0; i < net->L.size(); ++i) {
        Lin& l = net->L[i];
        const std::string n = net->name + " layer " + std::to_string(i);
        for (int part = 0; part < 2; ++part, ++k) {
          const std::vector<py::ssize_t> shape =
              part == 0 ? std::vector<py::ssize_t>{l.out, l.in} : std::vector<py::ssize_t>{l.out};
          const std::string what = n + (part == 0 ? " weight" : " bias");
          g.p.push_back(part == 0 ? l.W : l.b);
          g.m.push_back(keep(held(who_, ms[k], shape, what + " exp_avg")));
          g.v.push_back(keep(held(who_, vs[k], shape, what + " exp_avg_sq")));
          const int64_t sz = part == 0 ? l.out * l.in : l.out;
          g.n.push_back(sz);
          g.off.push_back(off);
          (part == 0 ? l.gW : l.gb) = g.grads.data() + off;
          off += sz;
        }
      }
    }
    g.steps = keep(held(who_, steps_obj, {static_cast<py::ssize_t>(count)}, name + " Adam step counters"));
    return g;
  }

  float* keep(F32 arr) {
    float* p = arr.mutable_data();
    keep_.push_back(std::move(arr));
    return p;
  }

  static Bufs bufs(const Net& net, int64_t B) {
    Bufs out;
    for (const Lin& l : net.L) out.emplace_back(static_cast<size_t>(B * l.out));
    return out;
  }

  // net(x) (online, or the target), x (B x in); layer i's output (ReLU applied, except the last) in acts[i].
  const float* forward(const Net& net, const float* x, bool target, Bufs& acts) const {
    const size_t L = net.L.size();
    for (size_t i = 0; i < L; ++i) {
      const Lin& l = net.L[i];
      const float* W = target ? l.Wt : l.W;
      const float* b = target ? l.bt : l.b;
      float* out = acts[i].data();
      gemm_(false, true, B_, l.out, l.in, x, l.in, W, l.in, 0.0f, out, l.out);
      const bool relu = i + 1 < L;
      for (int64_t r = 0; r < B_; ++r) {
        float* row = out + r * l.out;
        if (relu) {
          for (int64_t j = 0; j < l.out; ++j) {
            const float v = row[j] + b[j];
            row[j] = v > 0.0f ? v : 0.0f;
          }
        } else {
          for (int64_t j = 0; j < l.out; ++j) row[j] += b[j];
        }
      }
      x = out;
    }
    return x;
  }

  // Back-propagates grads[L-1] (dLoss/d output, B x out) through the online network whose forward
  // on x left `acts`. weights: write every layer's weight and bias gradient; gin (B x nc): the
  // gradient of the input's columns [c0, c0 + nc). grads[i] are overwritten on the way down.
  // With a helper (hp), each layer's weight gradient is computed there, next to its input gradient here.
  void backward(const Net& net, const float* x, const Bufs& acts, Bufs& grads, bool weights, float* gin, int64_t c0,
                int64_t nc, Helper* hp = nullptr) const {
    const int64_t B = B_;
    for (size_t ii = net.L.size(); ii-- > 0;) {
      const Lin& l = net.L[ii];
      const float* g = grads[ii].data();
      const float* inp = ii ? acts[ii - 1].data() : x;
      auto wgrads = [this, &l, g, inp, B, weights] {
        if (!weights) return;
        gemm_(true, false, l.out, l.in, B, g, l.out, inp, l.in, 0.0f, l.gW, l.in);  // dW = g^T inp
        std::fill(l.gb, l.gb + l.out, 0.0f);
        for (int64_t r = 0; r < B; ++r) {
          const float* row = g + r * l.out;
          for (int64_t j = 0; j < l.out; ++j) l.gb[j] += row[j];
        }
      };
      auto xgrads = [&, g, inp] {
        if (ii) {
          float* gp = grads[ii - 1].data();
          gemm_(false, false, B, l.in, l.out, g, l.out, l.W, l.in, 0.0f, gp, l.in);  // dX = g W
          for (int64_t e = 0; e < B * l.in; ++e) gp[e] = inp[e] > 0.0f ? gp[e] : 0.0f;  // ReLU'
        } else if (gin != nullptr) {
          gemm_(false, false, B, nc, l.out, g, l.out, l.W + c0, l.in, 0.0f, gin, nc);  // columns of g W
        }
      };
      if (weights && (ii || gin != nullptr)) {
        both(hp, xgrads, wgrads);
      } else {
        wgrads();
        xgrads();
      }
    }
  }

  // Clipping (max_norm > 0) and one Adam step over the group (with a helper: it takes the second
  // half of every parameter array; Adam is elementwise, so the split changes no result).
  void step_group(Group& g, double max_norm, const AdamHP& h, Helper* hp) {
    const float c = clip_coef(g.grads.data(), g.grads.size(), max_norm);
    if (c < 1.0f)
      for (float& e : g.grads) e *= c;
    steps_.resize(g.p.size());
    for (size_t i = 0; i < g.p.size(); ++i) steps_[i] = g.steps[i] += 1.0f;
    auto part = [&](int which) {  // 0: everything, 1: first halves, 2: second halves
      for (size_t i = 0; i < g.p.size(); ++i) {
        const int64_t n = g.n[i], lo = which == 2 ? n / 2 : 0, hi = which == 1 ? n / 2 : n;
        const float* gr = g.grads.data() + g.off[i];
        adam(g.p[i] + lo, gr + lo, g.m[i] + lo, g.v[i] + lo, hi - lo, steps_[i], h.lr, h.b1, h.b2, h.eps);
      }
    };
    if (hp != nullptr) {
      both(hp, [&] { part(1); }, [&] { part(2); });
    } else {
      part(0);
    }
  }

  // target <- lerp(target, online, tau), as torch's lerp: t + w (s - t) for w < 0.5, else s - (s - t) (1 - w).
  static void polyak(const Net& net, float tau) {
    auto lerp = [tau](float* t, const float* s, int64_t n) {
      if (std::fabs(tau) < 0.5f) {
        for (int64_t e = 0; e < n; ++e) t[e] = t[e] + tau * (s[e] - t[e]);
      } else {
        const float om = 1.0f - tau;
        for (int64_t e = 0; e < n; ++e) t[e] = s[e] - (s[e] - t[e]) * om;
      }
    };
    for (const Lin& l : net.L) {
      lerp(l.Wt, l.W, l.out * l.in);
      lerp(l.bt, l.b, l.out);
    }
  }

  // [x | a] rows into out (B x (F + A)).
  void concat(const float* x, int64_t F, const float* a, int64_t A, float* out) const {
    for (int64_t r = 0; r < B_; ++r) {
      std::copy(x + r * F, x + (r + 1) * F, out + r * (F + A));
      std::copy(a + r * A, a + (r + 1) * A, out + r * (F + A) + F);
    }
  }

  // The online critics on sa (B x (F + A)), into c_acts_.
  void critic_forward(const float* sa) {
    for (size_t c = 0; c < critics_.size(); ++c) forward(critics_[c], sa, false, c_acts_[c]);
  }

  // The rest of the critic step shared by both kernels (critic_forward(sa) has run): targets y given;
  // returns the critic loss, writes td and the sum of Q1(s, a).
  double critic_step(const float* sa, const float* y, const float* w, float* td, double max_norm, const AdamHP& h,
                     double* q1sum, Helper* hp) {
    const int64_t B = B_;
    const size_t nc = critics_.size();
    const float invB = 1.0f / static_cast<float>(B);
    const float* q[2] = {nullptr, nullptr};
    for (size_t c = 0; c < nc; ++c) q[c] = c_acts_[c][critics_[c].L.size() - 1].data();
    double loss = 0.0, qs = 0.0;
    for (int64_t r = 0; r < B; ++r) {
      float sq = 0.0f, ad = 0.0f;
      for (size_t c = 0; c < nc; ++c) {
        const float d = q[c][r] - y[r];
        sq += d * d;
        ad += std::fabs(d);
        // d mean(w * sum d^2) / d q_c = (1 / B) w * (2 d)
        c_grads_[c][critics_[c].L.size() - 1][r] = (invB * w[r]) * (2.0f * d);
      }
      loss += static_cast<double>(w[r] * sq);
      qs += q[0][r];
      td[r] = nc == 2 ? ad * 0.5f : ad;
    }
    if (nc == 2) {
      both(hp, [&] { backward(critics_[0], sa, c_acts_[0], c_grads_[0], true, nullptr, 0, 0); },
           [&] { backward(critics_[1], sa, c_acts_[1], c_grads_[1], true, nullptr, 0, 0); });
    } else {
      backward(critics_[0], sa, c_acts_[0], c_grads_[0], true, nullptr, 0, 0, hp);
    }
    step_group(critic_g_, max_norm, h, hp);
    *q1sum = qs;
    return loss / static_cast<double>(B);
  }

  // Checks shared by both kernels' step (nothing is written before they pass).
  struct Batch {
    const float *obs, *act, *rew, *nobs, *w, *disc;
    const bool* done;
  };
  Batch check_batch(const py::handle& obs, const py::handle& act, const py::handle& rew, const py::handle& nobs,
                    const py::handle& done, const py::handle& w, const py::handle& disc, int64_t F, int64_t A) {
    const int64_t B = B_;
    Batch b;
    b.obs = checked<float>(who_, obs, {B, F}, "obs").data();
    b.act = checked<float>(who_, act, {B, A}, "actions").data();
    b.rew = checked<float>(who_, rew, {B}, "rewards").data();
    b.nobs = checked<float>(who_, nobs, {B, F}, "next_obs").data();
    b.done = checked<bool>(who_, done, {B}, "done").data();
    b.w = checked<float>(who_, w, {B}, "weights").data();
    b.disc = checked<float>(who_, disc, {B}, "discount").data();
    for (int64_t i = 0; i < B; ++i)
      if (!(b.disc[i] >= 0.0f && b.disc[i] <= 1.0f))
        fail(who_, "discount[" + std::to_string(i) + "] = " + std::to_string(b.disc[i]) + " is outside [0, 1]");
    return b;
  }

  void check_common(double max_grad_norm, double tau) const {
    if (!(max_grad_norm >= 0.0) || std::isinf(max_grad_norm))
      fail(who_, "max_grad_norm must be a finite number >= 0 (0: no clipping)");
    if (!(tau > 0.0 && tau <= 1.0)) fail(who_, "tau must be in (0, 1]");
  }

  void check_widths(const Net& actor, int64_t actor_out) {
    const int64_t F = actor.in(), A = act_dim_;
    if (actor.out() != actor_out)
      fail(who_, "actor gives " + std::to_string(actor.out()) + " outputs; expected " + std::to_string(actor_out));
    for (const Net& c : critics_) {
      if (c.in() != F + A)
        fail(who_, c.name + " takes " + std::to_string(c.in()) + " inputs; expected obs + action = " +
                       std::to_string(F + A));
      if (c.out() != 1) fail(who_, c.name + " gives " + std::to_string(c.out()) + " outputs; expected 1");
    }
  }

  void critic_buffers() {
    for (const Net& c : critics_) {
      c_acts_.push_back(bufs(c, B_));
      c_grads_.push_back(bufs(c, B_));
      ct_acts_.push_back(bufs(c, B_));
    }
  }

  std::string who_;
  Gemm gemm_;
  int64_t B_;
  int64_t act_dim_ = 0;
  std::vector<F32> keep_;
  std::vector<Net> critics_;  // reserved up front: pointers into it are held
  Group critic_g_;
  std::vector<Bufs> c_acts_, c_grads_, ct_acts_;
  std::vector<float> steps_;
  HelperSlot helper_;  // threads >= 2 (see set_threads)

 public:
  int64_t batch() const { return B_; }
  int64_t n_critics() const { return static_cast<int64_t>(critics_.size()); }
  int64_t act_dim() const { return act_dim_; }
  int threads() const { return helper_.on() ? 2 : 1; }
  // 1: the caller's thread only; >= 2: the caller's and one helper.
  void set_threads(int n) {
    if (n < 1) fail(who_, "threads = " + std::to_string(n) + "; expected an integer >= 1");
    helper_.set(n >= 2);
  }
};

// ---------------------------------------------------------------------------------------------
class TD3MLPKernel : public Kernel {
 public:
  TD3MLPKernel(uintptr_t sgemm, bool ilp64, const py::list& actor, const py::list& actor_target,
               const py::list& critics, const py::list& critic_targets, const py::tuple& actor_adam,
               const py::tuple& critic_adam, int64_t batch)
      : Kernel("pearl_cpu TD3 kernel", sgemm, ilp64, batch) {
    actor_ = parse_net("actor", actor, actor_target);
    const size_t nc = critics.size();
    if (nc != 1 && nc != 2) fail(who_, "expected 1 or 2 critics; found " + std::to_string(nc));
    if (critic_targets.size() != nc) fail(who_, "expected one target per critic");
    critics_.reserve(2);
    for (size_t c = 0; c < nc; ++c)
      critics_.push_back(parse_net("critic" + std::to_string(c + 1), critics[c], critic_targets[c]));
    act_dim_ = actor_.out();
    check_widths(actor_, act_dim_);
    if (actor_adam.size() != 3 || critic_adam.size() != 3)
      fail(who_, "actor_adam and critic_adam must be (exp_avgs, exp_avg_sqs, steps)");
    actor_g_ = parse_group("actor", {&actor_}, actor_adam[0], actor_adam[1], actor_adam[2]);
    std::vector<Net*> cn;
    for (Net& c : critics_) cn.push_back(&c);
    critic_g_ = parse_group("critic", cn, critic_adam[0], critic_adam[1], critic_adam[2]);
    const int64_t F = actor_.in(), A = act_dim_;
    critic_buffers();
    a_acts_ = bufs(actor_, B_);
    a_grads_ = bufs(actor_, B_);
    at_acts_ = bufs(actor_, B_);
    sa_.resize(B_ * (F + A));
    nsa_.resize(B_ * (F + A));
    pi_.resize(B_ * A);
    na_.resize(B_ * A);
    dpi_.resize(B_ * A);
    y_.resize(B_);
  }

  int64_t in_features() const { return actor_.in(); }

  // One update; returns (td per sample, critic loss, mean Q1(s, a), actor loss or NaN).
  py::tuple step(const py::handle& obs_in, const py::handle& act_in, const py::handle& rew_in,
                 const py::handle& next_in, const py::handle& done_in, const py::handle& w_in,
                 const py::handle& disc_in, const py::handle& noise_in, bool actor_update, double max_grad_norm,
                 double tau, const py::handle& critic_adam, const py::handle& actor_adam) {
    const int64_t B = B_, F = actor_.in(), A = act_dim_;
    Batch b = check_batch(obs_in, act_in, rew_in, next_in, done_in, w_in, disc_in, F, A);
    const float* noise = noise_in.is_none() ? nullptr : checked<float>(who_, noise_in, {B, A}, "noise").data();
    check_common(max_grad_norm, tau);
    const AdamHP ch = adam_hp(who_, critic_adam, "critic_adam");
    const AdamHP ah = adam_hp(who_, actor_adam, "actor_adam");

    py::array_t<float> td(B);
    float* ptd = td.mutable_data();
    double closs = 0.0, q1sum = 0.0, aloss = std::numeric_limits<double>::quiet_NaN();
    {
      py::gil_scoped_release nogil;
      const FlushDenormals ftz;  // for the step only (helper_pool.hpp)
      run(b, noise, actor_update, max_grad_norm, static_cast<float>(tau), ch, ah, ptd, &closs, &q1sum, &aloss);
    }
    return py::make_tuple(td, closs, q1sum / static_cast<double>(B), aloss);
  }

 private:
  void run(const Batch& b, const float* noise, bool actor_update, double max_norm, float tau, const AdamHP& ch,
           const AdamHP& ah, float* td, double* closs, double* q1sum, double* aloss) {
    const int64_t B = B_, F = actor_.in(), A = act_dim_;
    const size_t nc = critics_.size();
    float* y = y_.data();
    Helper* hp = helper_.get();  // started here, on the first step that uses it

    // 1. targets: a' = clamp(tanh(mu'(s')) + noise, -1, 1); y = r + discount (1 - done) min_i Qi'(s', a')
    //    (and, on the helper, the online critics' forward on (s, a) and, when the actor steps, step 3's
    //    tanh(mu(s)): the critic step does not touch the actor)
    concat(b.obs, F, b.act, A, sa_.data());
    const float* qt[2] = {nullptr, nullptr};
    both(hp, [&] {
      const float* pre = forward(actor_, b.nobs, true, at_acts_);
      float* na = na_.data();
      for (int64_t e = 0; e < B * A; ++e) {
        float a = std::tanh(pre[e]);
        if (noise != nullptr) a = std::min(std::max(a + noise[e], -1.0f), 1.0f);
        na[e] = a;
      }
      concat(b.nobs, F, na, A, nsa_.data());
      for (size_t c = 0; c < nc; ++c) qt[c] = forward(critics_[c], nsa_.data(), true, ct_acts_[c]);
    }, [&] {
      critic_forward(sa_.data());
      if (actor_update) {
        const float* ap = forward(actor_, b.obs, false, a_acts_);
        float* pi = pi_.data();
        for (int64_t e = 0; e < B * A; ++e) pi[e] = std::tanh(ap[e]);
      }
    });
    for (int64_t r = 0; r < B; ++r) {
      const float qn = nc == 2 ? std::min(qt[0][r], qt[1][r]) : qt[0][r];
      y[r] = b.done[r] ? b.rew[r] : b.rew[r] + b.disc[r] * qn;
    }

    // 2. the critics
    *closs = critic_step(sa_.data(), y, b.w, td, max_norm, ch, q1sum, hp);
    if (!actor_update) return;

    // 3. the actor through the updated critic 1: loss = -mean(Q1(s, tanh(mu(s)))) (pi from step 1)
    const float* pi = pi_.data();
    concat(b.obs, F, pi, A, sa_.data());
    Net& c1 = critics_[0];
    const float* q = forward(c1, sa_.data(), false, c_acts_[0]);
    const float invB = 1.0f / static_cast<float>(B);
    double qs = 0.0;
    float* gq = c_grads_[0][c1.L.size() - 1].data();
    for (int64_t r = 0; r < B; ++r) {
      qs += q[r];
      gq[r] = -invB;
    }
    *aloss = -qs / static_cast<double>(B);
    backward(c1, sa_.data(), c_acts_[0], c_grads_[0], false, dpi_.data(), F, A);  // dLoss/d pi
    float* ga = a_grads_[actor_.L.size() - 1].data();
    for (int64_t e = 0; e < B * A; ++e) ga[e] = dpi_[e] * (1.0f - pi[e] * pi[e]);  // tanh'
    backward(actor_, b.obs, a_acts_, a_grads_, true, nullptr, 0, 0, hp);
    step_group(actor_g_, max_norm, ah, hp);

    // 4. every target moves towards its network
    both(hp, [&] {
      polyak(actor_, tau);
      polyak(critics_[0], tau);
    }, [&] {
      if (nc == 2) polyak(critics_[1], tau);
    });
  }

  Net actor_;
  Group actor_g_;
  Bufs a_acts_, a_grads_, at_acts_;
  std::vector<float> sa_, nsa_, pi_, na_, dpi_, y_;
};

// ---------------------------------------------------------------------------------------------
constexpr float kLogStdMin = -20.0f, kLogStdMax = 2.0f;

class SACMLPKernel : public Kernel {
 public:
  SACMLPKernel(uintptr_t sgemm, bool ilp64, const py::list& actor, const py::list& critics,
               const py::list& critic_targets, const py::tuple& actor_adam, const py::tuple& critic_adam,
               const py::handle& log_alpha, const py::handle& alpha_adam, int64_t batch)
      : Kernel("pearl_cpu SAC kernel", sgemm, ilp64, batch) {
    actor_ = parse_net("actor", actor, py::none());
    if (critics.size() != 2 || critic_targets.size() != 2) fail(who_, "expected 2 critics and 2 target critics");
    critics_.reserve(2);
    for (size_t c = 0; c < 2; ++c)
      critics_.push_back(parse_net("critic" + std::to_string(c + 1), critics[c], critic_targets[c]));
    if (actor_.out() % 2 != 0) fail(who_, "actor gives " + std::to_string(actor_.out()) + " outputs; expected 2 x actions (mean, log_std)");
    act_dim_ = actor_.out() / 2;
    check_widths(actor_, 2 * act_dim_);
    if (actor_adam.size() != 3 || critic_adam.size() != 3)
      fail(who_, "actor_adam and critic_adam must be (exp_avgs, exp_avg_sqs, steps)");
    actor_g_ = parse_group("actor", {&actor_}, actor_adam[0], actor_adam[1], actor_adam[2]);
    critic_g_ = parse_group("critic", {&critics_[0], &critics_[1]}, critic_adam[0], critic_adam[1], critic_adam[2]);
    log_alpha_ = keep(held(who_, log_alpha, {1}, "log_alpha"));
    auto_alpha_ = !alpha_adam.is_none();
    if (auto_alpha_) {
      auto t = alpha_adam.cast<py::sequence>();
      if (t.size() != 3) fail(who_, "alpha_adam must be (exp_avg, exp_avg_sq, step) or None");
      am_ = keep(held(who_, t[0], {1}, "log_alpha exp_avg"));
      av_ = keep(held(who_, t[1], {1}, "log_alpha exp_avg_sq"));
      astep_ = keep(held(who_, t[2], {1}, "log_alpha Adam step counter"));
    }
    const int64_t F = actor_.in(), A = act_dim_;
    critic_buffers();
    a_acts_ = bufs(actor_, B_);
    a_grads_ = bufs(actor_, B_);
    an_acts_ = bufs(actor_, B_);
    sa_.resize(B_ * (F + A));
    nsa_.resize(B_ * (F + A));
    for (auto* v : {&pi_, &na_, &u_, &nu_, &da1_, &da2_}) v->resize(B_ * A);
    for (auto* v : {&y_, &lp_, &nlp_}) v->resize(B_);
  }

  int64_t in_features() const { return actor_.in(); }
  bool auto_alpha() const { return auto_alpha_; }

  // One update; returns (td, critic loss, mean Q1(s, a), actor loss, entropy, alpha loss or NaN, alpha).
  py::tuple step(const py::handle& obs_in, const py::handle& act_in, const py::handle& rew_in,
                 const py::handle& next_in, const py::handle& done_in, const py::handle& w_in,
                 const py::handle& disc_in, const py::handle& eps_next_in, const py::handle& eps_pi_in,
                 double max_grad_norm, double tau, double target_entropy, const py::handle& critic_adam,
                 const py::handle& actor_adam, const py::handle& alpha_adam) {
    const int64_t B = B_, F = actor_.in(), A = act_dim_;
    Batch b = check_batch(obs_in, act_in, rew_in, next_in, done_in, w_in, disc_in, F, A);
    const float* eps_next = checked<float>(who_, eps_next_in, {B, A}, "eps_next").data();
    const float* eps_pi = checked<float>(who_, eps_pi_in, {B, A}, "eps_pi").data();
    check_common(max_grad_norm, tau);
    if (!std::isfinite(target_entropy)) fail(who_, "target_entropy must be finite");
    const AdamHP ch = adam_hp(who_, critic_adam, "critic_adam");
    const AdamHP ah = adam_hp(who_, actor_adam, "actor_adam");
    AdamHP lh;
    if (auto_alpha_) {
      if (alpha_adam.is_none()) fail(who_, "alpha_adam is None, but the kernel tunes alpha (it was given its Adam state)");
      lh = adam_hp(who_, alpha_adam, "alpha_adam");
    }

    py::array_t<float> td(B);
    float* ptd = td.mutable_data();
    double m[5] = {0, 0, 0, 0, 0};
    {
      py::gil_scoped_release nogil;
      const FlushDenormals ftz;  // for the step only (helper_pool.hpp)
      run(b, eps_next, eps_pi, max_grad_norm, static_cast<float>(tau), static_cast<float>(target_entropy), ch, ah,
          lh, ptd, m);
    }
    const double alpha_loss = auto_alpha_ ? m[4] : std::numeric_limits<double>::quiet_NaN();
    return py::make_tuple(td, m[0], m[1] / static_cast<double>(B), m[2], m[3], alpha_loss,
                          static_cast<double>(std::exp(*log_alpha_)));
  }

 private:
  static float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

  // Reparameterised (a, log pi(a|x)) as sac.py's sample(): acts keeps the actor's activations, u the
  // pre-squash sample; a (B x A), lp (B).
  void sample(const float* x, const float* eps, Bufs& acts, float* u, float* a, float* lp) const {
    const int64_t B = B_, A = act_dim_;
    const float* out = forward(actor_, x, false, acts);
    const float half_log_2pi = static_cast<float>(0.5 * std::log(2.0 * 3.14159265358979323846));
    const float log2 = static_cast<float>(std::log(2.0));
    for (int64_t r = 0; r < B; ++r) {
      const float* row = out + r * 2 * A;
      float s = 0.0f;
      for (int64_t j = 0; j < A; ++j) {
        const float mean = row[j];
        const float ls = std::min(std::max(row[A + j], kLogStdMin), kLogStdMax);
        const float e = eps[r * A + j];
        const float uu = mean + std::exp(ls) * e;
        const float l1 = -((0.5f * (e * e) + ls) + half_log_2pi);
        const float l2 = l1 - 2.0f * ((log2 - uu) - softplus(-2.0f * uu));
        s += l2;
        u[r * A + j] = uu;
        a[r * A + j] = std::tanh(uu);
      }
      lp[r] = s;
    }
  }

  void run(const Batch& b, const float* eps_next, const float* eps_pi, double max_norm, float tau, float te,
           const AdamHP& ch, const AdamHP& ah, const AdamHP& lh, float* td, double* m) {
    const int64_t B = B_, F = actor_.in(), A = act_dim_;
    const float alpha = std::exp(*log_alpha_);
    float* y = y_.data();
    Helper* hp = helper_.get();

    // 1. soft targets: y = r + discount (1 - done) (min_i Qi'(s', a') - alpha log pi(a'|s'))
    //    (and, on the helper, the online critics' forward on (s, a) and step 3's sample on s: the critic
    //    step does not touch the actor, so a ~ pi(.|s) is the same drawn now; the two halves balance)
    concat(b.obs, F, b.act, A, sa_.data());
    const float *q1t = nullptr, *q2t = nullptr;
    float* u = u_.data();
    float* pi = pi_.data();
    float* lp = lp_.data();
    both(hp, [&] {
      sample(b.nobs, eps_next, an_acts_, nu_.data(), na_.data(), nlp_.data());
      concat(b.nobs, F, na_.data(), A, nsa_.data());
      q1t = forward(critics_[0], nsa_.data(), true, ct_acts_[0]);
      q2t = forward(critics_[1], nsa_.data(), true, ct_acts_[1]);
    }, [&] {
      critic_forward(sa_.data());
      sample(b.obs, eps_pi, a_acts_, u, pi, lp);
    });
    for (int64_t r = 0; r < B; ++r) {
      const float soft = std::min(q1t[r], q2t[r]) - alpha * nlp_[r];
      y[r] = b.done[r] ? b.rew[r] : b.rew[r] + b.disc[r] * soft;
    }

    // 2. the critics
    double q1sum = 0.0;
    m[0] = critic_step(sa_.data(), y, b.w, td, max_norm, ch, &q1sum, hp);
    m[1] = q1sum;

    // 3. the actor: loss = mean(alpha lp - min(Q1, Q2)(s, a)), a ~ pi(.|s) (drawn in step 1), through the
    //    updated critics
    concat(b.obs, F, pi, A, sa_.data());
    const float *q1 = nullptr, *q2 = nullptr;
    both(hp, [&] { q1 = forward(critics_[0], sa_.data(), false, c_acts_[0]); },
         [&] { q2 = forward(critics_[1], sa_.data(), false, c_acts_[1]); });
    const float invB = 1.0f / static_cast<float>(B);
    float* g1 = c_grads_[0][critics_[0].L.size() - 1].data();
    float* g2 = c_grads_[1][critics_[1].L.size() - 1].data();
    double loss = 0.0, lpsum = 0.0;
    for (int64_t r = 0; r < B; ++r) {
      const float qmin = std::min(q1[r], q2[r]);
      loss += static_cast<double>(alpha * lp[r] - qmin);
      lpsum += lp[r];
      // torch.minimum's gradient: to the smaller input, halved on a tie
      const float g = -invB;
      g1[r] = q1[r] < q2[r] ? g : (q1[r] == q2[r] ? g / 2.0f : 0.0f);
      g2[r] = q2[r] < q1[r] ? g : (q1[r] == q2[r] ? g / 2.0f : 0.0f);
    }
    m[2] = loss / static_cast<double>(B);
    m[3] = -lpsum / static_cast<double>(B);
    both(hp, [&] { backward(critics_[0], sa_.data(), c_acts_[0], c_grads_[0], false, da1_.data(), F, A); },
         [&] { backward(critics_[1], sa_.data(), c_acts_[1], c_grads_[1], false, da2_.data(), F, A); });
    // through the squash, the log-density and the clamp to the actor's outputs [mean | log_std]
    const float* out = a_acts_[actor_.L.size() - 1].data();
    float* go = a_grads_[actor_.L.size() - 1].data();
    const float glp = invB * alpha;  // dLoss / d log pi, per sample (and so per dimension)
    for (int64_t r = 0; r < B; ++r) {
      for (int64_t j = 0; j < A; ++j) {
        const int64_t e = r * A + j;
        const float raw = out[r * 2 * A + A + j];
        const float ls = std::min(std::max(raw, kLogStdMin), kLogStdMax);
        const float std_ = std::exp(ls);
        const float uu = u[e];
        float du = (da1_[e] + da2_[e]) * (1.0f - pi[e] * pi[e]);  // tanh'
        // log pi's -2 (log 2 - u - softplus(-2u)): d/du = 2 glp - 2 glp sigmoid(-2u) * 2
        const float gsp = 2.0f * glp;
        const float x = -2.0f * uu;
        const float z = std::exp(x);
        const float dx = x > 20.0f ? gsp : gsp * z / (z + 1.0f);
        du += 2.0f * glp;
        du += -2.0f * dx;
        // u = mean + exp(ls) eps; log pi's -ls
        const float dls = -glp + du * eps_pi[e] * std_;
        go[r * 2 * A + j] = du;
        go[r * 2 * A + A + j] = (raw >= kLogStdMin && raw <= kLogStdMax) ? dls : 0.0f;
      }
    }
    backward(actor_, b.obs, a_acts_, a_grads_, true, nullptr, 0, 0, hp);
    step_group(actor_g_, max_norm, ah, hp);

    // 4. alpha: loss = -mean(log_alpha (lp + target_entropy))
    if (auto_alpha_) {
      const float la = *log_alpha_;
      double s = 0.0, gs = 0.0;
      for (int64_t r = 0; r < B; ++r) {
        const float t = lp[r] + te;
        s += static_cast<double>(la * t);
        gs += static_cast<double>(-invB * t);
      }
      m[4] = -s / static_cast<double>(B);
      const float g = static_cast<float>(gs);
      const float step = astep_[0] += 1.0f;
      adam(log_alpha_, &g, am_, av_, 1, step, lh.lr, lh.b1, lh.b2, lh.eps);
    }

    // 5. the target critics
    both(hp, [&] { polyak(critics_[0], tau); }, [&] { polyak(critics_[1], tau); });
  }

  Net actor_;
  Group actor_g_;
  float *log_alpha_ = nullptr, *am_ = nullptr, *av_ = nullptr, *astep_ = nullptr;
  bool auto_alpha_ = false;
  Bufs a_acts_, a_grads_, an_acts_;
  std::vector<float> sa_, nsa_, pi_, na_, u_, nu_, da1_, da2_, y_, lp_, nlp_;
};

}  // namespace

PYBIND11_MODULE(_learner_ac, m) {
  m.doc() = "Native actor-critic learner steps of the CPU backend (TD3/DDPG and SAC updates of ReLU MLPs).";
  py::class_<TD3MLPKernel>(m, "TD3MLPKernel")
      .def(py::init<uintptr_t, bool, const py::list&, const py::list&, const py::list&, const py::list&,
                    const py::tuple&, const py::tuple&, int64_t>(),
           py::arg("sgemm"), py::arg("ilp64"), py::arg("actor"), py::arg("actor_target"), py::arg("critics"),
           py::arg("critic_targets"), py::arg("actor_adam"), py::arg("critic_adam"), py::arg("batch"))
      .def_property_readonly("batch", &TD3MLPKernel::batch)
      .def_property_readonly("n_critics", &TD3MLPKernel::n_critics)
      .def_property_readonly("act_dim", &TD3MLPKernel::act_dim)
      .def_property_readonly("in_features", &TD3MLPKernel::in_features)
      .def_property("threads", &TD3MLPKernel::threads, &TD3MLPKernel::set_threads,
                    "threads a step uses: 1 (the caller's), or 2 (the caller's and a help-first helper); "
                    "setting n >= 2 gives 2")
      .def("step", &TD3MLPKernel::step, py::arg("obs"), py::arg("actions"), py::arg("rewards"), py::arg("next_obs"),
           py::arg("done"), py::arg("weights"), py::arg("discount"), py::arg("noise"), py::arg("actor_update"),
           py::arg("max_grad_norm"), py::arg("tau"), py::arg("critic_adam"), py::arg("actor_adam"));
  py::class_<SACMLPKernel>(m, "SACMLPKernel")
      .def(py::init<uintptr_t, bool, const py::list&, const py::list&, const py::list&, const py::tuple&,
                    const py::tuple&, const py::handle&, const py::handle&, int64_t>(),
           py::arg("sgemm"), py::arg("ilp64"), py::arg("actor"), py::arg("critics"), py::arg("critic_targets"),
           py::arg("actor_adam"), py::arg("critic_adam"), py::arg("log_alpha"), py::arg("alpha_adam"),
           py::arg("batch"))
      .def_property_readonly("batch", &SACMLPKernel::batch)
      .def_property_readonly("act_dim", &SACMLPKernel::act_dim)
      .def_property_readonly("in_features", &SACMLPKernel::in_features)
      .def_property_readonly("auto_alpha", &SACMLPKernel::auto_alpha)
      .def_property("threads", &SACMLPKernel::threads, &SACMLPKernel::set_threads,
                    "threads a step uses: 1 (the caller's), or 2 (the caller's and a help-first helper); "
                    "setting n >= 2 gives 2")
      .def("step", &SACMLPKernel::step, py::arg("obs"), py::arg("actions"), py::arg("rewards"), py::arg("next_obs"),
           py::arg("done"), py::arg("weights"), py::arg("discount"), py::arg("eps_next"), py::arg("eps_pi"),
           py::arg("max_grad_norm"), py::arg("tau"), py::arg("target_entropy"), py::arg("critic_adam"),
           py::arg("actor_adam"), py::arg("alpha_adam"));
}
