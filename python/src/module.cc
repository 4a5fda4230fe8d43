// osprey._C: the nanobind module under the `osprey` Python package. Thin: arrays in and out
// (numpy arrays or anything with __dlpack__ on the host, e.g. torch CPU tensors: zero-copy,
// no libtorch), Status -> osprey.OspreyError, and the GIL released around everything that
// blocks or copies. The Python package (osprey/__init__.py) builds the user-facing API on it.
//
// Waits run in slices of kWaitSliceMs: between slices the GIL is taken back and
// PyErr_CheckSignals runs, so Ctrl-C interrupts a wait (the request stays in flight; the
// Python handle keeps its arrays alive until the client finishes with them).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "python/src/job_client.h"
#include "python/src/kernels.h"
#include "tools/commands.h"
#include "worker/data/batch.h"
#include "worker/data/criteo.h"
#include "worker/data/metrics.h"
#include "worker/data/synthetic.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace osprey::python {
namespace {

constexpr int kWaitSliceMs = 50;

using Keys = nb::ndarray<const uint64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using FloatsIn = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;
using FloatsOut = nb::ndarray<float, nb::c_contig, nb::device::cpu>;

PyObject* g_error_class = nullptr;  // osprey.OspreyError, set by the package at import

[[noreturn]] void Raise(const Status& s) {
  PyObject* cls = g_error_class != nullptr ? g_error_class : PyExc_RuntimeError;
  PyObject* args = Py_BuildValue("(iss)", static_cast<int>(s.code()), StatusCodeName(s.code()),
                                 s.message().c_str());
  PyErr_SetObject(cls, args);
  Py_XDECREF(args);
  throw nb::python_error();
}

void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}

template <class T>
nb::ndarray<nb::numpy, T> ToNumpy(std::vector<T>&& v, std::initializer_list<size_t> shape) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(heap->data(), shape, owner);
}

// The sparse table's row width, or raises: an unknown or dense table.
const proto::TableSpec& Spec(JobClient& jc, uint32_t table) {
  const proto::ShardMap& map = jc.client()->shard_map();
  if (table >= static_cast<uint32_t>(map.tables_size())) Raise(InvalidArgument("unknown table id " + std::to_string(table)));
  return map.tables(static_cast<int>(table));
}

void CheckRows(JobClient& jc, uint32_t table, size_t n, size_t floats, const char* what) {
  Check(jc.CheckUsable());
  const proto::TableSpec& t = Spec(jc, table);
  if (t.type() != proto::TABLE_SPARSE) Raise(InvalidArgument("table '" + t.name() + "' is dense; " + what + " needs a sparse table"));
  if (floats != n * t.dim()) {
    Raise(InvalidArgument(std::string(what) + " on table '" + t.name() + "': " + std::to_string(n) + " keys need " +
                          std::to_string(n * t.dim()) + " floats (dim " + std::to_string(t.dim()) + "), got " +
                          std::to_string(floats)));
  }
}

void CheckDense(JobClient& jc, uint32_t table, size_t floats, const char* what) {
  Check(jc.CheckUsable());
  const proto::TableSpec& t = Spec(jc, table);
  if (t.type() != proto::TABLE_DENSE) Raise(InvalidArgument("table '" + t.name() + "' is sparse; " + what + " needs a dense table"));
  if (floats != t.size()) {
    Raise(InvalidArgument(std::string(what) + " on table '" + t.name() + "': the table has " + std::to_string(t.size()) +
                          " floats, got " + std::to_string(floats)));
  }
}

void Wait(JobClient& jc, worker::Ticket ticket, double timeout_s) {
  Check(jc.CheckUsable());
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    bool ready;
    {
      nb::gil_scoped_release unlocked;
      ready = jc.client()->WaitReady(ticket, kWaitSliceMs);
    }
    if (ready) break;
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_s >= 0 && waited >= timeout_s) {
      // snprintf, not PyErr_Format: PyUnicode_FromFormat has no %f (Python >= 3.12 raises SystemError).
      char message[128];
      std::snprintf(message, sizeof(message), "osprey: request not complete after %.3f s (still in flight; wait() again)",
                    waited);
      PyErr_SetString(PyExc_TimeoutError, message);
      throw nb::python_error();
    }
  }
  Status s;
  {
    nb::gil_scoped_release unlocked;
    s = jc.client()->Wait(ticket);
  }
  Check(s);
}

// Distinct keys in order of first appearance, and each input key's position among them.
std::tuple<nb::ndarray<nb::numpy, uint64_t>, nb::ndarray<nb::numpy, int64_t>> Dedupe(Keys keys) {
  const size_t n = keys.shape(0);
  std::vector<uint64_t> unique;
  std::vector<int64_t> inverse(n);
  {
    nb::gil_scoped_release unlocked;
    const uint64_t* k = keys.data();
    int bits = 4;
    while ((size_t{1} << bits) < 2 * n + 1) ++bits;
    std::vector<int32_t> slots(size_t{1} << bits, -1);
    const size_t mask = slots.size() - 1;
    unique.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      size_t s = static_cast<size_t>((k[i] * 0x9E3779B97F4A7C15ull) >> (64 - bits));
      while (slots[s] >= 0 && unique[slots[s]] != k[i]) s = (s + 1) & mask;
      if (slots[s] < 0) {
        slots[s] = static_cast<int32_t>(unique.size());
        unique.push_back(k[i]);
      }
      inverse[i] = slots[s];
    }
  }
  const size_t u = unique.size();
  return {ToNumpy(std::move(unique), {u}), ToNumpy(std::move(inverse), {n})};
}

// The synthetic planted-model data of a job config (data.synthetic), one stream.
class SyntheticData {
 public:
  SyntheticData(const std::string& config_path, const std::vector<std::string>& sets, uint64_t stream) {
    StatusOr<config::JobConfig> job = config::LoadJobConfig(config_path, sets);
    Check(job.status());
    auto gen = data::SyntheticGenerator::Make(job->data.synthetic, stream);
    Check(gen.status());
    gen_ = std::move(gen).value();
  }
  // (dense [n, num_dense] f32, keys [n, num_sparse] u64 FeatureKeys, labels [n], oracle [n]).
  nb::tuple Next(int n) {
    data::Batch b;
    std::vector<uint64_t> keys;
    {
      nb::gil_scoped_release unlocked;
      gen_->NextBatch(n, &b);
      keys.resize(b.ids.size());
      for (int i = 0; i < b.size; ++i) {
        for (int f = 0; f < b.num_sparse; ++f) {
          const size_t j = static_cast<size_t>(i) * b.num_sparse + f;
          keys[j] = data::FeatureKey(f, b.ids[j]);
        }
      }
    }
    const size_t rows = b.size;
    return nb::make_tuple(ToNumpy(std::move(b.dense), {rows, size_t(b.num_dense)}),
                          ToNumpy(std::move(keys), {rows, size_t(b.num_sparse)}),
                          ToNumpy(std::move(b.labels), {rows}), ToNumpy(std::move(b.oracle_prob), {rows}));
  }
  int num_dense() const { return gen_->num_dense(); }
  int num_sparse() const { return gen_->num_sparse(); }

 private:
  std::unique_ptr<data::SyntheticGenerator> gen_;
};

// A Criteo TSV file, one shard of its lines (worker/data/criteo.h: the C++ worker's reader and
// preprocessing). next(n) gives up to n samples, 0 rows at the end of the file (no wrap-around:
// the Python side reopens for another epoch).
class CriteoData {
 public:
  CriteoData(const std::string& path, int shard, int num_shards) {
    auto r = data::CriteoReader::Open(path, shard, num_shards);
    Check(r.status());
    reader_ = std::move(r).value();
  }
  // (dense [n, 13] f32, keys [n, 26] u64 FeatureKeys, labels [n]).
  nb::tuple Next(int n) {
    data::Batch b;
    std::vector<uint64_t> keys;
    Status s;
    {
      nb::gil_scoped_release unlocked;
      s = reader_->Next(n, &b);
      if (s.ok()) {
        keys.resize(b.ids.size());
        for (size_t j = 0; j < keys.size(); ++j) keys[j] = data::FeatureKey(static_cast<int>(j % b.num_sparse), b.ids[j]);
      }
    }
    Check(s);
    const size_t rows = b.size;
    return nb::make_tuple(ToNumpy(std::move(b.dense), {rows, size_t(data::CriteoReader::kNumDense)}),
                          ToNumpy(std::move(keys), {rows, size_t(data::CriteoReader::kNumSparse)}),
                          ToNumpy(std::move(b.labels), {rows}));
  }

 private:
  std::unique_ptr<data::CriteoReader> reader_;
};

nb::dict JobInfo(JobClient& jc) {
  const config::JobConfig& j = jc.job();
  nb::dict d;
  d["config"] = j.file;
  d["coordinator"] = j.cluster.coordinator;
  d["num_servers"] = j.cluster.num_servers;
  d["sparse_table"] = j.model.sparse_table;
  d["dense_table"] = j.model.dense_table;
  d["model"] = j.model.model.type;
  d["embedding_dim"] = j.model.model.dlrm.embedding_dim;
  d["num_dense"] = j.model.model.dlrm.num_dense;
  d["num_sparse"] = j.model.model.dlrm.num_sparse;
  d["bottom_mlp"] = j.model.model.dlrm.bottom_mlp;
  d["top_mlp"] = j.model.model.dlrm.top_mlp;
  d["seed"] = j.model.seed;
  d["batch_size"] = j.train.batch_size;
  d["steps"] = j.train.steps;
  d["eval_samples"] = j.train.eval_samples;
  d["log_every_steps"] = j.train.log_every_steps;
  d["timeout_ms"] = j.client.timeout_ms;
  d["data_source"] = j.data.source;
  d["train_path"] = j.data.train_path;
  d["eval_path"] = j.data.eval_path;
  return d;
}

}  // namespace
}  // namespace osprey::python

NB_MODULE(_C, m) {
  using namespace osprey;
  using namespace osprey::python;
  m.doc() = "Osprey parameter-server client (the C++ worker client, through nanobind)";
  // Clients still referenced from module globals at interpreter exit are not leaks worth a report.
  nb::set_leak_warnings(false);

  m.def("_set_error_class", [](nb::handle cls) {
    Py_XINCREF(cls.ptr());
    g_error_class = cls.ptr();
  });

  nb::class_<JobClient>(m, "JobClient")
      .def_static(
          "connect",
          [](const std::string& config, const std::vector<std::string>& sets, const std::string& coordinator, int rank,
             int timeout_ms) {
            ConnectOptions o{config, sets, coordinator, rank, timeout_ms};
            StatusOr<std::unique_ptr<JobClient>> jc = Unavailable("not connected");
            {
              nb::gil_scoped_release unlocked;
              jc = JobClient::Connect(o);
            }
            Check(jc.status());
            return std::move(jc).value();
          },
          "config"_a, "sets"_a, "coordinator"_a, "rank"_a, "timeout_ms"_a)
      .def_prop_ro("rank", &JobClient::rank)
      .def_prop_ro("num_workers", &JobClient::num_workers)
      .def("check_usable", [](JobClient& jc) { Check(jc.CheckUsable()); })
      .def("info", &JobInfo)
      .def("tables",
           [](JobClient& jc) {
             nb::list out;
             for (const proto::TableSpec& t : jc.client()->shard_map().tables()) {
               out.append(nb::make_tuple(t.name(), t.id(), t.type() == proto::TABLE_SPARSE, t.dim(), t.size()));
             }
             return out;
           })
      .def("servers",
           [](JobClient& jc) {
             std::vector<std::string> s(jc.client()->shard_map().server_endpoints().begin(),
                                        jc.client()->shard_map().server_endpoints().end());
             return s;
           })
      .def("pull",
           [](JobClient& jc, uint32_t table, Keys keys, FloatsOut out, int64_t clock) {
             CheckRows(jc, table, keys.shape(0), out.size(), "pull");
             nb::gil_scoped_release unlocked;
             return jc.client()->Pull(table, keys.data(), keys.shape(0), out.data(), clock);
           },
           "table"_a, "keys"_a.noconvert(), "out"_a.noconvert(), "clock"_a)
      .def("push",
           [](JobClient& jc, uint32_t table, Keys keys, FloatsIn grads, int64_t clock) {
             CheckRows(jc, table, keys.shape(0), grads.size(), "push");
             nb::gil_scoped_release unlocked;
             return jc.client()->Push(table, keys.data(), keys.shape(0), grads.data(), clock,
                                      jc.client()->version(table));
           },
           "table"_a, "keys"_a.noconvert(), "grads"_a.noconvert(), "clock"_a)
      .def("pull_dense",
           [](JobClient& jc, uint32_t table, FloatsOut out, int64_t clock) {
             CheckDense(jc, table, out.size(), "pull_dense");
             nb::gil_scoped_release unlocked;
             return jc.client()->PullDense(table, out.data(), clock);
           },
           "table"_a, "out"_a.noconvert(), "clock"_a)
      .def("push_dense",
           [](JobClient& jc, uint32_t table, FloatsIn grads, int64_t clock) {
             CheckDense(jc, table, grads.size(), "push_dense");
             nb::gil_scoped_release unlocked;
             return jc.client()->PushDense(table, grads.data(), clock, jc.client()->version(table));
           },
           "table"_a, "grads"_a.noconvert(), "clock"_a)
      .def("init_dense",
           [](JobClient& jc, uint32_t table, FloatsIn values) {
             CheckDense(jc, table, values.size(), "init_dense");
             nb::gil_scoped_release unlocked;
             return jc.client()->InitDense(table, values.data());
           },
           "table"_a, "values"_a.noconvert())
      .def("wait", &Wait, "ticket"_a, "timeout_s"_a)
      .def("ready",
           [](JobClient& jc, worker::Ticket t) {
             nb::gil_scoped_release unlocked;
             return jc.client()->WaitReady(t, 0);
           })
      .def("barrier",
           [](JobClient& jc, const std::string& name, int timeout_ms) {
             Status s;
             {
               nb::gil_scoped_release unlocked;
               s = jc.Barrier(name, timeout_ms);
             }
             Check(s);
           })
      // `osprey checkpoint` of this job (tools/checkpoint_command.cc, the same code): every live
      // server writes its file into `dir` ("" = checkpoint.dir); with bsp tables a cut at the next
      // clock every server closes. Prints what `osprey checkpoint` prints; returns its exit code.
      .def("checkpoint",
           [](JobClient& jc, const std::string& dir, int timeout_ms) {
             Check(jc.CheckUsable());
             const config::JobConfig& j = jc.job();
             const std::string keys = j.security.mode == config::SecurityMode::kCurve ? j.security.keys_dir : "";
             nb::gil_scoped_release unlocked;
             return tools::RunCheckpoint(j.cluster.coordinator, dir, timeout_ms, keys);
           },
           "dir"_a, "timeout_ms"_a)
      .def("set_progress", &JobClient::SetProgress)
      .def("report",
           [](JobClient& jc, int64_t steps, uint64_t samples, double seconds, double loss, double auc, double logloss,
              double oracle_auc, uint64_t eval_samples) {
             FinalReport r{steps, samples, seconds, loss, auc, logloss, oracle_auc, eval_samples};
             Status s;
             {
               nb::gil_scoped_release unlocked;
               s = jc.Report(r);
             }
             Check(s);
           })
      .def("stats",
           [](JobClient& jc) {
             worker::ClientStats s = jc.client()->stats();
             nb::dict d;
             d["requests"] = s.requests;
             d["bytes_pushed"] = s.bytes_pushed;
             d["bytes_pulled"] = s.bytes_pulled;
             d["errors"] = s.errors;
             return d;
           })
      .def("close", [](JobClient& jc) {
        nb::gil_scoped_release unlocked;
        jc.Close();
      });

  nb::class_<SyntheticData>(m, "SyntheticData")
      .def(nb::init<const std::string&, const std::vector<std::string>&, uint64_t>(), "config"_a, "sets"_a, "stream"_a)
      .def("next", &SyntheticData::Next, "n"_a)
      .def_prop_ro("num_dense", &SyntheticData::num_dense)
      .def_prop_ro("num_sparse", &SyntheticData::num_sparse);
  m.attr("EVAL_STREAM") = data::SyntheticGenerator::kEvalStreamId;
  nb::class_<CriteoData>(m, "CriteoData")
      .def(nb::init<const std::string&, int, int>(), "path"_a, "shard"_a, "num_shards"_a)
      .def("next", &CriteoData::Next, "n"_a);

  m.def("dedupe", &Dedupe, "keys"_a.noconvert());
  AddKernels(m);
  m.def("auc", [](nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu> scores,
                  nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu> labels) {
    if (scores.shape(0) != labels.shape(0)) Raise(InvalidArgument("auc: scores and labels differ in length"));
    nb::gil_scoped_release unlocked;
    return data::Auc(scores.data(), labels.data(), scores.shape(0));
  });
}
