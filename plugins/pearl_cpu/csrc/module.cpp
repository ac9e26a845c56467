// pybind11 bindings of the native sum tree: pearl_cpu._sumtree.SumTree.
//
// Every Python-visible check of pearl_core/sumtree.py (check_indices,
// check_priorities, check_masses) is reimplemented here, in the same order and
// with the same error classes, and runs to completion before the tree is
// touched, so bad input raises and changes nothing.
//
// Locking: batches of at least kReleaseGilMin items run with the GIL released
// and the tree's mutex held; smaller ones keep the GIL (releasing it costs more
// than the work) and take the mutex too. Whoever holds the tree mutex never
// waits for the GIL, so the two locks cannot deadlock.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cfloat>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "sumtree.hpp"

namespace py = pybind11;
using pearl_cpu::SumTree;

namespace {

PyObject* g_InvalidValueError = nullptr;
PyObject* g_InvalidIndexError = nullptr;
PyObject* g_InvalidDTypeError = nullptr;
PyObject* g_EmptyTreeError = nullptr;
PyObject* g_asarray = nullptr;
double g_mass_drift_rtol = 1e-6;  // replaced by pearl_core.sumtree.MASS_DRIFT_RTOL at import

constexpr size_t kReleaseGilMin = 64;

[[noreturn]] void raise(PyObject* type, const std::string& msg) {
  PyErr_SetString(type, msg.c_str());
  throw py::error_already_set();
}

std::string repr_of(py::handle h) { return py::repr(h).cast<std::string>(); }
std::string str_of(py::handle h) { return py::str(h).cast<std::string>(); }

std::string float_repr(double v) {
  char* s = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, nullptr);
  if (!s) throw py::error_already_set();
  std::string out(s);
  PyMem_Free(s);
  return out;
}

// ------------------------------------------------------------ array access
struct ArrayView {
  py::object arr;       // the ndarray; keeps the data alive (a py::array member
                        // would allocate an empty array on construction)
  const char* data = nullptr;
  size_t n = 0;
  ssize_t stride = 0;
  char kind = 0;
  ssize_t itemsize = 0;
  bool native = true;   // native byte order
};

py::object as_ndarray(py::handle h) {
  if (py::detail::npy_api::get().PyArray_Check_(h.ptr())) return py::reinterpret_borrow<py::object>(h);
  PyObject* r = PyObject_CallOneArg(g_asarray, h.ptr());
  if (!r) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(r);
}

// np.asarray + the 1-D rule (_as_1d in the contract).
ArrayView view_1d(py::handle h, const char* what) {
  ArrayView v;
  v.arr = as_ndarray(h);
  auto* p = py::detail::array_proxy(v.arr.ptr());
  if (p->nd != 1)
    raise(g_InvalidValueError, std::string(what) + " must be a 1-D array; found shape " +
                                   repr_of(v.arr.attr("shape")) +
                                   ". Fix: pass a flat array (arr.ravel()).");
  auto* d = py::detail::array_descriptor_proxy(p->descr);
  v.data = p->data;
  v.n = static_cast<size_t>(p->dimensions[0]);
  v.stride = p->strides[0];
  v.kind = d->kind;
  v.itemsize = py::reinterpret_borrow<py::dtype>(p->descr).itemsize();
  const char bo = d->byteorder;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v.native = bo != '<';
#else
  v.native = bo != '>';
#endif
  return v;
}

std::string dtype_str(const ArrayView& v) { return str_of(v.arr.attr("dtype")); }

template <class T>
bool is_plain(const ArrayView& v) {
  return v.native && v.itemsize == static_cast<ssize_t>(sizeof(T)) &&
         (v.stride == static_cast<ssize_t>(sizeof(T)) || v.n <= 1) &&
         reinterpret_cast<uintptr_t>(v.data) % alignof(T) == 0;
}

template <class S, class D>
void convert(const ArrayView& v, D* out) {
  const char* src = v.data;
  for (size_t k = 0; k < v.n; ++k, src += v.stride) {
    S s;
    std::memcpy(&s, src, sizeof(S));
    out[k] = static_cast<D>(s);
  }
}

// Integer-kind array (native order) -> D (int64 for indices, double for
// priorities). Unsigned values >= 2^63 become negative as int64 and are then
// caught by the unsigned range check like any other.
template <class D>
void convert_ints(const ArrayView& v, D* out) {
  const bool u = v.kind == 'u';
  switch (v.itemsize) {
    case 1: u ? convert<uint8_t>(v, out) : convert<int8_t>(v, out); break;
    case 2: u ? convert<uint16_t>(v, out) : convert<int16_t>(v, out); break;
    case 4: u ? convert<uint32_t>(v, out) : convert<int32_t>(v, out); break;
    case 8: u ? convert<uint64_t>(v, out) : convert<int64_t>(v, out); break;
    default: throw std::runtime_error("unsupported integer width");
  }
}

// Per calling thread, grown and reused: conversions never allocate per call.
struct Scratch {
  std::vector<int64_t> idx;
  std::vector<double> val;
};
thread_local Scratch tls_scratch;

struct Indices {
  ArrayView v;
  const int64_t* p = nullptr;
  size_t n = 0;
};

// check_indices of the contract.
Indices load_indices(py::handle h, uint64_t capacity, const char* what = "indices") {
  Indices I;
  I.v = view_1d(h, what);
  ArrayView& v = I.v;
  if (v.n == 0) {
    if (v.kind != 'i' && v.kind != 'u' && v.kind != 'f')
      raise(g_InvalidDTypeError,
            std::string(what) + " must be integers; found dtype " + dtype_str(v) + ".");
    return I;
  }
  if (v.kind != 'i' && v.kind != 'u')
    raise(g_InvalidDTypeError, std::string(what) + " must be an integer array; found dtype " +
                                   dtype_str(v) + ". Fix: convert explicitly, e.g. np.asarray(" +
                                   what + ", dtype=np.int64).");
  if (!v.native) {  // byte-swapped input: let numpy swap it (rare)
    py::object native = v.arr.attr("dtype").attr("newbyteorder")("=");
    v = view_1d(v.arr.attr("astype")(native), what);
  }
  I.n = v.n;
  if (v.kind == 'i' && is_plain<int64_t>(v)) {
    I.p = reinterpret_cast<const int64_t*>(v.data);
  } else {
    auto& buf = tls_scratch.idx;
    if (buf.size() < v.n) buf.resize(v.n);
    convert_ints(v, buf.data());
    I.p = buf.data();
  }
  const int64_t bad = SumTree::first_bad_index(I.p, I.n, capacity);
  if (bad >= 0)
    raise(g_InvalidIndexError, std::string(what) + "[" + std::to_string(bad) + "] = " +
                                   str_of(v.arr[py::int_(bad)]) +
                                   " is out of range; expected 0 <= index < capacity = " +
                                   std::to_string(capacity) + ".");
  return I;
}

struct Reals {
  ArrayView v;
  const double* p = nullptr;
  size_t n = 0;
};

// The dtype part of check_priorities / check_masses, then conversion to float64.
// expect_len >= 0: also the length rule of check_priorities.
Reals load_reals(py::handle h, const char* what, const char* fix, int64_t expect_len, size_t expect_n,
                 std::vector<double>& buf) {
  Reals R;
  R.v = view_1d(h, what);
  ArrayView& v = R.v;
  if (v.n && v.kind != 'i' && v.kind != 'u' && v.kind != 'f')
    raise(g_InvalidDTypeError, std::string(what) + " must be real numbers; found dtype " +
                                   dtype_str(v) + ". Fix: " + fix);
  if (expect_len >= 0 && v.n != expect_n)
    raise(g_InvalidValueError, "indices and priorities differ in length: " + std::to_string(expect_n) +
                                   " indices, " + std::to_string(v.n) +
                                   " priorities. Fix: pass one priority per index.");
  R.n = v.n;
  if (v.n == 0) return R;
  if (v.kind == 'f' && is_plain<double>(v)) {
    R.p = reinterpret_cast<const double*>(v.data);
    return R;
  }
  if (!v.native || (v.kind == 'f' && v.itemsize != 4 && v.itemsize != 8)) {
    // float16, long double, byte-swapped: numpy's own cast (same as astype in the contract)
    v = view_1d(v.arr.attr("astype")("float64"), what);
    if (is_plain<double>(v)) {
      R.p = reinterpret_cast<const double*>(v.data);
      return R;
    }
  }
  if (buf.size() < v.n) buf.resize(v.n);
  double* out = buf.data();
  if (v.kind == 'f') {
    v.itemsize == 8 ? convert<double>(v, out) : convert<float>(v, out);
  } else {
    convert_ints(v, out);
  }
  R.p = out;
  return R;
}

py::array new_array(int typenum, size_t n) {
  auto& api = py::detail::npy_api::get();
  ssize_t dims[1] = {static_cast<ssize_t>(n)};
  PyObject* descr = api.PyArray_DescrFromType_(typenum);
  if (!descr) throw py::error_already_set();
  PyObject* a = api.PyArray_NewFromDescr_(api.PyArray_Type_, descr, 1, dims, nullptr, nullptr, 0, nullptr);
  if (!a) throw py::error_already_set();
  return py::reinterpret_steal<py::array>(a);
}

template <class T>
T* array_data(const py::array& a) {
  return reinterpret_cast<T*>(py::detail::array_proxy(a.ptr())->data);
}

template <class Fn>
void locked(SumTree& t, size_t n, Fn&& fn) {
  if (n >= kReleaseGilMin) {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lk(t.mu);  // released before the GIL is re-taken
    fn();
  } else {
    std::lock_guard<std::mutex> lk(t.mu);
    fn();
  }
}

// ------------------------------------------------------------------ methods
void py_update(SumTree& t, py::handle indices, py::handle priorities) {
  Indices I = load_indices(indices, t.capacity());
  Reals P = load_reals(priorities, "priorities", "np.asarray(p, dtype=np.float64).", 0, I.n,
                       tls_scratch.val);
  const int64_t bad = SumTree::first_bad_priority(P.p, P.n);
  if (bad >= 0)
    raise(g_InvalidValueError, "priorities[" + std::to_string(bad) + "] = " + float_repr(P.p[bad]) +
                                   " is invalid; expected a finite value >= 0. Fix: clip or replace "
                                   "NaN/inf/negative priorities before updating.");
  if (I.n == 0) return;
  // The total must stay finite (pearl_core.sumtree: check_total). The new total is at most the
  // current one plus the batch's sum, so a batch far from the limit costs one pass over its
  // priorities; near it, the old leaves are kept, and put back if the new root overflowed (every
  // node is recomputed from its children, so the tree is bit for bit as it was).
  double batch = 0.0;
  for (size_t k = 0; k < P.n; ++k) batch += P.p[k];
  double before = 0.0, after = 0.0;
  bool refused = false;
  locked(t, I.n, [&] {
    before = t.total();
    if (before + batch <= 0.25 * DBL_MAX) {
      t.update(I.p, P.p, I.n);
      return;
    }
    std::vector<double> old(I.n);
    t.get(I.p, old.data(), I.n);
    t.update(I.p, P.p, I.n);
    after = t.total();
    if (!(after <= DBL_MAX)) {
      t.update(I.p, old.data(), I.n);
      refused = true;
    }
  });
  if (refused)
    raise(g_InvalidValueError, "priorities would make the sum tree's total overflow: the total is " +
                                   float_repr(before) + " and the batch adds up to " + float_repr(batch) +
                                   ", so the new total is not finite (" + float_repr(after) +
                                   "); expected a total <= the largest float (1.7976931348623157e+308). "
                                   "Nothing was updated. Fix: scale the priorities down (clip TD errors).");
}

py::array py_get(SumTree& t, py::handle indices) {
  Indices I = load_indices(indices, t.capacity());
  py::array out = new_array(py::detail::npy_api::NPY_DOUBLE_, I.n);
  if (I.n) locked(t, I.n, [&] { t.get(I.p, array_data<double>(out), I.n); });
  return out;
}

py::array py_sample(SumTree& t, py::handle masses) {
  Reals X = load_reals(masses, "masses", "np.asarray(x, dtype=np.float64).", -1, 0, tls_scratch.val);
  py::array out = new_array(py::detail::npy_api::NPY_INT64_, X.n);
  int64_t* o = array_data<int64_t>(out);
  int64_t bad = -1;
  double total = 0.0;
  // The mass checks need the total, so they run under the same lock as the
  // descent (a concurrent update cannot slip in between).
  locked(t, X.n, [&] {
    total = t.total();
    if (!(total > 0.0) || X.n == 0) return;
    bad = SumTree::first_bad_mass(X.p, X.n, total * (1.0 + g_mass_drift_rtol));
    if (bad < 0) t.sample(X.p, o, X.n);
  });
  if (!(total > 0.0))
    raise(g_EmptyTreeError,
          "cannot sample: every priority in the sum tree is zero (total = 0). "
          "Fix: insert items with a positive priority before sampling.");
  if (bad >= 0)
    raise(g_InvalidValueError, "masses[" + std::to_string(bad) + "] = " + float_repr(X.p[bad]) +
                                   " is outside [0, total) with total = " + float_repr(total) +
                                   ". Fix: draw masses as u * tree.total() with u in [0, 1).");
  return out;
}

double py_total(SumTree& t) {
  std::lock_guard<std::mutex> lk(t.mu);
  return t.total();
}

py::array py_leaves(SumTree& t) {
  py::array out = new_array(py::detail::npy_api::NPY_DOUBLE_, t.capacity());
  locked(t, t.capacity(), [&] { t.leaves(array_data<double>(out)); });
  return out;
}

void py_set_threads(SumTree& t, int threads) {
  if (threads < 1)
    raise(g_InvalidValueError, "threads must be >= 1; found " + std::to_string(threads) +
                                   ". Fix: pass None (all cores) or a positive int.");
  py::gil_scoped_release nogil;  // joining old workers must not hold the GIL
  std::lock_guard<std::mutex> lk(t.mu);
  t.set_threads(threads);
}

PyObject* import_attr(const char* module, const char* name) {
  py::object o = py::module_::import(module).attr(name);
  return o.release().ptr();  // kept for the process lifetime
}

}  // namespace

PYBIND11_MODULE(_sumtree, m) {
  m.doc() = "Native n-ary float64 sum tree (see pearl_cpu.sumtree.CpuSumTree for the Python API).";
  g_InvalidValueError = import_attr("pearl_core.errors", "InvalidValueError");
  g_InvalidIndexError = import_attr("pearl_core.errors", "InvalidIndexError");
  g_InvalidDTypeError = import_attr("pearl_core.errors", "InvalidDTypeError");
  g_EmptyTreeError = import_attr("pearl_core.errors", "EmptyTreeError");
  g_asarray = import_attr("numpy", "asarray");
  g_mass_drift_rtol = py::module_::import("pearl_core.sumtree").attr("MASS_DRIFT_RTOL").cast<double>();
  m.attr("MASS_DRIFT_RTOL") = g_mass_drift_rtol;
  m.attr("RELEASE_GIL_MIN") = kReleaseGilMin;

  // The serial-vs-threaded chooser, exposed so its logic can be unit tested.
  py::class_<pearl_cpu::PathRace>(m, "_PathRace")
      .def(py::init<>())
      .def("pick_parallel", &pearl_cpu::PathRace::pick_parallel)
      .def("record", &pearl_cpu::PathRace::record, py::arg("parallel"), py::arg("cold"),
           py::arg("ns_per_item"))
      .def_readonly("serial_ns", &pearl_cpu::PathRace::serial_ns)
      .def_readonly("parallel_ns", &pearl_cpu::PathRace::parallel_ns);

  py::class_<SumTree>(m, "SumTree")
      .def(py::init([](uint64_t capacity, uint64_t fanout, int threads) {
             if (threads < 1)
               raise(g_InvalidValueError, "threads must be >= 1; found " + std::to_string(threads) + ".");
             return new SumTree(capacity, fanout, threads);
           }),
           py::arg("capacity"), py::arg("fanout") = 16, py::arg("threads") = 1)
      .def("update", &py_update, py::arg("indices"), py::arg("priorities"),
           "Set p[indices[k]] = priorities[k]; a repeated index keeps its last value.")
      .def("get", &py_get, py::arg("indices"), "Return p[indices] as a new float64 array.")
      .def("sample", &py_sample, py::arg("masses"),
           "Return the int64 leaf index found for each mass (smallest i with prefix(i) > mass).")
      .def("total", &py_total, "Sum of all priorities (the root).")
      .def("leaves", &py_leaves, "Copy of all leaf priorities (float64, capacity long).")
      .def("check_consistency",
           [](SumTree& t) {
             std::lock_guard<std::mutex> lk(t.mu);
             return t.check_consistency();
           },
           "Recompute every inner node from its children and compare bit for bit.")
      .def_property_readonly("capacity", &SumTree::capacity)
      .def_property_readonly("fanout", &SumTree::fanout)
      .def_property_readonly("depth", &SumTree::depth, "Levels of groups below the root.")
      .def_property_readonly("group_slots", &SumTree::group_slots,
                             "Doubles per sibling group (fanout padded to 2, 4, 8 or a multiple of 8).")
      .def_property_readonly("memory_bytes", &SumTree::memory_bytes)
      .def_property("threads", &SumTree::threads, &py_set_threads)
      .def("set_threads", &py_set_threads, py::arg("threads"))
      .def_property_readonly("isa", [](SumTree& t) { return t.isa(); },
                             "Instruction set of the sample kernel ('avx2' or 'baseline').")
      .def(
          "_set_isa",
          [](SumTree& t, const std::string& name) {
            std::lock_guard<std::mutex> lk(t.mu);
            return t.set_isa(name);
          },
          py::arg("name"), "Select the sample kernel: 'auto', 'avx2' or 'baseline' (for testing).")
      .def(
          "_set_parallel_thresholds",
          [](SumTree& t, size_t sample_min, size_t update_min, size_t get_min, bool contention_guard) {
            std::lock_guard<std::mutex> lk(t.mu);
            t.tuning().sample_parallel_min = sample_min;
            t.tuning().update_parallel_min = update_min;
            t.tuning().get_parallel_min = get_min;
            t.tuning().contention_guard = contention_guard;
          },
          py::arg("sample_min"), py::arg("update_min"), py::arg("get_min"), py::arg("contention_guard") = true,
          "Batch sizes from which sample/update/get split across threads, and whether to fall back "
          "to serial while the pool sees contention (for benchmarking and tests).")
      .def("_parallel_stats",
           [](SumTree& t) {
             std::lock_guard<std::mutex> lk(t.mu);
             const auto s = t.parallel_stats();
             py::dict d;
             d["parallel_calls"] = s.parallel_calls;
             d["guarded_calls"] = s.guarded_calls;
             d["strikes"] = s.strikes;
             return d;
           },
           "Counters: batches split across threads, batches run serially because of contention, "
           "contention strikes.")
      .def("_parallel_thresholds", [](SumTree& t) {
        std::lock_guard<std::mutex> lk(t.mu);
        return py::make_tuple(t.tuning().sample_parallel_min, t.tuning().update_parallel_min,
                              t.tuning().get_parallel_min);
      });
}
