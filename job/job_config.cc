#include "job/job_config.h"

#include <fstream>
#include <limits>
#include <sstream>

#include "common/config/yaml_fields.h"
#include "server/optim/optimizer.h"

namespace osprey::config {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();

void ParseModel(YamlFields& f, ModelSection* m) {
  f.Get("type", &m->model.type, {"dlrm", "lr"});
  f.Get("sparse_table", &m->sparse_table);
  f.Get("dense_table", &m->dense_table);
  f.Get("seed", &m->seed, 0, std::numeric_limits<uint64_t>::max());
  models::DlrmConfig& d = m->model.dlrm;
  f.Get("embedding_dim", &d.embedding_dim, 1, 4096);
  f.GetList("bottom_mlp", &d.bottom_mlp, 1, 1 << 16);
  f.GetList("top_mlp", &d.top_mlp, 1, 1 << 16);
}

void ParseData(YamlFields& f, DataConfig* d) {
  f.Get("source", &d->source, {"synthetic", "criteo"});
  f.Get("seed", &d->synthetic.seed, 0, std::numeric_limits<uint64_t>::max());
  f.Get("num_dense", &d->synthetic.num_dense, 0, 4096);
  f.GetList("cardinalities", &d->synthetic.cardinalities, 1, uint64_t{1} << 40);
  f.Get("zipf_alpha", &d->synthetic.zipf_alpha, 0, 10, /*lo_open=*/true);
  f.Get("train_path", &d->train_path);
  f.Get("eval_path", &d->eval_path);
  if (f.ok() && d->source == "criteo" && d->train_path.empty()) {
    f.Fail("train_path", "is required when source is criteo");
  }
}

void ParseRoot(YamlFields& f, JobConfig* job) {
  f.Section("cluster", [&](YamlFields& s) { ParseCluster(s, &job->cluster); });
  f.SectionList("tables", [&](YamlFields& s, size_t i) {
    job->tables.emplace_back();
    ParseTable(s, &job->tables.back());
  });
  f.Section("model", [&](YamlFields& s) { ParseModel(s, &job->model); });
  f.Section("data", [&](YamlFields& s) { ParseData(s, &job->data); });
  f.Section("train", [&](YamlFields& s) {
    s.Get("batch_size", &job->train.batch_size, 1, 1 << 24);
    s.Get("steps", &job->train.steps, 1, int64_t{1} << 40);
    s.Get("eval_samples", &job->train.eval_samples, 0, int64_t{1} << 32);
    s.Get("log_every_steps", &job->train.log_every_steps, 1, kMaxInt);
    s.Get("accumulate_steps", &job->train.accumulate_steps, 1, 4096);
  });
  f.Section("client", [&](YamlFields& s) {
    s.Get("timeout_ms", &job->client.timeout_ms, 1, 86400000);
    s.Get("max_inflight", &job->client.max_inflight, 1, 1 << 16);
    s.Get("push_part_bytes", &job->client.push_part_bytes, 0, uint64_t{1} << 30);
    s.Get("pull_part_bytes", &job->client.pull_part_bytes, 0, uint64_t{1} << 30);
    s.Get("receive_in_wait", &job->client.receive_in_wait);
  });
  f.Section("worker", [&](YamlFields& s) {
    s.Get("device", &job->worker.device, {"cpu", "cuda", "auto"});
    s.Get("gpu", &job->worker.gpu, -1, 1023);
    s.Get("precision", &job->worker.precision, {"fp32", "tf32", "bf16"});
    s.Get("prefetch", &job->worker.prefetch);
    s.Get("data_threads", &job->worker.data_threads, 1, 64);
    s.Get("data_pool_batches", &job->worker.data_pool_batches, 0, 1 << 16);
    s.Get("plan_threads", &job->worker.plan_threads, 1, 64);
    s.Get("pull_threads", &job->worker.pull_threads, 1, 8);
    s.Get("check_pulls", &job->worker.check_pulls);
    s.Get("nccl", &job->worker.nccl);
    s.Get("host_allreduce", &job->worker.host_allreduce, {"nccl", "ipc", "auto"});
    s.Get("dense_bucket_bytes", &job->worker.dense_bucket_bytes, 4096, uint64_t{1} << 34);
    s.GetList("command", &job->worker.command);
    // GPU device-side dense compression.
    s.Get("encode_on", &job->worker.encode_on, {"auto", "device", "host"});
    // Test-only slow uplink of one worker (adaptive_ratio, issue 18).
    s.Get("debug_throttle_rank", &job->worker.debug_throttle_rank, -1, 1 << 20);
    s.Get("debug_throttle_bytes_per_sec", &job->worker.debug_throttle_bytes_per_sec, 0, 1e12);
    s.Section("cache", [&](YamlFields& c) {
      c.Get("capacity_rows", &job->worker.cache.capacity_rows, 0, (uint64_t{1} << 31) - 1);
      c.Get("capacity_fraction", &job->worker.cache.capacity_fraction, 0, 1);
      c.Get("staleness_bound", &job->worker.cache.staleness_bound, -1, int64_t{1} << 30);
      c.Get("index", &job->worker.cache.index, {"device", "host"});
    });
  });
  f.Section("checkpoint", [&](YamlFields& s) { ParseCheckpoint(s, &job->checkpoint); });
  f.Section("security", [&](YamlFields& s) { ParseSecurity(s, &job->security); });
  f.Section("limits", [&](YamlFields& s) { ParseLimits(s, &job->limits); });
  f.Section("rdma", [&](YamlFields& s) { ParseRdma(s, &job->rdma); });
  f.Section("store", [&](YamlFields& s) { ParseStore(s, &job->store); });
  f.Section("metrics", [&](YamlFields& s) { ParseMetrics(s, &job->metrics); });
  f.Section("log", [&](YamlFields& s) {
    s.Get("level", &job->log_level, {"trace", "debug", "info", "warn", "error", "off"});
  });
}

// Cross-field checks and derived values; errors name the key that must change.
Status Resolve(JobConfig* job) {
  const std::string& file = job->file;
  if (job->tables.empty()) return InvalidArgument(file + ": tables: at least one table is required");
  if (job->worker.host_allreduce != "nccl" && !job->worker.nccl) {
    return InvalidArgument(file + ": worker.host_allreduce: '" + job->worker.host_allreduce +
                           "' reduces within the host group, which worker.nccl: false turns off");
  }
  if (job->worker.data_pool_batches > 0 && job->data.source != "synthetic") {
    return InvalidArgument(file + ": worker.data_pool_batches: only synthetic data can be pooled, not data.source '" +
                           job->data.source + "'");
  }
  for (size_t i = 0; i < job->tables.size(); ++i) {
    OSPREY_RETURN_IF_ERROR(ValidateTableName(file, job->tables, i));
    auto opt = server::Optimizer::Make(job->tables[i].optimizer);
    if (!opt.ok()) {
      return InvalidArgument(file + ": tables[" + std::to_string(i) + "].optimizer: " +
                             opt.status().message());
    }
    OSPREY_RETURN_IF_ERROR(ValidateTableCodecs(file, job->tables[i], i));
  }
  OSPREY_RETURN_IF_ERROR(ValidateStore(file, job->tables, &job->store));
  models::ModelConfig& mc = job->model.model;
  mc.dlrm.num_sparse = static_cast<int>(job->data.synthetic.cardinalities.size());
  mc.dlrm.num_dense = job->data.synthetic.num_dense;
  auto model = models::MakeModel(mc);
  if (!model.ok()) return InvalidArgument(file + ": model: " + model.status().message());
  int s = job->TableIndex(job->model.sparse_table);
  int d = job->TableIndex(job->model.dense_table);
  if (s < 0 || job->tables[s].type != TableType::kSparse) {
    return InvalidArgument(file + ": model.sparse_table: '" + job->model.sparse_table +
                           "' is not a sparse table of this config");
  }
  if (d < 0 || job->tables[d].type != TableType::kDense) {
    return InvalidArgument(file + ": model.dense_table: '" + job->model.dense_table +
                           "' is not a dense table of this config");
  }
  int want_dim = (*model)->embedding_dim();
  if (job->tables[s].dim != want_dim) {
    return InvalidArgument(file + ": tables[" + std::to_string(s) + "].dim: is " +
                           std::to_string(job->tables[s].dim) + " but model '" + mc.type +
                           "' needs rows of " + std::to_string(want_dim));
  }
  uint64_t n = (*model)->num_dense_params();
  TableConfig& dense = job->tables[d];
  if (dense.size == 0) dense.size = n;
  if (dense.size != n) {
    return InvalidArgument(file + ": tables[" + std::to_string(d) + "].size: is " +
                           std::to_string(dense.size) + " but the model has " + std::to_string(n) +
                           " dense parameters (use 0 for automatic)");
  }
  return Status::OK();
}

}  // namespace

StatusOr<JobConfig> ParseJobConfig(const std::string& yaml_text, const std::string& name,
                                   const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(name + ":" + std::to_string(e.mark.line + 1) + ":" +
                           std::to_string(e.mark.column + 1) + ": YAML syntax error: " + e.msg);
  }
  if (!root || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  for (const auto& o : overrides) OSPREY_RETURN_IF_ERROR(ApplyOverride(&root, o));
  JobConfig job;
  job.file = name;
  YamlFields f(root, "", name);
  if (f.ok()) ParseRoot(f, &job);
  OSPREY_RETURN_IF_ERROR(f.Finish());
  OSPREY_RETURN_IF_ERROR(Resolve(&job));
  return job;
}

StatusOr<JobConfig> LoadJobConfig(const std::string& path,
                                  const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) return NotFound("config file '" + path + "' cannot be opened");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseJobConfig(ss.str(), path, overrides);
}

}  // namespace osprey::config
