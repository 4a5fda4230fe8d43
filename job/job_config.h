// JobConfig: the typed form of an Osprey YAML config, shared by every binary of a job.
//
// Layering: this is job/ (target osprey::job), above common/config (the parameter-server part:
// cluster, tables, checkpoint; common/config/cluster_config.h), server/optim (to validate
// optimizer settings) and worker/models + worker/data (the model's sizes decide a dense table's
// size and a sparse table's width). The servers' and coordinator's libraries use only
// common/config; the worker, tools and the mains use this.
//
// The same file (plus the same --set overrides) is given to the coordinator, the servers, the
// workers and `osprey launch`, so every process sees one consistent job. LoadJobConfig validates
// everything it reads: an unknown key, a wrong type or an out-of-range value is an
// InvalidArgument naming the file, the key path and the problem. Cross-field checks (the model's
// tables exist and have the right type and width) happen here too, so a bad job fails before any
// process starts. See configs/local.yaml for a documented example of every section.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config/cluster_config.h"
#include "common/status.h"
#include "worker/data/synthetic.h"
#include "worker/models/model_factory.h"

namespace osprey::config {

struct ModelSection {
  models::ModelConfig model;      // type and DLRM sizes
  std::string sparse_table = "embeddings";
  std::string dense_table = "mlp";
  uint64_t seed = 1;              // dense parameter initialization
};

struct DataConfig {
  std::string source = "synthetic";  // synthetic | criteo
  data::SyntheticConfig synthetic;
  std::string train_path;  // criteo TSV
  std::string eval_path;   // criteo TSV (held out)
};

struct TrainConfig {
  int batch_size = 256;
  int64_t steps = 500;          // per worker
  int64_t eval_samples = 20000;  // held-out samples evaluated by worker 0 at the end
  int log_every_steps = 10;
  // Gradient accumulation (CPU workers): each step computes this many micro-batches of
  // batch_size on the parameters pulled once for the step, sums their gradients (dense: in
  // micro-batch order; rows: per key) and pushes once. One step is one clock tick in every
  // consistency mode (bsp closes a clock per push, ssp bounds staleness in pushes, async applies
  // each push); `steps` counts pushes, samples count micro-batches x batch_size.
  int accumulate_steps = 1;
};

struct ClientSection {
  int timeout_ms = 30000;  // a request without a reply for this long fails with DeadlineExceeded
  int max_inflight = 64;   // requests in flight per client before Push/Pull block
  // A push message of at least twice this many fp32 bytes goes in parts of about this size, so
  // the server applies one while the next is on the wire (worker/client/push_parts.h); 0: never.
  uint64_t push_part_bytes = 1 << 20;
  // A sparse pull whose reply from one server has at least twice this many bytes of rows is asked
  // for in parts of about this size, so the server reads one part's rows while the previous
  // part's reply is on the wire (worker/client/push_parts.h); 0: never.
  uint64_t pull_part_bytes = 1 << 20;
  // A thread waiting for replies takes them off the sockets itself when no other thread is doing
  // so, instead of sleeping until the client's I/O thread wakes it (worker/client/client.h).
  bool receive_in_wait = true;
};

// How osprey-worker computes: on the CPU or on a CUDA device, with a hot-row cache and prefetch
// on the GPU path (worker/gpu_trainer.h).
struct WorkerCacheConfig {
  uint64_t capacity_rows = 0;      // rows kept on the GPU; 0 = capacity_fraction decides
  double capacity_fraction = 0;    // of the sparse key space (sum of data cardinalities); 0 with
                                   // capacity_rows 0: no reuse across steps (every row re-pulled)
  int64_t staleness_bound = -1;    // steps a cached row may lag; -1: the sparse table's (bsp 0,
                                   // ssp staleness_bound, async 4)
  std::string index = "device";    // device: the index on the GPU (worker/gpu/cache_index.h);
                                   // host: planned on worker.plan_threads host threads
};

struct WorkerSection {
  std::string device = "cpu";  // cpu | cuda | auto (cuda when built with CUDA and a GPU is visible)
  int gpu = -1;                // CUDA device; -1: worker rank modulo the visible devices
  std::string precision = "tf32";  // GPU MLP products: fp32 | tf32 (TF32 tensor cores) | bf16
                                   // (bf16 operands, fp32 accumulation and master weights)
  bool prefetch = true;        // GPU: prepare step t+1 (data, dedupe, cache, pulls) during step t
  int data_threads = 2;        // GPU: threads generating synthetic batches ahead
  int data_pool_batches = 0;   // GPU, synthetic data: > 0 makes that many batches before training
                               // and reuses them round-robin (as the PyTorch reference does), so a
                               // throughput benchmark does not measure the generator; 0: fresh
                               // samples every step
  int plan_threads = 4;        // GPU: threads planning the row cache (its index is sharded by key)
  int pull_threads = 3;        // GPU: threads pulling consecutive steps' misses concurrently
  bool check_pulls = false;    // GPU: fill what a pull must write with NaN first and check every
                               // pulled and gathered value afterwards (a diagnosis mode: slower)
  bool nccl = true;            // GPU workers on one host reduce dense gradients over NCCL and
                               // each pushes and pulls only the servers it owns (gpu_trainer.h)
  // How a host group reduces a dense bucket (worker/gpu/allreduce_choice.h): nccl (reduce to the
  // chunk owners), ipc (the CUDA IPC allreduce, worker/cuda/ipc; NCCL when the GPUs cannot reach
  // each other), or auto (per bucket size, the faster of the two in a start-up calibration).
  std::string host_allreduce = "nccl";
  uint64_t dense_bucket_bytes = 2 << 20;  // GPU: dense gradient buckets (whole chunks of the
                                          // dense table), sent while backward still runs
  WorkerCacheConfig cache;
  // GPU device-side dense compression (worker/gpu/device_encoder.h): where the dense table's
  // codec encodes. auto: on the device when it can (exact magnitude top-k without clip_norm),
  // else on the host; device: on the device, an error for a codec it cannot encode; host: always
  // on the host (the CPU DenseCompressor, after the gradient is copied to the host).
  std::string encode_on = "auto";
  // FOR TESTS ONLY (adaptive_ratio's test and benchmark): the worker of rank debug_throttle_rank
  // sends every data-plane message that carries values (pushes) through a ThrottledTransport
  // (common/throttled_transport.h) of debug_throttle_bytes_per_sec, a slow uplink. -1 / 0: off.
  int debug_throttle_rank = -1;
  double debug_throttle_bytes_per_sec = 0;
  // Non-empty: `osprey launch` runs this command (argv; e.g. [python3, examples/train_dlrm.py])
  // once per worker rank instead of osprey-worker, with OSPREY_CONFIG, OSPREY_SETS,
  // OSPREY_COORDINATOR, OSPREY_RANK and OSPREY_WORLD_SIZE in its environment (osprey.connect()).
  std::vector<std::string> command;
};

// The whole job: the parameter-server part (cluster, tables, checkpoint, log level; a JobConfig
// can be passed wherever a PsConfig is expected) and what only workers and tools read.
struct JobConfig : PsConfig {
  ModelSection model;
  DataConfig data;
  TrainConfig train;
  ClientSection client;
  WorkerSection worker;
};

// Loads `path`, applies `overrides` ("a.b.c=value"), validates, and resolves derived values
// (a dense table of size 0 gets the model's parameter count). Errors: NotFound (no file),
// InvalidArgument (YAML syntax with line/column, or validation as described above).
StatusOr<JobConfig> LoadJobConfig(const std::string& path,
                                  const std::vector<std::string>& overrides = {});

// Same, from YAML text (`name` stands for the file in messages); used by tests.
StatusOr<JobConfig> ParseJobConfig(const std::string& yaml_text, const std::string& name,
                                   const std::vector<std::string>& overrides = {});

}  // namespace osprey::config
