// The GPU training loop (see gpu_trainer.h for what it does and its ordering rules).
#include "worker/gpu_trainer.h"

#include <cuda_runtime_api.h>
#ifdef OSPREY_HAVE_NCCL
#include <nccl.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "common/logging.h"
#include "common/placement.h"
#include "worker/cache/sharded_row_cache.h"
#include "worker/cuda/dlrm/gpu_dlrm.h"
#include "worker/cuda/sparse/sparse_kernels.h"
#include "worker/data/metrics.h"
#include "worker/data/synthetic.h"
#include "worker/models/dlrm.h"

namespace osprey::worker {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::OK();
  (void)cudaGetLastError();  // clear a sticky launch error so it is not blamed on the next call
  std::string m = std::string(what) + ": " + cudaGetErrorString(e);
  if (e == cudaErrorMemoryAllocation) return ResourceExhausted(m);
  return Internal(m);
}
#define OSPREY_CUDA(expr) OSPREY_RETURN_IF_ERROR(CudaStatus((expr), #expr))

// Device array owned by the loop; freed on destruction.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (p_) cudaFree(p_);
  }
  Status Allocate(size_t n, const char* what) {
    Status s = CudaStatus(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(n, 1) * sizeof(T)), what);
    n_ = s.ok() ? n : 0;
    return s;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// Page-locked host array (fast, asynchronous copies); freed on destruction.
template <typename T>
class PinnedArray {
 public:
  PinnedArray() = default;
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  ~PinnedArray() {
    if (p_) cudaFreeHost(p_);
  }
  Status Allocate(size_t n, const char* what) {
    return CudaStatus(cudaMallocHost(reinterpret_cast<void**>(&p_), std::max<size_t>(n, 1) * sizeof(T)), what);
  }
  T* get() const { return p_; }
  T& operator[](size_t i) const { return p_[i]; }

 private:
  T* p_ = nullptr;
};

// Batches of steps 0, 1, 2, ... made ahead of time. Synthetic data: `threads` generators of the
// worker's stream, generator j making steps j, j + threads, ... (batch t is samples
// [t*B, (t+1)*B), as in the CPU loop). Other sources: one thread over the DataSource.
// With a pool (synthetic data, worker.data_pool_batches = P > 0) the generators make batches
// 0 .. P-1 once, in Start, and step t gets a copy of batch t % P.
class BatchReader {
 public:
  BatchReader(const config::JobConfig& job, int rank, int num_workers, int threads, int pool)
      : job_(job), rank_(rank), num_workers_(num_workers),
        threads_(job.data.source == "synthetic" ? threads : 1), slots_(2 * threads_),
        pool_(job.data.source == "synthetic" ? static_cast<size_t>(pool) : 0) {}

  ~BatchReader() { Stop(); }

  // Starts the generators; with a pool, returns once the pool is made (or its first error).
  Status Start() {
    if (!pool_.empty()) {
      std::vector<Status> errors(threads_);
      for (int j = 0; j < threads_; ++j) workers_.emplace_back([this, j, &errors] { errors[j] = FillPool(j); });
      for (auto& t : workers_) t.join();
      workers_.clear();
      for (const Status& e : errors) OSPREY_RETURN_IF_ERROR(e);
      return Status::OK();
    }
    for (int j = 0; j < threads_; ++j) workers_.emplace_back([this, j] { Produce(j); });
    return Status::OK();
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  // The batch of `step` (taken in order 0, 1, 2, ...): *batch points to it, valid until the next
  // Take. It is swapped into *scratch, or with a pool is the pool's own (read-only) batch, not a
  // copy. OutOfRange when a finite source ended.
  Status Take(int64_t step, data::Batch* scratch, const data::Batch** batch) {
    if (!pool_.empty()) {
      *batch = &pool_[step % pool_.size()];
      return Status::OK();
    }
    *batch = scratch;
    data::Batch* out = scratch;
    std::unique_lock<std::mutex> lock(mu_);
    Slot& slot = slots_[step % slots_.size()];
    cv_.wait(lock, [&] { return slot.step == step || stop_; });
    if (slot.step != step) return Aborted("batch reader stopped");
    std::swap(*out, slot.batch);
    Status s = slot.status;
    slot.step = -1;
    next_take_ = step + 1;
    cv_.notify_all();
    return s;
  }

 private:
  struct Slot {
    int64_t step = -1;  // the step whose batch the slot holds; -1: empty
    data::Batch batch;
    Status status;
  };

  Status FillPool(int j) {
    OSPREY_ASSIGN_OR_RETURN(auto gen, data::SyntheticGenerator::Make(job_.data.synthetic, static_cast<uint64_t>(rank_)));
    const int b = job_.train.batch_size;
    for (size_t t = j; t < pool_.size(); t += threads_) {
      gen->SeekToSample(static_cast<uint64_t>(t) * b);
      gen->NextBatch(b, &pool_[t]);
    }
    return Status::OK();
  }

  void Produce(int j) {
    std::unique_ptr<data::SyntheticGenerator> gen;
    std::unique_ptr<DataSource> source;
    Status status;
    if (job_.data.source == "synthetic") {
      auto g = data::SyntheticGenerator::Make(job_.data.synthetic, static_cast<uint64_t>(rank_));
      if (g.ok()) gen = std::move(*g); else status = g.status();
    } else {
      auto src = MakeDataSource(job_, rank_, num_workers_, /*train=*/true);
      if (src.ok()) source = std::move(*src); else status = src.status();
    }
    const int b = job_.train.batch_size;
    data::Batch batch;
    for (int64_t t = j; ; t += threads_) {
      if (status.ok()) {
        if (gen) {
          gen->SeekToSample(static_cast<uint64_t>(t) * b);
          gen->NextBatch(b, &batch);
        } else {
          status = source->Next(b, &batch);
          if (status.ok() && batch.size == 0) status = OutOfRange("training data ended");
        }
      }
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || t < next_take_ + static_cast<int64_t>(slots_.size()); });
      if (stop_) return;
      Slot& slot = slots_[t % slots_.size()];
      std::swap(slot.batch, batch);
      slot.status = status;
      slot.step = t;
      cv_.notify_all();
      if (!status.ok()) return;  // the error is delivered at step t; nothing after it
    }
  }

  const config::JobConfig& job_;
  const int rank_, num_workers_, threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;     // GUARDED_BY(mu_)
  std::vector<data::Batch> pool_;  // filled by Start, read-only afterwards
  int64_t next_take_ = 0;       // GUARDED_BY(mu_)
  bool stop_ = false;           // GUARDED_BY(mu_)
  std::vector<std::thread> workers_;
};

// Everything one step needs on the device, prepared by the prefetch side; ring_ of them rotate.
struct StepInput {
  int64_t step = -1;
  int batch = 0;
  int num_unique = 0;
  uint64_t sparse_version = 0;  // client's table versions after this step's pulls
  uint64_t dense_version = 0;
  data::Batch host;
  PinnedArray<uint64_t> h_ids, h_unique;
  PinnedArray<float> h_dense, h_labels, h_params;
  PinnedArray<int32_t> h_slots, h_count;
  PinnedArray<int32_t> h_server_counts;  // several servers: distinct keys per server (h_unique is grouped)
  DeviceArray<uint64_t> d_ids, d_unique;
  DeviceArray<int32_t> d_row_index, d_slots, d_count, d_server_counts;
  DeviceArray<float> d_dense, d_labels, d_params;
  // The cache misses of this step: planned by the planner stage, pulled by the puller stage.
  std::vector<uint64_t> miss_keys;
  std::vector<int32_t> miss_slots;
  PinnedArray<float> h_miss_rows;
  PinnedArray<int32_t> h_miss_slots;
  DeviceArray<float> d_miss_rows;
  DeviceArray<int32_t> d_miss_slots;
  cudaEvent_t pulled = nullptr;    // host group: the pull stream finished; the slice broadcast follows
  cudaEvent_t ready = nullptr;     // the step's inputs are complete on the device
  cudaEvent_t gathered = nullptr;  // compute stream finished reading this step's cache slots
  cudaEvent_t bcast_start = nullptr, bcast_end = nullptr;  // host group: the parameter all-gather
};

// A contiguous range of the dense vector whose chunks one local rank owns (the root of its
// reduce and of its broadcast).
struct OwnedRange {
  size_t first = 0, count = 0;
  int root = 0;
};

// A dense gradient bucket: whole chunks of the dense table, [begin, end) in floats. Buckets are
// numbered in the order backward finishes them: bucket 0 is the end of the vector (the top MLP).
struct DenseBucket {
  size_t begin = 0, end = 0;
  std::vector<OwnedRange> ranges;                  // host group: the reduce, one op per range
  std::vector<OwnedRange> own;                     // copied to the host by this rank
  std::vector<bool> push_servers;                  // servers pushed once this bucket is on the host
  bool any_push = false;
};

// Pull stages run on pullers_n_ = worker.pull_threads threads (at most kMaxPullers), step t on
// thread t % pullers_n_, so the pulls of consecutive steps overlap.
constexpr int kMaxPullers = 8;
// Steps in flight, ring_ = 2 + pullers_n_: with 2 pullers the planner works on t+3 while the
// pullers work on t+1 and t+2 and the main thread computes t. Also the cache's pinned_steps.
constexpr int kMaxRing = 2 + kMaxPullers;
// Steps whose pushes may be unacknowledged while the next step pushes.
constexpr int64_t kPushWindow = 2;

class GpuTrainer final : public TrainLoop {
 public:
  GpuTrainer(const config::JobConfig& job, int rank, int num_workers, Client* client, int device,
             const HostGroup& host)
      : job_(job), rank_(rank), num_workers_(num_workers), client_(client), device_(device), host_(host) {}

  ~GpuTrainer() override {
    StopPrefetch();
    if (compressor_) (void)client_->SetEncoder(dense_table_, nullptr);  // the client owns it
    cudaSetDevice(device_);
    for (cudaStream_t s : {plan_stream_, compute_stream_, comm_stream_}) {
      if (s) cudaStreamSynchronize(s);
    }
    for (cudaStream_t s : pull_stream_) {
      if (s) cudaStreamSynchronize(s);
    }
    for (auto& in : inputs_) {
      for (cudaEvent_t e : {in.pulled, in.ready, in.gathered, in.bcast_start, in.bcast_end}) {
        if (e) cudaEventDestroy(e);
      }
    }
    for (auto& per_step : stage_events_) {
      for (StageEvents& e : per_step) {
        for (cudaEvent_t x : {e.signaled, e.start, e.end, e.done}) {
          if (x) cudaEventDestroy(x);
        }
      }
    }
#ifdef OSPREY_HAVE_NCCL
    if (comm_) ncclCommDestroy(comm_);
#endif
    for (cudaStream_t s : {plan_stream_, compute_stream_, comm_stream_}) {
      if (s) cudaStreamDestroy(s);
    }
    for (cudaStream_t s : pull_stream_) {
      if (s) cudaStreamDestroy(s);
    }
  }

  Status Init() override;
  Status Run(const std::function<void(const Progress&)>& on_log) override;
  StatusOr<EvalResult> Evaluate() override;

  Progress progress() const override {
    Progress p;
    p.step = step_.load();
    p.samples = samples_.load();
    p.loss = loss_.load();
    return p;
  }
  double train_seconds() const override { return train_seconds_; }

  void FillReport(proto::WorkerReport* report) const override {
    StepTimes times = times_;
    times.pull = 0;
    for (double p : pull_seconds_) times.pull += p;
    times.nccl = nccl_reduce_seconds_ + nccl_bcast_seconds_;
    FillStepReport(compressor_ ? compressor_->stats() : CompressionStats{}, times, report);
    if (cache_) {
      RowCacheStats cs = cache_->stats();
      report->set_cache_lookups(cs.lookups);
      report->set_cache_hits(cs.hits);
      report->set_cache_evictions(cs.evictions);
    }
    uint64_t pulled = 0;
    for (uint64_t r : rows_pulled_) pulled += r;
    report->set_rows_pulled(pulled);
    report->set_device(device_name_);
  }

 private:
  // The events of one communication stage of a step: the row gradients (stage num_buckets) or a
  // dense bucket (stage k < num_buckets).
  struct StageEvents {
    cudaEvent_t signaled = nullptr;  // compute stream: backward finished the stage's gradients
    cudaEvent_t start = nullptr;     // comm stream, timed: around the bucket's reduce
    cudaEvent_t end = nullptr;
    cudaEvent_t done = nullptr;      // comm stream: the stage's gradients are on the host
  };

  // The prefetch stages of a step, in order; PlanStep on the planner thread, PullStep on the
  // puller thread, BroadcastParams on the comm thread (all inline on the main thread without
  // prefetch).
  Status PlanStep(int64_t step, StepInput* in);
  Status PullStep(int64_t step, StepInput* in);
  // Host group: all-gathers the dense parameters of a step from the slices the local ranks pulled.
  Status BroadcastParams(StepInput* in);
  // Main thread: forward/backward of a prepared step; signals each stage as backward enqueues it.
  Status Compute(StepInput* in);
  // Comm thread: for each stage as the main thread signals it, reduce (host group) and copy the
  // stage's gradients to the host on comm_stream_.
  Status CommStep(int64_t step);
  // Pusher thread: sends each stage's pushes once its gradients are on the host.
  Status PushStep(int64_t step);
  void PlannerLoop(int64_t steps);
  void PullerLoop(int first, int64_t steps);
  void CommLoop(int64_t steps);
  void PusherLoop(int64_t steps);
  // Records a prefetch stage's failure for the main thread (the first one wins).
  void FailPrefetch(const Status& s);
  void StopPrefetch();
  // Waits for the pushes of steps <= through (all: INT64_MAX); the first error.
  Status WaitPushes(int64_t through);
  // Joins the NCCL host group when there is one to join (gpu_trainer.h).
  Status InitHostGroup();
  // The dense buckets and what this worker reduces, copies and pushes in each.
  Status PlanBuckets();
  int num_stages() const { return static_cast<int>(buckets_.size()) + 1; }

  const config::JobConfig& job_;
  const int rank_, num_workers_;
  Client* client_;
  const int device_;
  const HostGroup host_;
  std::string device_name_;
#ifdef OSPREY_HAVE_NCCL
  ncclComm_t comm_ = nullptr;
#endif
  bool host_group_ = false;         // dense gradients are reduced over the host's GPU workers
  std::vector<bool> own_servers_;   // with a host group: the servers this worker pushes and pulls
  std::vector<DenseBucket> buckets_;
  std::vector<OwnedRange> param_ranges_;  // host group: the whole vector by owner (broadcasts)
  std::unique_ptr<cuda::GpuDlrm> model_;
  std::unique_ptr<models::Dlrm> cpu_model_;  // InitDense, sizes
  DenseCompressor* compressor_ = nullptr;  // owned by the client (SetTableCodecs)
  std::unique_ptr<ShardedRowCache> cache_;
  std::unique_ptr<BatchReader> reader_;
  uint32_t sparse_table_ = 0, dense_table_ = 0;
  int dim_ = 0, num_sparse_ = 0, num_dense_features_ = 0, max_batch_ = 0;
  size_t num_params_ = 0, max_ids_ = 0;
  bool gate_pulls_ = false;  // bsp/ssp: a step's pulls wait until the previous step's pushes are sent
  int num_servers_ = 1;
  int pullers_n_ = 2;        // worker.pull_threads
  int ring_ = 4;             // 2 + pullers_n_ steps in flight

  cudaStream_t plan_stream_ = nullptr, compute_stream_ = nullptr, comm_stream_ = nullptr;
  cudaStream_t pull_stream_[kMaxPullers] = {};
  DeviceArray<float> d_cache_;
  DeviceArray<unsigned char> d_workspace_;
  size_t workspace_bytes_ = 0;
  // Compute side.
  DeviceArray<float> d_rows_, d_probs_, d_loss_;
  // Gradients of step t at index t % 2, on the device and on the host: the comm and pusher
  // threads send step t's while the main thread computes step t+1 into the other pair.
  DeviceArray<float> d_row_grad_[2], d_dense_grad_[2];
  PinnedArray<float> h_row_grad_[2], h_dense_grad_[2];
  PinnedArray<float> h_loss_;
  std::vector<StageEvents> stage_events_[2];
  // Pushes in flight, oldest first: (step, tickets). Up to kPushWindow steps' pushes are
  // outstanding, so the servers' apply time overlaps the next steps instead of stalling them.
  std::deque<std::pair<int64_t, std::vector<Ticket>>> pushes_;

  // The rotating step inputs and the hand-overs between the threads.
  StepInput inputs_[kMaxRing];  // the first ring_ are used
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t planned_through_ = -1;   // GUARDED_BY(mu_) PlanStep done for steps <= this
  int64_t pulled_step_[kMaxRing];     // GUARDED_BY(mu_) host group: PullStep done for the slot's step
  int64_t ready_step_[kMaxRing];      // GUARDED_BY(mu_) the step whose input slot i holds, once ready
  Status prefetch_status_;         // GUARDED_BY(mu_) first prefetch error
  int64_t released_through_ = -1;  // GUARDED_BY(mu_) main finished with the inputs of steps <= this
  int64_t gathered_through_ = -1;  // GUARDED_BY(mu_) gathers of steps <= this are enqueued
  int64_t pushed_through_ = -1;    // GUARDED_BY(mu_) pushes of steps <= this are sent
  bool stop_ = false;              // GUARDED_BY(mu_)
  int64_t computed_through_ = -1;  // GUARDED_BY(mu_) forward/backward of steps <= this finished
  // Per step t at index t % 2: the stages in the order the main thread signaled them, and those
  // the comm thread enqueued (its copies recorded in StageEvents::done), for step stage_step_.
  int64_t stage_step_[2] = {-1, -1};    // GUARDED_BY(mu_)
  std::vector<int> signaled_[2];        // GUARDED_BY(mu_)
  std::vector<int> enqueued_[2];        // GUARDED_BY(mu_)
  // Waits until `announced` (signaled_ or enqueued_) names step's i-th stage, and returns it in
  // *stage; Aborted when the run stops first.
  Status WaitForStage(int64_t step, int i, const std::vector<int> (&announced)[2], int* stage);
  std::thread planner_, comm_thread_, pusher_;
  std::thread pullers_[kMaxPullers];

  std::atomic<int64_t> step_{0};
  std::atomic<uint64_t> samples_{0};
  std::atomic<double> loss_{0};
  double train_seconds_ = 0;
  StepTimes times_;           // wait_input/compute: main thread; push: pusher; the rest: prefetch side
  double nccl_reduce_seconds_ = 0;  // pusher thread (device time of the reduces)
  double nccl_bcast_seconds_ = 0;   // main thread (device time of the parameter broadcasts)
  uint64_t rows_pulled_[kMaxPullers] = {};  // by puller thread
  double pull_seconds_[kMaxPullers] = {};   // by puller thread (times_.pull is their sum)
};

Status GpuTrainer::Init() {
  if (job_.model.model.type != "dlrm") {
    return InvalidArgument("worker.device: the GPU loop trains model.type dlrm, not '" + job_.model.model.type + "'");
  }
  OSPREY_ASSIGN_OR_RETURN(cpu_model_, models::Dlrm::Make(job_.model.model.dlrm));
  OSPREY_ASSIGN_OR_RETURN(sparse_table_, client_->TableId(job_.model.sparse_table));
  OSPREY_ASSIGN_OR_RETURN(dense_table_, client_->TableId(job_.model.dense_table));
  dim_ = cpu_model_->embedding_dim();
  num_sparse_ = cpu_model_->num_sparse_features();
  num_dense_features_ = cpu_model_->num_dense_features();
  num_params_ = cpu_model_->num_dense_params();
  max_batch_ = job_.train.batch_size;
  max_ids_ = static_cast<size_t>(max_batch_) * num_sparse_;

  const config::TableConfig& sparse = job_.tables[job_.TableIndex(job_.model.sparse_table)];
  const config::TableConfig& dense = job_.tables[job_.TableIndex(job_.model.dense_table)];
  gate_pulls_ = sparse.consistency.mode != "async" || dense.consistency.mode != "async";

  // The cache's size and staleness bound (gpu_trainer.h).
  pullers_n_ = std::min(job_.worker.pull_threads, kMaxPullers);
  ring_ = 2 + pullers_n_;
  const config::WorkerCacheConfig& cc = job_.worker.cache;
  RowCacheOptions copt;
  copt.pinned_steps = ring_;
  uint64_t key_space = 0;
  for (uint64_t c : job_.data.synthetic.cardinalities) key_space += c;
  if (cc.capacity_rows > 0) {
    copt.capacity_rows = cc.capacity_rows;
  } else if (cc.capacity_fraction > 0) {
    if (job_.data.source != "synthetic") {
      return InvalidArgument("worker.cache.capacity_fraction: the key space of '" + job_.data.source +
                             "' data is not known; give worker.cache.capacity_rows instead");
    }
    copt.capacity_rows = std::max<uint64_t>(1, static_cast<uint64_t>(cc.capacity_fraction * key_space));
  }
  int plan_threads = job_.worker.plan_threads;
  if (copt.capacity_rows == 0) {
    // No reuse: room for the steps in flight, plus a quarter for the uneven spread of keys over
    // the shards (each shard's load is within a few sqrt(load) of the mean; a quarter is ample
    // from a few thousand keys per shard on, and one shard needs none).
    copt.capacity_rows = ring_ * max_ids_;
    if (plan_threads > 1 && max_ids_ >= 4096) copt.capacity_rows += copt.capacity_rows / 4;
    else plan_threads = 1;
    copt.staleness_bound = 0;
  } else if (cc.staleness_bound >= 0) {
    copt.staleness_bound = cc.staleness_bound;
  } else {
    const std::string& mode = sparse.consistency.mode;
    copt.staleness_bound = mode == "bsp" ? 0 : mode == "ssp" ? sparse.consistency.staleness_bound : 4;
  }

  OSPREY_CUDA(cudaSetDevice(device_));
  cudaDeviceProp prop{};
  OSPREY_CUDA(cudaGetDeviceProperties(&prop, device_));
  device_name_ = "cuda:" + std::to_string(device_) + " (" + prop.name + ")";
  size_t free_bytes = 0, total_bytes = 0;
  OSPREY_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  const double cache_bytes = static_cast<double>(copt.capacity_rows) * dim_ * sizeof(float);
  if (cache_bytes > 0.9 * static_cast<double>(free_bytes)) {
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "worker.cache: %llu rows x %d floats = %.2f GiB do not fit in the %.2f GiB free on %s",
                  static_cast<unsigned long long>(copt.capacity_rows), dim_, cache_bytes / (1 << 30),
                  static_cast<double>(free_bytes) / (1 << 30), device_name_.c_str());
    return ResourceExhausted(buf);
  }
  OSPREY_ASSIGN_OR_RETURN(cache_, ShardedRowCache::Make(copt, plan_threads));
  OSPREY_LOG_INFO("worker {}: training on {} ({} MLPs); row cache {} rows ({:.1f} MiB, {} plan threads), staleness "
                  "bound {}, prefetch {}",
                  rank_, device_name_, job_.worker.precision, copt.capacity_rows, cache_bytes / (1 << 20),
                  plan_threads, copt.staleness_bound, job_.worker.prefetch ? "on" : "off");

  cuda::GpuDlrmOptions mopt;
  OSPREY_ASSIGN_OR_RETURN(mopt.precision, cuda::ParseMlpPrecision(job_.worker.precision));
  OSPREY_ASSIGN_OR_RETURN(model_, cuda::GpuDlrm::Make(job_.model.model.dlrm, device_, max_batch_, mopt));
  OSPREY_CUDA(cudaStreamCreateWithFlags(&plan_stream_, cudaStreamNonBlocking));
  for (int i = 0; i < pullers_n_; ++i) OSPREY_CUDA(cudaStreamCreateWithFlags(&pull_stream_[i], cudaStreamNonBlocking));
  for (int64_t& r : ready_step_) r = -1;
  for (int64_t& r : pulled_step_) r = -1;
  OSPREY_CUDA(cudaStreamCreateWithFlags(&compute_stream_, cudaStreamNonBlocking));
  OSPREY_CUDA(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
  OSPREY_RETURN_IF_ERROR(InitHostGroup());
  OSPREY_RETURN_IF_ERROR(PlanBuckets());
  OSPREY_RETURN_IF_ERROR(d_cache_.Allocate(copt.capacity_rows * dim_, "row cache"));
  // Dedupe and the grouping by server run one after the other on plan_stream_: one workspace.
  num_servers_ = client_->shard_map().server_endpoints_size();
  workspace_bytes_ = std::max(cuda::DedupeWorkspaceBytes(static_cast<int>(max_ids_)),
                              num_servers_ > 1 ? cuda::GroupByServerWorkspaceBytes(static_cast<int>(max_ids_)) : 0);
  OSPREY_RETURN_IF_ERROR(d_workspace_.Allocate(workspace_bytes_, "dedupe workspace"));
  const size_t row_floats = max_ids_ * dim_;
  OSPREY_RETURN_IF_ERROR(d_rows_.Allocate(row_floats, "step rows"));
  OSPREY_RETURN_IF_ERROR(d_probs_.Allocate(max_batch_, "probabilities"));
  OSPREY_RETURN_IF_ERROR(d_loss_.Allocate(1, "loss"));
  for (int i = 0; i < 2; ++i) {
    OSPREY_RETURN_IF_ERROR(d_row_grad_[i].Allocate(row_floats, "row gradients"));
    OSPREY_RETURN_IF_ERROR(d_dense_grad_[i].Allocate(num_params_, "dense gradient"));
    OSPREY_RETURN_IF_ERROR(h_row_grad_[i].Allocate(row_floats, "row gradients"));
    OSPREY_RETURN_IF_ERROR(h_dense_grad_[i].Allocate(num_params_, "dense gradient"));
    stage_events_[i].resize(num_stages());
    for (StageEvents& e : stage_events_[i]) {
      OSPREY_CUDA(cudaEventCreateWithFlags(&e.signaled, cudaEventDisableTiming));
      OSPREY_CUDA(cudaEventCreate(&e.start));
      OSPREY_CUDA(cudaEventCreate(&e.end));
      OSPREY_CUDA(cudaEventCreateWithFlags(&e.done, cudaEventDisableTiming));
    }
  }
  OSPREY_RETURN_IF_ERROR(h_loss_.Allocate(1, "loss"));
  for (int i = 0; i < ring_; ++i) {
    StepInput& in = inputs_[i];
    in.miss_keys.reserve(max_ids_);
    in.miss_slots.reserve(max_ids_);
    OSPREY_RETURN_IF_ERROR(in.h_miss_rows.Allocate(row_floats, "pulled rows"));
    OSPREY_RETURN_IF_ERROR(in.h_miss_slots.Allocate(max_ids_, "pulled slots"));
    OSPREY_RETURN_IF_ERROR(in.d_miss_rows.Allocate(row_floats, "pulled rows"));
    OSPREY_RETURN_IF_ERROR(in.d_miss_slots.Allocate(max_ids_, "pulled slots"));
    OSPREY_RETURN_IF_ERROR(in.h_ids.Allocate(max_ids_, "ids"));
    OSPREY_RETURN_IF_ERROR(in.h_unique.Allocate(max_ids_, "keys"));
    OSPREY_RETURN_IF_ERROR(in.h_dense.Allocate(static_cast<size_t>(max_batch_) * num_dense_features_, "dense features"));
    OSPREY_RETURN_IF_ERROR(in.h_labels.Allocate(max_batch_, "labels"));
    OSPREY_RETURN_IF_ERROR(in.h_params.Allocate(num_params_, "dense parameters"));
    OSPREY_RETURN_IF_ERROR(in.h_slots.Allocate(max_ids_, "slots"));
    OSPREY_RETURN_IF_ERROR(in.h_count.Allocate(1, "count"));
    OSPREY_RETURN_IF_ERROR(in.h_server_counts.Allocate(num_servers_, "server counts"));
    OSPREY_RETURN_IF_ERROR(in.d_server_counts.Allocate(num_servers_, "server counts"));
    OSPREY_RETURN_IF_ERROR(in.d_ids.Allocate(max_ids_, "ids"));
    OSPREY_RETURN_IF_ERROR(in.d_unique.Allocate(max_ids_, "keys"));
    OSPREY_RETURN_IF_ERROR(in.d_row_index.Allocate(max_ids_, "row index"));
    OSPREY_RETURN_IF_ERROR(in.d_slots.Allocate(max_ids_, "slots"));
    OSPREY_RETURN_IF_ERROR(in.d_count.Allocate(1, "count"));
    OSPREY_RETURN_IF_ERROR(in.d_dense.Allocate(static_cast<size_t>(max_batch_) * num_dense_features_, "dense features"));
    OSPREY_RETURN_IF_ERROR(in.d_labels.Allocate(max_batch_, "labels"));
    OSPREY_RETURN_IF_ERROR(in.d_params.Allocate(num_params_, "dense parameters"));
    OSPREY_CUDA(cudaEventCreateWithFlags(&in.pulled, cudaEventDisableTiming));
    OSPREY_CUDA(cudaEventCreateWithFlags(&in.ready, cudaEventDisableTiming));
    OSPREY_CUDA(cudaEventCreateWithFlags(&in.gathered, cudaEventDisableTiming));
    OSPREY_CUDA(cudaEventCreate(&in.bcast_start));
    OSPREY_CUDA(cudaEventCreate(&in.bcast_end));
  }

  int dense_index = job_.TableIndex(job_.model.dense_table);
  OSPREY_ASSIGN_OR_RETURN(compressor_, SetTableCodecs(job_.tables[dense_index], dense_table_, rank_ + 1, client_));
  OSPREY_RETURN_IF_ERROR(
      SetTableCodecs(job_.tables[job_.TableIndex(job_.model.sparse_table)], sparse_table_, rank_ + 1, client_)
          .status());
  reader_ = std::make_unique<BatchReader>(job_, rank_, num_workers_, job_.worker.data_threads,
                                         job_.worker.data_pool_batches);
  if (job_.worker.data_pool_batches > 0) {  // made before training starts, outside its time (synthetic
                                            // data only: the config loader checks)
    OSPREY_RETURN_IF_ERROR(reader_->Start());
  }
  std::vector<float> init(num_params_);
  cpu_model_->InitDense(job_.model.seed, init.data());
  return client_->Wait(client_->InitDense(dense_table_, init.data()));
}

Status GpuTrainer::InitHostGroup() {
  if (host_.local_size <= 1 || !job_.worker.nccl) return Status::OK();
  int count = 0;
  OSPREY_CUDA(cudaGetDeviceCount(&count));
  if (job_.worker.gpu >= 0 || host_.local_size > count) {
    // NCCL needs one GPU per rank; every worker of the host comes to the same conclusion.
    OSPREY_LOG_WARN("worker {}: {} GPU workers on this host share {} visible GPUs{}: no NCCL host group, each "
                    "pushes its own dense gradient", rank_, host_.local_size, count,
                    job_.worker.gpu >= 0 ? " (worker.gpu is set)" : "");
    return Status::OK();
  }
#ifdef OSPREY_HAVE_NCCL
  if (!host_.exchange_id) return Internal("host group of " + std::to_string(host_.local_size) + " workers without an id exchange");
  ncclUniqueId id;
  std::string mine;
  if (host_.local_rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return Internal(std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
    mine.assign(reinterpret_cast<const char*>(&id), sizeof(id));
  }
  OSPREY_ASSIGN_OR_RETURN(std::string got, host_.exchange_id(mine));
  if (got.size() != sizeof(id)) {
    return Internal("host group: the NCCL id from the coordinator has " + std::to_string(got.size()) + " bytes, not " +
                    std::to_string(sizeof(id)));
  }
  std::memcpy(&id, got.data(), sizeof(id));
  ncclResult_t r = ncclCommInitRank(&comm_, host_.local_size, id, host_.local_rank);
  if (r != ncclSuccess) {
    comm_ = nullptr;
    return Internal("NCCL host group (local rank " + std::to_string(host_.local_rank) + " of " +
                    std::to_string(host_.local_size) + " on " + device_name_ + "): " + ncclGetErrorString(r));
  }
  const int servers = client_->shard_map().server_endpoints_size();
  own_servers_.assign(servers, false);
  for (int s = 0; s < servers; ++s) own_servers_[s] = s % host_.local_size == host_.local_rank;
  host_group_ = true;
  OSPREY_LOG_INFO("worker {}: NCCL host group, local rank {} of {}; pushes and pulls the dense chunks of {} of {} "
                  "servers", rank_, host_.local_rank, host_.local_size,
                  std::count(own_servers_.begin(), own_servers_.end(), true), servers);
  return Status::OK();
#else
  OSPREY_LOG_WARN("worker {}: {} GPU workers on this host, but this build has no NCCL: each pushes its own dense "
                  "gradient", rank_, host_.local_size);
  return Status::OK();
#endif
}

Status GpuTrainer::PlanBuckets() {
  const proto::TableSpec& spec = client_->shard_map().tables(dense_table_);
  const int servers = client_->shard_map().server_endpoints_size();
  if (spec.size() != num_params_) {
    return Internal("dense table '" + spec.name() + "' has " + std::to_string(spec.size()) + " floats, the model " +
                    std::to_string(num_params_));
  }
  const size_t chunk = spec.chunk_floats() > 0 ? spec.chunk_floats() : num_params_;
  const size_t chunks_per_bucket =
      std::max<size_t>(1, job_.worker.dense_bucket_bytes / (chunk * sizeof(float)));
  const size_t bucket_floats = chunks_per_bucket * chunk;
  auto owner_of = [&](size_t c) {  // local rank that reduces, pushes and pulls chunk c
    return ServerForChunk(dense_table_, c, servers) % host_.local_size;
  };
  auto server_of = [&](size_t c) { return ServerForChunk(dense_table_, c, servers); };
  // Appends [first, first + count) of owner `root` to `ranges`, merging with the previous one.
  auto add = [](std::vector<OwnedRange>* ranges, size_t first, size_t count, int root) {
    if (!ranges->empty() && ranges->back().root == root && ranges->back().first + ranges->back().count == first) {
      ranges->back().count += count;
    } else {
      ranges->push_back({first, count, root});
    }
  };
  const size_t num_buckets = (num_params_ + bucket_floats - 1) / bucket_floats;
  std::vector<int> last_bucket(servers, -1);  // in processing order
  buckets_.clear();
  param_ranges_.clear();
  for (size_t i = 0; i < num_buckets; ++i) {
    const size_t k = num_buckets - 1 - i;  // processing order: from the end of the vector
    DenseBucket b;
    b.begin = k * bucket_floats;
    b.end = std::min(num_params_, b.begin + bucket_floats);
    for (size_t first = b.begin; first < b.end; first += chunk) {
      const size_t c = first / chunk, count = std::min(chunk, b.end - first);
      const int root = host_group_ ? owner_of(c) : 0;
      if (host_group_) add(&b.ranges, first, count, root);
      if (!host_group_ || root == host_.local_rank) {
        add(&b.own, first, count, root);
        last_bucket[server_of(c)] = static_cast<int>(i);
      }
    }
    buckets_.push_back(std::move(b));
  }
  for (DenseBucket& b : buckets_) b.push_servers.assign(servers, false);
  for (int s = 0; s < servers; ++s) {
    if (last_bucket[s] < 0) continue;
    buckets_[last_bucket[s]].push_servers[s] = true;
    buckets_[last_bucket[s]].any_push = true;
  }
  if (host_group_) {
    for (size_t first = 0; first < num_params_; first += chunk) {
      add(&param_ranges_, first, std::min(chunk, num_params_ - first), owner_of(first / chunk));
    }
  }
  OSPREY_LOG_INFO("worker {}: dense gradient in {} bucket(s) of {} KiB ({} KiB chunks){}", rank_, buckets_.size(),
                  bucket_floats * sizeof(float) >> 10, chunk * sizeof(float) >> 10,
                  host_group_ ? ", reduced to their owners over NCCL" : "");
  return Status::OK();
}

// Prefetch stage 1 of step `step`: the batch, its keys deduped on the device, the cache plan.
// Device work goes to plan_stream_.
Status GpuTrainer::PlanStep(int64_t step, StepInput* in) {
  auto t0 = Clock::now();
  const data::Batch* batch = nullptr;
  OSPREY_RETURN_IF_ERROR(reader_->Take(step, &in->host, &batch));
  times_.read += Since(t0);
  const data::Batch& b = *batch;
  if (b.size > max_batch_ || b.num_sparse != num_sparse_ || b.num_dense != num_dense_features_) {
    return InvalidArgument("step " + std::to_string(step) + ": batch of " + std::to_string(b.size) + " samples with " +
                           std::to_string(b.num_sparse) + " sparse / " + std::to_string(b.num_dense) +
                           " dense features does not match the model");
  }
  in->step = step;
  in->batch = b.size;
  const size_t ids = static_cast<size_t>(b.size) * num_sparse_;
  auto t1 = Clock::now();
  std::memcpy(in->h_ids.get(), b.ids.data(), ids * sizeof(uint64_t));
  std::memcpy(in->h_dense.get(), b.dense.data(), b.dense.size() * sizeof(float));
  std::memcpy(in->h_labels.get(), b.labels.data(), b.labels.size() * sizeof(float));
  OSPREY_CUDA(cudaMemcpyAsync(in->d_ids.get(), in->h_ids.get(), ids * sizeof(uint64_t), cudaMemcpyHostToDevice,
                              plan_stream_));
  OSPREY_CUDA(cudaMemcpyAsync(in->d_dense.get(), in->h_dense.get(), b.dense.size() * sizeof(float),
                              cudaMemcpyHostToDevice, plan_stream_));
  OSPREY_CUDA(cudaMemcpyAsync(in->d_labels.get(), in->h_labels.get(), b.labels.size() * sizeof(float),
                              cudaMemcpyHostToDevice, plan_stream_));
  OSPREY_RETURN_IF_ERROR(cuda::DedupeFeatureKeys(in->d_ids.get(), b.size, num_sparse_, in->d_unique.get(),
                                                 in->d_row_index.get(), in->d_count.get(), d_workspace_.get(),
                                                 workspace_bytes_, plan_stream_));
  OSPREY_CUDA(cudaMemcpyAsync(in->h_count.get(), in->d_count.get(), sizeof(int32_t), cudaMemcpyDeviceToHost,
                              plan_stream_));
  OSPREY_CUDA(cudaStreamSynchronize(plan_stream_));
  const int u = in->h_count[0];
  if (u < 0 || static_cast<size_t>(u) > ids) return Internal("device dedupe returned " + std::to_string(u) + " keys");
  in->num_unique = u;
  if (num_servers_ > 1) {
    // The pushes then send each server's keys and rows as one slice (Client::PushByServer).
    OSPREY_RETURN_IF_ERROR(cuda::GroupKeysByServer(sparse_table_, num_servers_, in->d_unique.get(), u,
                                                   in->d_row_index.get(), static_cast<int>(ids),
                                                   in->d_server_counts.get(), d_workspace_.get(), workspace_bytes_,
                                                   plan_stream_));
    OSPREY_CUDA(cudaMemcpyAsync(in->h_server_counts.get(), in->d_server_counts.get(), num_servers_ * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, plan_stream_));
  }
  OSPREY_CUDA(cudaMemcpyAsync(in->h_unique.get(), in->d_unique.get(), u * sizeof(uint64_t), cudaMemcpyDeviceToHost,
                              plan_stream_));
  // Also orders the copies above before anything the puller or the compute stream does.
  OSPREY_CUDA(cudaStreamSynchronize(plan_stream_));
  times_.dedupe += Since(t1);

  auto t2 = Clock::now();
  OSPREY_RETURN_IF_ERROR(cache_->Plan(step, in->h_unique.get(), u, in->h_slots.get(), &in->miss_keys, &in->miss_slots));
  times_.cache += Since(t2);
  return Status::OK();
}

// Prefetch stage 2 of step `step`: pull the misses and the dense parameters (with a host group,
// only this worker's slice), put the rows into their cache slots. Device work goes to the
// puller's stream, pull_stream_[step % pullers_n_].
Status GpuTrainer::PullStep(int64_t step, StepInput* in) {
  // bsp/ssp: this step's pulls must reach the servers after the previous step's pushes.
  auto t3 = Clock::now();
  if (gate_pulls_ && step > 0) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stop_ || pushed_through_ >= step - 1; });
    if (stop_) return Aborted("stopped");
  }
  const size_t m = in->miss_keys.size();
  Ticket rows = client_->Pull(sparse_table_, in->miss_keys.data(), m, in->h_miss_rows.get(), step);
  Ticket dense = host_group_ ? client_->PullDense(dense_table_, in->h_params.get(), step, own_servers_)
                             : client_->PullDense(dense_table_, in->h_params.get(), step);
  Status s1 = client_->Wait(rows);
  Status s2 = client_->Wait(dense);
  // A failed pull fails the run, so the slots it left unfilled are never read.
  OSPREY_RETURN_IF_ERROR(s1);
  OSPREY_RETURN_IF_ERROR(s2);
  in->sparse_version = client_->version(sparse_table_);
  in->dense_version = client_->version(dense_table_);
  rows_pulled_[step % pullers_n_] += m;
  pull_seconds_[step % pullers_n_] += Since(t3);
  cudaStream_t pull_stream = pull_stream_[step % pullers_n_];

  // The pulled rows go into their slots only after the previous step's gather read the cache
  // (a stale row is refreshed in the slot it already had; evicted slots were last used by a step
  // at least ring_ back).
  if (step > 0) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stop_ || gathered_through_ >= step - 1; });
    if (stop_) return Aborted("stopped");
    OSPREY_CUDA(cudaStreamWaitEvent(pull_stream, inputs_[(step - 1) % ring_].gathered, 0));
  }
  const int u = in->num_unique;
  std::memcpy(in->h_miss_slots.get(), in->miss_slots.data(), m * sizeof(int32_t));
  OSPREY_CUDA(cudaMemcpyAsync(in->d_miss_rows.get(), in->h_miss_rows.get(), m * dim_ * sizeof(float),
                              cudaMemcpyHostToDevice, pull_stream));
  OSPREY_CUDA(cudaMemcpyAsync(in->d_miss_slots.get(), in->h_miss_slots.get(), m * sizeof(int32_t),
                              cudaMemcpyHostToDevice, pull_stream));
  OSPREY_RETURN_IF_ERROR(cuda::ScatterRows(in->d_miss_rows.get(), in->d_miss_slots.get(), static_cast<int>(m), dim_,
                                           d_cache_.get(), pull_stream));
  OSPREY_CUDA(cudaMemcpyAsync(in->d_slots.get(), in->h_slots.get(), u * sizeof(int32_t), cudaMemcpyHostToDevice,
                              pull_stream));
  // With a host group the other ranks' slices are garbage here until BroadcastParams.
  OSPREY_CUDA(cudaMemcpyAsync(in->d_params.get(), in->h_params.get(), num_params_ * sizeof(float),
                              cudaMemcpyHostToDevice, pull_stream));
  OSPREY_CUDA(cudaEventRecord(host_group_ ? in->pulled : in->ready, pull_stream));
  return Status::OK();
}

Status GpuTrainer::BroadcastParams(StepInput* in) {
#ifdef OSPREY_HAVE_NCCL
  OSPREY_CUDA(cudaStreamWaitEvent(comm_stream_, in->pulled, 0));
  OSPREY_CUDA(cudaEventRecord(in->bcast_start, comm_stream_));
  ncclResult_t r = ncclGroupStart();
  for (const OwnedRange& g : param_ranges_) {
    if (r != ncclSuccess) break;
    float* p = in->d_params.get() + g.first;
    r = ncclBroadcast(p, p, g.count, ncclFloat, g.root, comm_, comm_stream_);
  }
  ncclResult_t end = ncclGroupEnd();
  if (r == ncclSuccess) r = end;
  if (r != ncclSuccess) {
    return Internal("step " + std::to_string(in->step) + ": NCCL all-gather of the dense parameters: " +
                    ncclGetErrorString(r));
  }
  OSPREY_CUDA(cudaEventRecord(in->bcast_end, comm_stream_));
  OSPREY_CUDA(cudaEventRecord(in->ready, comm_stream_));
  return Status::OK();
#else
  (void)in;
  return Internal("host group without NCCL");
#endif
}

void GpuTrainer::FailPrefetch(const Status& s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (prefetch_status_.ok()) prefetch_status_ = s;
  cv_.notify_all();
}

void GpuTrainer::PlannerLoop(int64_t steps) {
  cudaSetDevice(device_);
  for (int64_t t = 0; t < steps; ++t) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || released_through_ >= t - ring_; });
      if (stop_) return;
    }
    Status s = PlanStep(t, &inputs_[t % ring_]);
    if (!s.ok()) return FailPrefetch(s);
    std::lock_guard<std::mutex> lock(mu_);
    planned_through_ = t;
    cv_.notify_all();
  }
}

void GpuTrainer::PullerLoop(int first, int64_t steps) {
  cudaSetDevice(device_);
  for (int64_t t = first; t < steps; t += pullers_n_) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || planned_through_ >= t || !prefetch_status_.ok(); });
      if (stop_ || planned_through_ < t) return;
    }
    Status s = PullStep(t, &inputs_[t % ring_]);
    if (!s.ok()) return FailPrefetch(s);
    std::lock_guard<std::mutex> lock(mu_);
    (host_group_ ? pulled_step_ : ready_step_)[t % ring_] = t;
    cv_.notify_all();
  }
}

// The only thread that calls NCCL during training, so every local rank issues the collectives
// in the same order: the parameter all-gather of step t, then step t's gradient reduces.
void GpuTrainer::CommLoop(int64_t steps) {
  cudaSetDevice(device_);
  for (int64_t t = 0; t < steps; ++t) {
    if (host_group_) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || pulled_step_[t % ring_] == t || !prefetch_status_.ok(); });
        if (pulled_step_[t % ring_] != t) return;
      }
      Status s = BroadcastParams(&inputs_[t % ring_]);
      if (!s.ok()) return FailPrefetch(s);
      {
        std::lock_guard<std::mutex> lock(mu_);
        ready_step_[t % ring_] = t;
      }
      cv_.notify_all();
    }
    Status s = CommStep(t);
    if (!s.ok()) return FailPrefetch(s);
  }
}

void GpuTrainer::StopPrefetch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (planner_.joinable()) planner_.join();
  for (std::thread& p : pullers_) {
    if (p.joinable()) p.join();
  }
  if (comm_thread_.joinable()) comm_thread_.join();
  if (pusher_.joinable()) pusher_.join();
  if (reader_) reader_->Stop();
}

Status GpuTrainer::WaitPushes(int64_t through) {
  Status first;
  while (!pushes_.empty() && pushes_.front().first <= through) {
    for (Ticket t : pushes_.front().second) {
      Status s = client_->Wait(t);
      if (first.ok() && !s.ok()) first = s;
    }
    pushes_.pop_front();
  }
  return first;
}

// The main-thread part of a step whose inputs are ready: gather, forward/backward. Backward
// hands each finished stage (a dense bucket, the row gradients) to the comm thread as it goes.
Status GpuTrainer::Compute(StepInput* in) {
  const int64_t step = in->step;
  const int u = in->num_unique;
  const int b = static_cast<int>(step % 2);
  // The gradient buffers and stage events of this step held step-2's, which the pusher must have
  // sent (and so the comm thread enqueued).
  auto t0 = Clock::now();
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return pushed_through_ >= step - 2 || !prefetch_status_.ok(); });
    if (pushed_through_ < step - 2) return prefetch_status_;
    stage_step_[b] = step;
    signaled_[b].clear();
    enqueued_[b].clear();
  }
  times_.push += Since(t0);
  auto t1 = Clock::now();
  OSPREY_CUDA(cudaStreamWaitEvent(compute_stream_, in->ready, 0));
  OSPREY_RETURN_IF_ERROR(cuda::GatherRows(d_cache_.get(), in->d_slots.get(), u, dim_, d_rows_.get(), compute_stream_));
  OSPREY_CUDA(cudaEventRecord(in->gathered, compute_stream_));
  {
    std::lock_guard<std::mutex> lock(mu_);
    gathered_through_ = step;
  }
  cv_.notify_all();

  // Stage k < num_buckets is dense bucket k; stage num_buckets the row gradients.
  Status hook_status;
  size_t next_bucket = 0;
  bool rows_signaled = false;
  auto signal = [&](int stage) {
    cudaError_t e = cudaEventRecord(stage_events_[b][stage].signaled, compute_stream_);
    if (e != cudaSuccess && hook_status.ok()) hook_status = CudaStatus(e, "cudaEventRecord (gradient stage)");
    {
      std::lock_guard<std::mutex> lock(mu_);
      signaled_[b].push_back(stage);
    }
    cv_.notify_all();
  };
  cuda::BackwardHooks hooks;
  hooks.dense_ready = [&](size_t from) {
    for (; next_bucket < buckets_.size() && buckets_[next_bucket].begin >= from; ++next_bucket) {
      signal(static_cast<int>(next_bucket));
    }
  };
  hooks.rows_ready = [&] {
    rows_signaled = true;
    signal(static_cast<int>(buckets_.size()));
  };
  OSPREY_RETURN_IF_ERROR(model_->ForwardBackward(in->d_params.get(), d_rows_.get(), u, in->d_row_index.get(),
                                                 in->d_dense.get(), in->d_labels.get(), in->batch,
                                                 d_dense_grad_[b].get(), d_row_grad_[b].get(), d_probs_.get(),
                                                 d_loss_.get(), compute_stream_, &hooks));
  OSPREY_RETURN_IF_ERROR(hook_status);
  if (next_bucket != buckets_.size() || !rows_signaled) {
    return Internal("step " + std::to_string(step) + ": backward signaled " + std::to_string(next_bucket) + " of " +
                    std::to_string(buckets_.size()) + " dense buckets" + (rows_signaled ? "" : " and not the rows"));
  }
  OSPREY_CUDA(cudaMemcpyAsync(h_loss_.get(), d_loss_.get(), sizeof(float), cudaMemcpyDeviceToHost, compute_stream_));
  OSPREY_CUDA(cudaStreamSynchronize(compute_stream_));
  double bcast_s = 0;
  if (host_group_) {  // the broadcast finished before the compute stream could start
    float ms = 0;
    OSPREY_CUDA(cudaEventElapsedTime(&ms, in->bcast_start, in->bcast_end));
    bcast_s = ms * 1e-3;
  }
  nccl_bcast_seconds_ += bcast_s;
  times_.compute += Since(t1) - bcast_s;  // the compute stream waited for the broadcast
  const float loss = h_loss_[0];
  if (!std::isfinite(loss)) return Internal("step " + std::to_string(step) + ": loss is not finite");
  double avg = step_.load() == 0 ? loss : 0.95 * loss_.load() + 0.05 * loss;
  loss_.store(avg);
  samples_.fetch_add(in->batch);
  step_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    computed_through_ = step;
  }
  cv_.notify_all();
  return Status::OK();
}

Status GpuTrainer::WaitForStage(int64_t step, int i, const std::vector<int> (&announced)[2], int* stage) {
  const int b = static_cast<int>(step % 2);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] {
    return stop_ || !prefetch_status_.ok() || (stage_step_[b] == step && announced[b].size() > size_t(i));
  });
  if (stage_step_[b] != step || announced[b].size() <= size_t(i)) return Aborted("stopped");
  *stage = announced[b][i];
  return Status::OK();
}

Status GpuTrainer::CommStep(int64_t step) {
  const int b = static_cast<int>(step % 2);
  StepInput* in = &inputs_[step % ring_];
  for (int i = 0; i < num_stages(); ++i) {
    int stage = -1;
    OSPREY_RETURN_IF_ERROR(WaitForStage(step, i, signaled_, &stage));
    StageEvents& ev = stage_events_[b][stage];
    OSPREY_CUDA(cudaStreamWaitEvent(comm_stream_, ev.signaled, 0));
    if (stage == static_cast<int>(buckets_.size())) {
      OSPREY_CUDA(cudaMemcpyAsync(h_row_grad_[b].get(), d_row_grad_[b].get(),
                                  static_cast<size_t>(in->num_unique) * dim_ * sizeof(float), cudaMemcpyDeviceToHost,
                                  comm_stream_));
    } else {
      const DenseBucket& bucket = buckets_[stage];
      float* d = d_dense_grad_[b].get();
      OSPREY_CUDA(cudaEventRecord(ev.start, comm_stream_));
#ifdef OSPREY_HAVE_NCCL
      if (host_group_) {
        ncclResult_t r = ncclGroupStart();
        for (const OwnedRange& g : bucket.ranges) {
          if (r != ncclSuccess) break;
          r = ncclReduce(d + g.first, d + g.first, g.count, ncclFloat, ncclAvg, g.root, comm_, comm_stream_);
        }
        ncclResult_t end = ncclGroupEnd();
        if (r == ncclSuccess) r = end;
        if (r != ncclSuccess) {
          return Internal("step " + std::to_string(step) + ": NCCL reduce of dense bucket " + std::to_string(stage) +
                          ": " + ncclGetErrorString(r));
        }
      }
#endif
      OSPREY_CUDA(cudaEventRecord(ev.end, comm_stream_));
      for (const OwnedRange& g : bucket.own) {
        OSPREY_CUDA(cudaMemcpyAsync(h_dense_grad_[b].get() + g.first, d + g.first, g.count * sizeof(float),
                                    cudaMemcpyDeviceToHost, comm_stream_));
      }
    }
    OSPREY_CUDA(cudaEventRecord(ev.done, comm_stream_));
    {
      std::lock_guard<std::mutex> lock(mu_);
      enqueued_[b].push_back(stage);
    }
    cv_.notify_all();
  }
  return Status::OK();
}

Status GpuTrainer::PushStep(int64_t step) {
  StepInput* in = &inputs_[step % ring_];
  const int b = static_cast<int>(step % 2);
  double nccl_s = 0;
  OSPREY_RETURN_IF_ERROR(WaitPushes(step - kPushWindow));
  // The client copies keys and gradients into its frames before returning, so the pinned
  // buffers may be reused once the step's calls return.
  std::vector<Ticket> tickets;
  for (int i = 0; i < num_stages(); ++i) {
    int stage = -1;
    OSPREY_RETURN_IF_ERROR(WaitForStage(step, i, enqueued_, &stage));
    const StageEvents& ev = stage_events_[b][stage];
    OSPREY_CUDA(cudaEventSynchronize(ev.done));
    if (stage == static_cast<int>(buckets_.size())) {
      tickets.push_back(num_servers_ > 1
                            ? client_->PushByServer(sparse_table_, in->h_unique.get(), in->num_unique,
                                                    h_row_grad_[b].get(), in->h_server_counts.get(), step,
                                                    in->sparse_version)
                            : client_->Push(sparse_table_, in->h_unique.get(), in->num_unique, h_row_grad_[b].get(),
                                            step, in->sparse_version));
      continue;
    }
    if (host_group_) {
      float ms = 0;
      OSPREY_CUDA(cudaEventElapsedTime(&ms, ev.start, ev.end));
      nccl_s += ms * 1e-3;
    }
    const DenseBucket& bucket = buckets_[stage];
    if (bucket.any_push) {
      tickets.push_back(client_->PushDense(dense_table_, h_dense_grad_[b].get(), step, in->dense_version,
                                           bucket.push_servers));
    }
  }
  pushes_.emplace_back(step, std::move(tickets));
  nccl_reduce_seconds_ += nccl_s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pushed_through_ = step;
    released_through_ = step;
  }
  cv_.notify_all();
  return Status::OK();
}

void GpuTrainer::PusherLoop(int64_t steps) {
  cudaSetDevice(device_);
  for (int64_t t = 0; t < steps; ++t) {
    Status s = PushStep(t);
    if (!s.ok()) return FailPrefetch(s);
  }
}

Status GpuTrainer::Run(const std::function<void(const Progress&)>& on_log) {
  OSPREY_CUDA(cudaSetDevice(device_));
  auto start = Clock::now();
  const int64_t steps = job_.train.steps;
  if (job_.worker.data_pool_batches == 0) OSPREY_RETURN_IF_ERROR(reader_->Start());
  const bool prefetch = job_.worker.prefetch;
  if (prefetch) {
    planner_ = std::thread([this, steps] { PlannerLoop(steps); });
    for (int i = 0; i < pullers_n_; ++i) pullers_[i] = std::thread([this, i, steps] { PullerLoop(i, steps); });
    comm_thread_ = std::thread([this, steps] { CommLoop(steps); });
    pusher_ = std::thread([this, steps] { PusherLoop(steps); });
  }
  Status status;
  int64_t computed = 0;
  for (int64_t t = 0; t < steps; ++t) {
    StepInput* in = &inputs_[t % ring_];
    auto t0 = Clock::now();
    if (prefetch) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return ready_step_[t % ring_] == t || !prefetch_status_.ok(); });
      if (ready_step_[t % ring_] != t) status = prefetch_status_;
    } else {
      status = PlanStep(t, in);
      if (status.ok()) status = PullStep(t, in);
      if (status.ok() && host_group_) status = BroadcastParams(in);
    }
    times_.wait_input += Since(t0);
    if (status.code() == StatusCode::kOutOfRange) {
      status = Status::OK();
      break;
    }
    if (!status.ok()) break;
    status = Compute(in);
    if (status.ok() && !prefetch) {
      auto t1 = Clock::now();
      status = CommStep(t);
      if (status.ok()) status = PushStep(t);
      times_.push += Since(t1);
    }
    if (!status.ok()) break;
    computed = t + 1;
    if (on_log && (t + 1) % job_.train.log_every_steps == 0) on_log(progress());
  }
  if (prefetch && status.ok()) {  // let the comm and pusher threads send what was computed
    auto t0 = Clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return pushed_through_ >= computed - 1 || !prefetch_status_.ok(); });
    if (pushed_through_ < computed - 1) status = prefetch_status_;
    times_.push += Since(t0);
  }
  StopPrefetch();
  Status pushes = WaitPushes(std::numeric_limits<int64_t>::max());
  train_seconds_ = Since(start);
  OSPREY_RETURN_IF_ERROR(status);
  return pushes;
}

StatusOr<EvalResult> GpuTrainer::Evaluate() {
  OSPREY_ASSIGN_OR_RETURN(auto eval, MakeDataSource(job_, rank_, num_workers_, /*train=*/false));
  std::vector<float> params(num_params_);
  OSPREY_RETURN_IF_ERROR(client_->Wait(client_->PullDense(dense_table_, params.data())));
  std::vector<float> probs, labels, oracle, batch_probs, rows;
  std::vector<uint64_t> keys;
  std::vector<int32_t> row_index;
  data::Batch batch;
  while (static_cast<int64_t>(probs.size()) < job_.train.eval_samples) {
    int n = static_cast<int>(std::min<int64_t>(max_batch_, job_.train.eval_samples - probs.size()));
    OSPREY_RETURN_IF_ERROR(eval->Next(n, &batch));
    if (batch.size == 0) break;
    data::DedupeKeys(batch, &keys, &row_index);
    rows.resize(keys.size() * dim_);
    batch_probs.resize(batch.size);
    OSPREY_RETURN_IF_ERROR(client_->Wait(client_->Pull(sparse_table_, keys.data(), keys.size(), rows.data())));
    OSPREY_RETURN_IF_ERROR(
        model_->PredictHost(params.data(), rows.data(), keys.size(), row_index.data(), batch, batch_probs.data()));
    probs.insert(probs.end(), batch_probs.begin(), batch_probs.end());
    labels.insert(labels.end(), batch.labels.begin(), batch.labels.end());
    oracle.insert(oracle.end(), batch.oracle_prob.begin(), batch.oracle_prob.end());
  }
  return ScoreEvaluation(probs, labels, oracle);
}

}  // namespace

StatusOr<std::unique_ptr<TrainLoop>> MakeGpuTrainer(const config::JobConfig& job, int rank, int num_workers,
                                                    Client* client, const HostGroup& host) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return FailedPrecondition(std::string("no CUDA device is visible (") +
                              (e == cudaSuccess ? "0 devices" : cudaGetErrorString(e)) + ")");
  }
  int device = job.worker.gpu;
  if (device < 0) device = host.local_rank % count;
  if (device >= count) {
    return InvalidArgument("worker.gpu: device " + std::to_string(device) + " does not exist (" +
                           std::to_string(count) + " visible)");
  }
  return std::unique_ptr<TrainLoop>(std::make_unique<GpuTrainer>(job, rank, num_workers, client, device, host));
}

}  // namespace osprey::worker
