#include "common/config/job_config.h"

#include <fstream>
#include <limits>
#include <sstream>

#include "common/codec/codec.h"
#include "common/config/codec_yaml.h"
#include "common/config/yaml_fields.h"

namespace osprey::config {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
constexpr double kHuge = 1e30;

void ParseCluster(YamlFields& f, ClusterConfig* c) {
  f.Get("servers", &c->num_servers, 1, 4096);
  f.Get("workers", &c->num_workers, 1, 4096);
  f.Get("transport", &c->transport, {"tcp", "ipc"});
  f.Get("host", &c->host);
  f.Get("coordinator", &c->coordinator);
  f.Get("ipc_dir", &c->ipc_dir);
  f.Get("heartbeat_interval_ms", &c->heartbeat_interval_ms, 10, 600000);
  f.Get("heartbeat_timeout_ms", &c->heartbeat_timeout_ms, 50, 3600000);
  f.Get("startup_timeout_ms", &c->startup_timeout_ms, 100, 3600000);
  if (f.ok() && c->heartbeat_timeout_ms <= c->heartbeat_interval_ms) {
    f.Fail("heartbeat_timeout_ms", "must be larger than heartbeat_interval_ms (" +
                                       std::to_string(c->heartbeat_interval_ms) + ")");
  }
  if (f.ok() && c->coordinator.rfind("tcp://", 0) != 0 && c->coordinator.rfind("ipc://", 0) != 0) {
    f.Fail("coordinator", "'" + c->coordinator + "' is not a tcp:// or ipc:// endpoint");
  }
}

void ParseOptimizer(YamlFields& f, server::OptimizerConfig* o) {
  std::string type = server::OptimizerTypeName(o->type);
  f.Get("type", &type, {"sgd", "momentum", "nesterov", "adagrad", "adam", "ftrl"});
  if (f.ok()) o->type = *server::ParseOptimizerType(type);
  f.Get("lr", &o->lr, 0, kHuge, /*lo_open=*/true);
  f.Get("momentum", &o->momentum, 0, 0.999999);
  f.Get("initial_accumulator", &o->initial_accumulator, 0, kHuge);
  f.Get("eps", &o->eps, 0, 1, /*lo_open=*/true);
  f.Get("beta1", &o->beta1, 0, 0.999999);
  f.Get("beta2", &o->beta2, 0, 0.999999);
  f.Get("alpha", &o->ftrl_alpha, 0, kHuge, /*lo_open=*/true);
  f.Get("beta", &o->ftrl_beta, 0, kHuge);
  f.Get("l1", &o->ftrl_l1, 0, kHuge);
  f.Get("l2", &o->ftrl_l2, 0, kHuge);
  f.Get("weight_decay", &o->weight_decay, 0, kHuge);
  f.Get("clip_value", &o->clip_value, 0, kHuge);
  f.Get("clip_norm", &o->clip_norm, 0, kHuge);
}

void ParseTable(YamlFields& f, TableConfig* t) {
  f.Get("name", &t->name);
  f.Get("type", &t->type, {"sparse", "dense"});
  f.Get("dim", &t->dim, 1, 65536);
  f.Get("size", &t->size, 0, uint64_t{1} << 40);
  f.Get("chunk_floats", &t->chunk_floats, 1, uint64_t{1} << 32);
  f.Section("init", [&](YamlFields& s) {
    s.Get("type", &t->init.type, {"uniform", "normal", "zeros"});
    s.Get("scale", &t->init.scale, 0, kHuge);
    s.Get("seed", &t->init.seed, 0, std::numeric_limits<uint64_t>::max());
  });
  f.Section("optimizer", [&](YamlFields& s) { ParseOptimizer(s, &t->optimizer); });
  f.Section("consistency", [&](YamlFields& s) { ParseConsistency(s, &t->consistency); });
  f.Section("codec", [&](YamlFields& s) { ParseCodec(s, &t->codec); });
  f.Get("pull_codec", &t->pull_codec, {"none", "fp16", "bf16"});
  if (f.ok() && t->name.empty()) f.Fail("name", "every table needs a non-empty name");
}

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
  });
  f.Section("client", [&](YamlFields& s) {
    s.Get("timeout_ms", &job->client.timeout_ms, 1, 86400000);
    s.Get("max_inflight", &job->client.max_inflight, 1, 1 << 16);
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
    s.Get("nccl", &job->worker.nccl);
    s.Get("dense_bucket_bytes", &job->worker.dense_bucket_bytes, 4096, uint64_t{1} << 34);
    s.Section("cache", [&](YamlFields& c) {
      c.Get("capacity_rows", &job->worker.cache.capacity_rows, 0, (uint64_t{1} << 31) - 1);
      c.Get("capacity_fraction", &job->worker.cache.capacity_fraction, 0, 1);
      c.Get("staleness_bound", &job->worker.cache.staleness_bound, -1, int64_t{1} << 30);
    });
  });
  f.Section("checkpoint", [&](YamlFields& s) { ParseCheckpoint(s, &job->checkpoint); });
  f.Section("log", [&](YamlFields& s) {
    s.Get("level", &job->log_level, {"trace", "debug", "info", "warn", "error", "off"});
  });
}

// Cross-field checks and derived values; errors name the key that must change.
Status Resolve(JobConfig* job) {
  const std::string& file = job->file;
  if (job->tables.empty()) return InvalidArgument(file + ": tables: at least one table is required");
  if (job->worker.data_pool_batches > 0 && job->data.source != "synthetic") {
    return InvalidArgument(file + ": worker.data_pool_batches: only synthetic data can be pooled, not data.source '" +
                           job->data.source + "'");
  }
  for (size_t i = 0; i < job->tables.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (job->tables[i].name == job->tables[j].name) {
        return InvalidArgument(file + ": tables[" + std::to_string(i) + "].name: '" +
                               job->tables[i].name + "' is used twice");
      }
    }
    auto opt = server::Optimizer::Make(job->tables[i].optimizer);
    if (!opt.ok()) {
      return InvalidArgument(file + ": tables[" + std::to_string(i) + "].optimizer: " +
                             opt.status().message());
    }
    Status codec = codec::ValidateCodecConfig(job->tables[i].codec);
    if (!codec.ok()) {
      return InvalidArgument(file + ": tables[" + std::to_string(i) + "].codec: " + codec.message());
    }
    // A sparse table's pushes are already row-sparse (one deduplicated row per key): its rows go
    // whole, at most cast to 16 bits. Everything else would be silently meaningless there.
    const codec::CodecConfig& c = job->tables[i].codec;
    if (job->tables[i].type == "dense" && job->tables[i].pull_codec != "none") {
      return InvalidArgument(file + ": tables[" + std::to_string(i) + "].pull_codec: table '" +
                             job->tables[i].name + "' is dense; only sparse tables' rows can be pulled as " +
                             job->tables[i].pull_codec);
    }
    if (job->tables[i].type == "sparse") {
      const std::string where = file + ": tables[" + std::to_string(i) + "].codec: table '" +
                                job->tables[i].name + "' is sparse";
      if (c.type != "none" && c.type != "fp16" && c.type != "bf16") {
        return InvalidArgument(where + ": its gradient rows are sent whole, so the codec must be none, fp16 or bf16 "
                               "(got '" + c.type + "'; top-k, random-k and onebit are for dense tables)");
      }
      if (c.error_feedback || c.dgc_momentum != 0.0f || c.clip_norm != 0.0f || c.schedule.type != "none") {
        return InvalidArgument(where + ": error_feedback, dgc_momentum, clip_norm and schedule apply to dense "
                               "tables only");
      }
    }
  }
  models::ModelConfig& mc = job->model.model;
  mc.dlrm.num_sparse = static_cast<int>(job->data.synthetic.cardinalities.size());
  mc.dlrm.num_dense = job->data.synthetic.num_dense;
  auto model = models::MakeModel(mc);
  if (!model.ok()) return InvalidArgument(file + ": model: " + model.status().message());
  int s = job->TableIndex(job->model.sparse_table);
  int d = job->TableIndex(job->model.dense_table);
  if (s < 0 || job->tables[s].type != "sparse") {
    return InvalidArgument(file + ": model.sparse_table: '" + job->model.sparse_table +
                           "' is not a sparse table of this config");
  }
  if (d < 0 || job->tables[d].type != "dense") {
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

int JobConfig::TableIndex(const std::string& name) const {
  for (size_t i = 0; i < tables.size(); ++i) {
    if (tables[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

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
