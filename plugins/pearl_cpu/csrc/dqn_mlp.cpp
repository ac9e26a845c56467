// pearl_cpu._learner: one DQN update of a ReLU MLP as a single native call.
//
// Why: pearl_core's numpy engine (pearl_core/algorithms/mlp_engine.py) spends
// about 0.48 ms of a 0.75 ms update (batch 64, 4-256-256-2) in four BLAS
// products and the rest in ~40 small numpy calls and the optimizer, a few
// microseconds of dispatch each. Here the products call the same BLAS (the
// sgemm numpy uses, handed over as a function pointer) and everything between
// them is one fused loop, so the update costs little more than its products.
//
// The math is the engine's, step for step (its docstring is the specification;
// tests/algorithms/test_mlp_engine.py checks this kernel against the torch path):
//   1. y = r + gamma * (1 - done) * Q_target(s')[a*], a* = argmax of Q_target(s')
//      (or of Q(s') for double DQN);
//   2. delta = Q(s)[a] - y; Huber per sample times the IS weight, averaged;
//   3. backward through the layers (ReLU' = activation > 0);
//   4. global gradient-norm clipping as torch.nn.utils.clip_grad_norm_;
//   5. Adam as torch's (its state tensors are written in place).
//
// Parameters, target parameters and Adam state are the caller's arrays (numpy
// views of the torch tensors), held by reference for the kernel's life. Every
// per-call input is checked before anything is written: bad input raises
// ValueError and changes nothing. The GIL is released for the arithmetic.
//
// Convolutional front (`conv` = (C, H, W, k, stride), the "dqn_cnn" kernel): layer 0 is one
// Conv2d(C, O, k, stride) without padding, then ReLU and a flatten in torch's (O, OH, OW) order,
// as pearl_core's small image encoder (MinAtar's network). The observation (B, C*H*W) is unfolded
// once per step into the (B*P, C*k*k) patch matrix (P = OH*OW positions), so the convolution is one
// product with the (O, C*k*k) weight, and its weight gradient is one product with the same patches.
// Being the first layer it needs no gradient of its input.
//
// Threads (`threads` = 2): the step's independent products run on two threads,
// the caller's and one helper the kernel owns: the target network's forward next
// to the online one, each layer's weight gradient next to its input gradient,
// half of Adam next to the other half. The helper is *help-first*: the caller
// posts a task, does its own share, then takes the task back and runs it itself
// if the helper has not started it (busy core, asleep). So the caller never
// waits for a helper that an actor keeps from starting; for one preempted mid-task
// it sleeps after a short spin, freeing its core for it (helper_pool.hpp); an idle helper
// sleeps on a condition variable after a short spin (with sched_yield) instead
// of spinning against the actors. Every product and loop is the same call on
// the same data whichever thread runs it, so the result is bitwise that of
// `threads` = 1 (tests/test_cpu_learner.py checks it). Both threads flush denormals
// to zero during a step (FlushDenormals, csrc/helper_pool.hpp).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "helper_pool.hpp"
#include "learner_common.hpp"

namespace py = pybind11;

namespace {

// The sgemm wrapper, the helper thread (Helper, HelperSlot, both) and the vector-clone macro are the
// native steps' shared ones (learner_common.hpp, helper_pool.hpp); the checks below name this kernel.
using namespace pearl_native;

const char* const kWho = "pearl_cpu DQN kernel";

[[noreturn]] void fail(const std::string& msg) { pearl_native::fail(kWho, msg); }

template <typename T>
py::array_t<T, py::array::c_style> checked(const py::array& arr, const std::vector<py::ssize_t>& shape,
                                          const std::string& what) {
  return pearl_native::checked<T>(kWho, arr, shape, what);
}

F32 held(const py::handle& obj, const std::vector<py::ssize_t>& shape, const std::string& what) {
  return pearl_native::held(kWho, obj, shape, what);
}

struct Layer {
  int64_t in = 0, out = 0;
  F32 W, b, Wt, bt;      // online and target parameters
  F32 mW, mb, vW, vb;    // Adam moments of W and b
  // raw pointers into the held arrays (taken with the GIL held, used without it)
  float *pW = nullptr, *pb = nullptr, *pWt = nullptr, *pbt = nullptr;
  float *pmW = nullptr, *pmb = nullptr, *pvW = nullptr, *pvb = nullptr;
  float* gW = nullptr;   // gradients, in the kernel's flat buffer
  float* gb = nullptr;
};

class DQNMLPKernel {
 public:
  DQNMLPKernel(uintptr_t sgemm, bool ilp64, const py::list& online, const py::list& target, const py::list& exp_avgs,
               const py::list& exp_avg_sqs, const py::handle& steps, int64_t batch, const std::vector<int64_t>& conv)
      : B_(batch) {
    if (sgemm == 0) fail("no sgemm function pointer");
    gemm_.fn = sgemm;
    gemm_.ilp64 = ilp64;
    const size_t L = online.size();
    if (L == 0) fail("the network has no layers");
    if (target.size() != L) fail("online and target networks differ in depth");
    if (exp_avgs.size() != 2 * L || exp_avg_sqs.size() != 2 * L)
      fail("expected " + std::to_string(2 * L) + " Adam moment arrays of each kind");
    if (B_ < 1) fail("batch size must be >= 1");
    if (!conv.empty()) set_conv(conv, online);
    int64_t flat = 0;
    for (size_t i = 0; i < L; ++i) {
      auto pair = online[i].cast<py::sequence>();
      auto tpair = target[i].cast<py::sequence>();
      auto W0 = pair[0].cast<py::array>();
      if (W0.ndim() != 2) fail("layer " + std::to_string(i) + " weight must be 2-D");
      Layer l;
      l.out = W0.shape(0);
      l.in = W0.shape(1);
      const int64_t given = i == 1 && P_ ? layers_.back().out * P_ : i > 0 ? layers_.back().out : 0;
      if (i > 0 && l.in != given)
        fail("layer " + std::to_string(i) + " takes " + std::to_string(l.in) + " inputs; the previous layer gives " +
             std::to_string(given));
      const std::string n = "layer " + std::to_string(i);
      l.W = held(pair[0], {l.out, l.in}, n + " weight");
      l.b = held(pair[1], {l.out}, n + " bias");
      l.Wt = held(tpair[0], {l.out, l.in}, n + " target weight");
      l.bt = held(tpair[1], {l.out}, n + " target bias");
      l.mW = held(exp_avgs[2 * i], {l.out, l.in}, n + " weight exp_avg");
      l.mb = held(exp_avgs[2 * i + 1], {l.out}, n + " bias exp_avg");
      l.vW = held(exp_avg_sqs[2 * i], {l.out, l.in}, n + " weight exp_avg_sq");
      l.vb = held(exp_avg_sqs[2 * i + 1], {l.out}, n + " bias exp_avg_sq");
      l.pW = l.W.mutable_data();
      l.pb = l.b.mutable_data();
      l.pWt = l.Wt.mutable_data();
      l.pbt = l.bt.mutable_data();
      l.pmW = l.mW.mutable_data();
      l.pmb = l.mb.mutable_data();
      l.pvW = l.vW.mutable_data();
      l.pvb = l.vb.mutable_data();
      flat += l.out * l.in + l.out;
      layers_.push_back(std::move(l));
    }
    steps_ = held(steps, {static_cast<py::ssize_t>(2 * L)}, "Adam step counters");
    psteps_ = steps_.mutable_data();
    grads_.assign(static_cast<size_t>(flat), 0.0f);
    int64_t off = 0;
    for (auto& l : layers_) {
      l.gW = grads_.data() + off;
      off += l.out * l.in;
      l.gb = grads_.data() + off;
      off += l.out;
    }
    for (size_t i = 0; i < L; ++i) {
      const size_t n = static_cast<size_t>(B_ * layers_[i].out * (i == 0 && P_ ? P_ : 1));
      h_.emplace_back(n);
      ht_.emplace_back(n);
      hn_.emplace_back(n);
      g_.emplace_back(n);
    }
    if (P_) {
      const size_t rows = static_cast<size_t>(B_ * P_);
      col_.resize(rows * static_cast<size_t>(layers_[0].in));
      coln_.resize(col_.size());
      tmp_.resize(rows * static_cast<size_t>(layers_[0].out));
      tmpn_.resize(tmp_.size());
    }
    y_.resize(static_cast<size_t>(B_));
  }

  int64_t batch() const { return B_; }
  int threads() const { return helper_.on() ? 2 : 1; }
  // 1: the caller's thread only; >= 2: the caller's and one helper (a step has at most two
  // independent pieces of work at a time, so a second helper would have nothing to do).
  void set_threads(int n) {
    if (n < 1) fail("threads = " + std::to_string(n) + "; expected an integer >= 1");
    helper_.set(n >= 2);
  }
  int64_t n_actions() const { return layers_.back().out; }
  int64_t in_features() const { return P_ ? C_ * H_ * W_ : layers_.front().in; }
  std::vector<int64_t> conv() const {
    return P_ ? std::vector<int64_t>{C_, H_, W_, K_, S_} : std::vector<int64_t>{};
  }

  // One update; returns (|delta| per sample, loss, mean q). discount (optional, float32 (B,), each in
  // [0, 1]): the per-sample factor of the bootstrap term (gamma ** k of an n-step transition) in place
  // of gamma; None keeps the scalar-gamma path exactly as it was.
  py::tuple step(const py::array& obs_in, const py::array& act_in, const py::array& rew_in,
                 const py::array& next_in, const py::array& done_in, const py::array& w_in, double gamma,
                 double huber, double max_grad_norm, bool double_dqn, double lr, double beta1, double beta2,
                 double eps, const py::object& discount_in) {
    const int64_t B = B_, F = in_features(), A = n_actions();
    auto obs = checked<float>(obs_in, {B, F}, "obs");
    auto nobs = checked<float>(next_in, {B, F}, "next_obs");
    auto act = checked<int64_t>(act_in, {B}, "actions");
    auto rew = checked<float>(rew_in, {B}, "rewards");
    auto done = checked<bool>(done_in, {B}, "done");
    auto w = checked<float>(w_in, {B}, "weights");
    const int64_t* a = act.data();
    for (int64_t i = 0; i < B; ++i)
      if (a[i] < 0 || a[i] >= A)
        fail("actions[" + std::to_string(i) + "] = " + std::to_string(a[i]) + " is outside [0, " +
             std::to_string(A) + ")");
    if (!(gamma >= 0.0 && gamma <= 1.0)) fail("gamma must be in [0, 1]");
    if (!(huber > 0.0)) fail("huber_delta must be > 0");
    py::array_t<float, py::array::c_style> disc;
    const float* pdisc = nullptr;
    if (!discount_in.is_none()) {
      if (!py::isinstance<py::array>(discount_in)) fail("discount is not a numpy array (or None)");
      disc = checked<float>(py::reinterpret_borrow<py::array>(discount_in), {B}, "discount");
      pdisc = disc.data();
      for (int64_t i = 0; i < B; ++i)
        if (!(pdisc[i] >= 0.0f && pdisc[i] <= 1.0f))
          fail("discount[" + std::to_string(i) + "] = " + std::to_string(pdisc[i]) + " is outside [0, 1]");
    }

    py::array_t<float> td(B);
    float* ptd = td.mutable_data();
    double loss = 0.0, qsum = 0.0;
    {
      py::gil_scoped_release nogil;
      const FlushDenormals ftz;  // for the step only (helper_pool.hpp)
      run(obs.data(), a, rew.data(), nobs.data(), done.data(), w.data(), pdisc, ptd, static_cast<float>(gamma),
          static_cast<float>(huber), max_grad_norm, double_dqn, lr, beta1, beta2, eps, &loss, &qsum);
    }
    return py::make_tuple(td, loss, qsum / static_cast<double>(B));
  }

 private:
  // The convolutional front's geometry (see the file's header); checks it against layer 0's weight.
  void set_conv(const std::vector<int64_t>& c, const py::list& online) {
    if (c.size() != 5) fail("conv must be (channels, height, width, kernel, stride); found " +
                            std::to_string(c.size()) + " numbers");
    C_ = c[0], H_ = c[1], W_ = c[2], K_ = c[3], S_ = c[4];
    if (C_ < 1 || K_ < 1 || S_ < 1 || H_ < K_ || W_ < K_)
      fail("conv (" + std::to_string(C_) + ", " + std::to_string(H_) + ", " + std::to_string(W_) + ", " +
           std::to_string(K_) + ", " + std::to_string(S_) + ") is not a valid unpadded convolution: expected "
           "channels, kernel and stride >= 1 and an image at least kernel x kernel");
    if (online.size() < 2) fail("a convolutional front needs at least one fully connected layer after it");
    const auto W0 = online[0].cast<py::sequence>()[0].cast<py::array>();
    if (W0.ndim() != 2 || W0.shape(1) != C_ * K_ * K_)
      fail("layer 0 (the convolution) weight must be (out_channels, channels * kernel * kernel) = (O, " +
           std::to_string(C_ * K_ * K_) + ")");
    OH_ = (H_ - K_) / S_ + 1;
    OW_ = (W_ - K_) / S_ + 1;
    P_ = OH_ * OW_;
  }

  // The (B*P, C*k*k) patch matrix of x (B, C*H*W): row b*P + p, column (c*k + ky)*k + kx, torch's order.
  void im2col(const float* x, float* col) const {
    const int64_t CK = C_ * K_ * K_;
    for (int64_t b = 0; b < B_; ++b) {
      const float* img = x + b * C_ * H_ * W_;
      for (int64_t oy = 0; oy < OH_; ++oy)
        for (int64_t ox = 0; ox < OW_; ++ox) {
          float* row = col + (b * P_ + oy * OW_ + ox) * CK;
          for (int64_t c = 0; c < C_; ++c)
            for (int64_t ky = 0; ky < K_; ++ky) {
              const float* src = img + (c * H_ + oy * S_ + ky) * W_ + ox * S_;
              for (int64_t kx = 0; kx < K_; ++kx) *row++ = src[kx];
            }
        }
    }
  }

  // h (B, O*P) = ReLU(conv(x) + b) flattened as torch's (O, OH, OW); tmp (B*P, O) is scratch.
  void conv_forward(const float* col, const float* W, const float* b, float* tmp, float* h) const {
    const int64_t O = layers_[0].out, CK = layers_[0].in;
    gemm_(false, true, B_ * P_, O, CK, col, CK, W, CK, 0.0f, tmp, O);
    for (int64_t bi = 0; bi < B_; ++bi)
      for (int64_t p = 0; p < P_; ++p) {
        const float* row = tmp + (bi * P_ + p) * O;
        float* dst = h + bi * O * P_ + p;
        for (int64_t o = 0; o < O; ++o) {
          const float v = row[o] + b[o];
          dst[o * P_] = v > 0.0f ? v : 0.0f;
        }
      }
  }

  // out (B x n) = x (B x m) W^T + b, ReLU unless the last layer.
  void forward(const float* x, const float* W, const float* b, int64_t m, int64_t n, float* out, bool relu) const {
    gemm_(false, true, B_, n, m, x, m, W, m, 0.0f, out, n);
    for (int64_t r = 0; r < B_; ++r) {
      float* row = out + r * n;
      if (relu) {
        for (int64_t j = 0; j < n; ++j) {
          const float v = row[j] + b[j];
          row[j] = v > 0.0f ? v : 0.0f;
        }
      } else {
        for (int64_t j = 0; j < n; ++j) row[j] += b[j];
      }
    }
  }

  // Q(x, .) of the online (target == false) or target network into bufs; returns the last layer's output.
  // With the convolutional front, col is x's patch matrix (im2col) and tmp its scratch.
  const float* net(const float* x, bool target, std::vector<std::vector<float>>& bufs, const float* col = nullptr,
                   float* tmp = nullptr) {
    const size_t L = layers_.size();
    for (size_t i = 0; i < L; ++i) {
      const Layer& l = layers_[i];
      if (i == 0 && P_) {
        conv_forward(col, target ? l.pWt : l.pW, target ? l.pbt : l.pb, tmp, bufs[0].data());
        x = bufs[0].data();
        continue;
      }
      forward(x, target ? l.pWt : l.pW, target ? l.pbt : l.pb, l.in, l.out, bufs[i].data(),
              i + 1 < L);
      x = bufs[i].data();
    }
    return x;
  }

  void run(const float* obs, const int64_t* act, const float* rew, const float* nobs, const bool* done,
           const float* w, const float* disc, float* td, float gamma, float k, double max_grad_norm, bool double_dqn, double lr, double b1,
           double b2, double eps, double* loss_out, double* qsum_out) {
    const int64_t B = B_, A = n_actions();
    const size_t L = layers_.size();
    float* y = y_.data();

    Helper* hp = helper_.get();  // started here, on the first step that uses it

    // 1. the online network on s (here) and the target network on s' (on the helper; and for double
    //    DQN the online network on s' as well, into buffers of its own)
    const float* q_all = nullptr;
    const float* qn = nullptr;
    const float* qo = nullptr;
    both(hp,
         [&] {
           if (P_) im2col(obs, col_.data());
           q_all = net(obs, false, h_, col_.data(), tmp_.data());
         },
         [&] {
           if (P_) im2col(nobs, coln_.data());
           qn = net(nobs, true, ht_, coln_.data(), tmpn_.data());
           if (double_dqn) qo = net(nobs, false, hn_, coln_.data(), tmpn_.data());
         });

    // targets y = r + gamma * (1 - done) * Q'(s')[a*]
    if (double_dqn) {
      for (int64_t r = 0; r < B; ++r) {
        const float* row = qo + r * A;
        int64_t best = 0;
        for (int64_t j = 1; j < A; ++j)
          if (row[j] > row[best]) best = j;
        y[r] = qn[r * A + best];
      }
    } else {
      for (int64_t r = 0; r < B; ++r) {
        const float* row = qn + r * A;
        float m = row[0];
        for (int64_t j = 1; j < A; ++j) m = row[j] > m ? row[j] : m;
        y[r] = m;
      }
    }
    if (disc != nullptr) {  // n-step returns: gamma ** k per sample
      for (int64_t r = 0; r < B; ++r) y[r] = (done[r] ? 0.0f : y[r] * disc[r]) + rew[r];
    } else {
      for (int64_t r = 0; r < B; ++r) y[r] = (done[r] ? 0.0f : y[r] * gamma) + rew[r];
    }

    // 2. loss, dL/dq
    float* gl = g_[L - 1].data();
    std::fill(gl, gl + B * A, 0.0f);
    const float invB = 1.0f / static_cast<float>(B);
    double loss = 0.0, qsum = 0.0;
    for (int64_t r = 0; r < B; ++r) {
      const float q = q_all[r * A + act[r]];
      const float delta = q - y[r];
      const float ad = std::fabs(delta);
      const float c = std::min(ad, k);
      loss += static_cast<double>(c * (ad - 0.5f * c)) * w[r];
      qsum += q;
      td[r] = ad;
      gl[r * A + act[r]] = std::copysign(c, delta) * w[r] * invB;
    }
    *loss_out = loss / static_cast<double>(B);
    *qsum_out = qsum;

    // 3. backward: each layer's weight and bias gradients (on the helper) next to the gradient of its
    //    input (here), which the layer below needs
    for (size_t ii = L; ii-- > 0;) {
      Layer& l = layers_[ii];
      const float* g = g_[ii].data();
      const float* inp = ii ? h_[ii - 1].data() : obs;
      auto grads = [this, &l, g, inp, B, ii] {
        if (ii == 0 && P_) {  // the convolution: its (B*P, O) output gradient against the patches
          const int64_t O = l.out, rows = B * P_;
          float* G = tmp_.data();
          for (int64_t bi = 0; bi < B; ++bi)
            for (int64_t p = 0; p < P_; ++p)
              for (int64_t o = 0; o < O; ++o) G[(bi * P_ + p) * O + o] = g[bi * O * P_ + o * P_ + p];
          gemm_(true, false, O, l.in, rows, G, O, col_.data(), l.in, 0.0f, l.gW, l.in);
          std::fill(l.gb, l.gb + O, 0.0f);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t o = 0; o < O; ++o) l.gb[o] += G[r * O + o];
          return;
        }
        gemm_(true, false, l.out, l.in, B, g, l.out, inp, l.in, 0.0f, l.gW, l.in);  // dW = g^T inp
        std::fill(l.gb, l.gb + l.out, 0.0f);
        for (int64_t r = 0; r < B; ++r) {
          const float* row = g + r * l.out;
          for (int64_t j = 0; j < l.out; ++j) l.gb[j] += row[j];
        }
      };
      if (ii) {
        float* gp = g_[ii - 1].data();
        both(hp,
             [&] {
               gemm_(false, false, B, l.in, l.out, g, l.out, l.pW, l.in, 0.0f, gp, l.in);  // dX = g W
               for (int64_t e = 0; e < B * l.in; ++e) gp[e] = inp[e] > 0.0f ? gp[e] : 0.0f;  // ReLU'
             },
             grads);
      } else {
        grads();
      }
    }

    // 4. clip the global norm (torch: coef = max / (norm + 1e-6), applied when < 1)
    const float clip = clip_coef(grads_.data(), grads_.size(), max_grad_norm);  // 1 when not due
    if (clip < 1.0f)
      for (float& v : grads_) v *= clip;

    // 5. Adam, torch's rule: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
    //    p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
    //    (elementwise: with a helper, it takes the second half of every weight matrix)
    float* steps = psteps_;
    std::vector<float> step_w(L), step_b(L);
    for (size_t i = 0; i < L; ++i) {
      step_w[i] = steps[2 * i] += 1.0f;
      step_b[i] = steps[2 * i + 1] += 1.0f;
    }
    auto part = [&](bool second) {
      for (size_t i = 0; i < L; ++i) {
        Layer& l = layers_[i];
        const int64_t n = l.out * l.in, lo = hp ? (second ? n / 2 : 0) : 0, hi = hp && !second ? n / 2 : n;
        pearl_native::adam(l.pW + lo, l.gW + lo, l.pmW + lo, l.pvW + lo, hi - lo, step_w[i], lr, b1, b2, eps);
        if (!second) pearl_native::adam(l.pb, l.gb, l.pmb, l.pvb, l.out, step_b[i], lr, b1, b2, eps);
      }
    };
    if (hp) {
      both(hp, [&] { part(false); }, [&] { part(true); });
    } else {
      part(false);
    }
  }

  Gemm gemm_;
  int64_t B_;
  std::vector<Layer> layers_;
  F32 steps_;
  float* psteps_ = nullptr;
  std::vector<float> grads_, y_;
  std::vector<std::vector<float>> h_, ht_, hn_, g_;  // activations: online on s, target on s', online on s'
  // The convolutional front (P_ > 0): geometry, patch matrices of s and s', and (B*P, O) scratch.
  int64_t C_ = 0, H_ = 0, W_ = 0, K_ = 0, S_ = 1, OH_ = 0, OW_ = 0, P_ = 0;
  std::vector<float> col_, coln_, tmp_, tmpn_;
  HelperSlot helper_;  // threads >= 2 (see set_threads); last, so it stops first
};

}  // namespace

PYBIND11_MODULE(_learner, m) {
  m.doc() = "Native learner steps of the CPU backend (a DQN update of a ReLU MLP, optionally after one convolution).";
  py::class_<DQNMLPKernel>(m, "DQNMLPKernel")
      .def(py::init<uintptr_t, bool, const py::list&, const py::list&, const py::list&, const py::list&,
                    const py::handle&, int64_t, const std::vector<int64_t>&>(),
           py::arg("sgemm"), py::arg("ilp64"), py::arg("online"), py::arg("target"), py::arg("exp_avgs"),
           py::arg("exp_avg_sqs"), py::arg("steps"), py::arg("batch"), py::arg("conv") = std::vector<int64_t>{})
      .def_property_readonly("batch", &DQNMLPKernel::batch)
      .def_property_readonly("n_actions", &DQNMLPKernel::n_actions)
      .def_property_readonly("in_features", &DQNMLPKernel::in_features)
      .def_property_readonly("conv", &DQNMLPKernel::conv,
                             "(channels, height, width, kernel, stride) of the convolutional front; empty: none")
      .def_property("threads", &DQNMLPKernel::threads, &DQNMLPKernel::set_threads,
                    "threads a step uses: 1 (the caller's), or 2 (the caller's and a help-first helper); "
                    "setting n >= 2 gives 2")
      .def("step", &DQNMLPKernel::step, py::arg("obs"), py::arg("actions"), py::arg("rewards"), py::arg("next_obs"),
           py::arg("done"), py::arg("weights"), py::arg("gamma"), py::arg("huber_delta"), py::arg("max_grad_norm"),
           py::arg("double_dqn"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"),
           py::arg("discount") = py::none());
}
