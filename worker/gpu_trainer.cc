// The GPU training loop (gpu_trainer.h says what it does and its ordering rules): Init, Run and
// the threads of GpuTrainer (worker/gpu/gpu_trainer_impl.h); the device work of each stage is in
// worker/gpu/step_stages.cc.
#include "worker/gpu_trainer.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "worker/cuda/cuda_check.cuh"
#include "worker/cuda/sparse/sparse_kernels.h"
#include "worker/data/metrics.h"
#include "worker/gpu/gpu_trainer_impl.h"

namespace osprey::worker {
namespace gpu {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

GpuTrainer::GpuTrainer(const config::JobConfig& job, int rank, int num_workers, Client* client, int device,
                       const HostGroup& host)
    : job_(job), rank_(rank), num_workers_(num_workers), device_(device), host_(host), exchange_(job, rank, client) {}

GpuTrainer::~GpuTrainer() {
  StopPrefetch();
  cudaSetDevice(device_);
  for (cudaStream_t s : {plan_stream_, compute_stream_, comm_stream_}) {
    if (s) cudaStreamSynchronize(s);
  }
  for (cudaStream_t s : pull_stream_) {
    if (s) cudaStreamSynchronize(s);
  }
  host_group_.reset();  // the communicator goes before the streams it used
  for (cudaStream_t s : {plan_stream_, compute_stream_, comm_stream_}) {
    if (s) cudaStreamDestroy(s);
  }
  for (cudaStream_t s : pull_stream_) {
    if (s) cudaStreamDestroy(s);
  }
}

Status GpuTrainer::Init() {
  if (job_.train.accumulate_steps > 1) {
    return InvalidArgument("train.accumulate_steps = " + std::to_string(job_.train.accumulate_steps) +
                           ": gradient accumulation runs on CPU workers only (worker.device: cpu)");
  }
  if (int d = job_.TableIndex(job_.model.dense_table); d >= 0 && job_.tables[d].codec.adaptive_ratio.enabled) {
    return InvalidArgument("tables[" + std::to_string(d) +
                           "].codec.adaptive_ratio: the adaptive per-node ratio runs on CPU workers only "
                           "(worker.device: cpu)");
  }
  OSPREY_RETURN_IF_ERROR(InitModel());
  OSPREY_RETURN_IF_ERROR(InitDevice());
  OSPREY_ASSIGN_OR_RETURN(host_group_, NcclHostGroup::Join(job_, rank_, host_, exchange_.num_servers(), device_name_));
  InitBuckets();
  if (host_group_) {
    size_t max_bytes = 0;
    for (const DenseBucket& b : plan_.buckets) max_bytes = std::max(max_bytes, (b.end - b.begin) * sizeof(float));
    OSPREY_RETURN_IF_ERROR(
        host_group_->StartIpc(job_.worker.host_allreduce, max_bytes, job_.client.timeout_ms, comm_stream_));
  }
  OSPREY_RETURN_IF_ERROR(InitBuffers());
  return InitData();
}

Status GpuTrainer::InitModel() {
  OSPREY_RETURN_IF_ERROR(CheckGpuModel(job_));
  OSPREY_ASSIGN_OR_RETURN(cpu_model_, models::Dlrm::Make(job_.model.model.dlrm));
  OSPREY_RETURN_IF_ERROR(exchange_.Init());
  dim_ = cpu_model_->embedding_dim();
  num_sparse_ = cpu_model_->num_sparse_features();
  num_dense_features_ = cpu_model_->num_dense_features();
  num_params_ = cpu_model_->num_dense_params();
  GpuModelShape shape;
  shape.num_sparse_features = num_sparse_;
  shape.num_dense_params = num_params_;
  shape.dense_table_floats = exchange_.dense_spec().size();
  shape.dense_chunk_floats = exchange_.dense_spec().chunk_floats();
  OSPREY_ASSIGN_OR_RETURN(opt_, ResolveGpuOptions(job_, shape));
  board_ = std::make_unique<StageBoard>(kNumMilestones, opt_.ring);
  return Status::OK();
}

Status GpuTrainer::InitDevice() {
  OSPREY_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  cudaDeviceProp prop{};
  OSPREY_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device_));
  device_name_ = "cuda:" + std::to_string(device_) + " (" + prop.name + ")";
  size_t free_bytes = 0, total_bytes = 0;
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  // The configured rows first (the error names what the user set), then with the device index's scratch.
  OSPREY_RETURN_IF_ERROR(CheckCacheFits(opt_.device_index ? opt_.device_cache.capacity_rows : opt_.cache.capacity_rows,
                                        dim_, free_bytes, device_name_));
  OSPREY_RETURN_IF_ERROR(CheckCacheFits(CacheSlots(opt_), dim_, free_bytes, device_name_));
  OSPREY_ASSIGN_OR_RETURN(cache_, CacheIndex::Make(opt_));
  const double cache_bytes = static_cast<double>(CacheSlots(opt_)) * dim_ * sizeof(float);
  OSPREY_LOG_INFO("worker {}: training on {} ({} MLPs); row cache {} rows ({:.1f} MiB, {}), staleness "
                  "bound {}, prefetch {}",
                  rank_, device_name_, job_.worker.precision, CacheSlots(opt_), cache_bytes / (1 << 20),
                  cache_->Describe(), opt_.cache.staleness_bound, job_.worker.prefetch ? "on" : "off");

  cuda::GpuDlrmOptions mopt;
  OSPREY_ASSIGN_OR_RETURN(mopt.precision, cuda::ParseMlpPrecision(job_.worker.precision));
  OSPREY_ASSIGN_OR_RETURN(model_, cuda::GpuDlrm::Make(job_.model.model.dlrm, device_, opt_.max_batch, mopt));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&plan_stream_, cudaStreamNonBlocking));
  for (int i = 0; i < opt_.pull_threads; ++i) {
    OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&pull_stream_[i], cudaStreamNonBlocking));
  }
  OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&compute_stream_, cudaStreamNonBlocking));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
  return Status::OK();
}

void GpuTrainer::InitBuckets() {
  BucketPlanInput in;
  in.dense_table = exchange_.dense_table();
  in.num_params = num_params_;
  in.chunk_floats = opt_.chunk_floats;
  in.bucket_floats = opt_.bucket_floats;
  in.servers = exchange_.num_servers();
  in.host_group = host_group_ != nullptr;
  in.local_rank = host_group_ ? host_group_->local_rank() : 0;
  in.local_size = host_group_ ? host_group_->local_size() : 1;
  plan_ = PlanBuckets(in);
  OSPREY_LOG_INFO("worker {}: dense gradient in {} bucket(s) of {} KiB ({} KiB chunks){}", rank_,
                  plan_.buckets.size(), opt_.bucket_floats * sizeof(float) >> 10,
                  opt_.chunk_floats * sizeof(float) >> 10, host_group_ ? ", reduced to their owners over NCCL" : "");
}

StepSizes GpuTrainer::sizes() const {
  StepSizes z;
  z.max_ids = opt_.max_ids;
  z.max_batch = opt_.max_batch;
  z.num_dense_features = num_dense_features_;
  z.dim = dim_;
  z.num_params = num_params_;
  z.num_servers = exchange_.num_servers();
  z.row_cast = opt_.row_cast != codec::ValueType::kFp32;
  return z;
}

Status GpuTrainer::InitBuffers() {
  OSPREY_RETURN_IF_ERROR(AllocateDevice<float>(&d_cache_, CacheSlots(opt_) * dim_, "row cache"));
  if (opt_.check_pulls) {  // every slot NaN until a pull writes it (step_checks.cc)
    OSPREY_CUDA_RETURN_IF_ERROR(cudaMemset(d_cache_.data(), 0xFF, CacheSlots(opt_) * dim_ * sizeof(float)));
    OSPREY_RETURN_IF_ERROR(AllocateDevice<int32_t>(&d_check_, 1, "check count"));
    OSPREY_RETURN_IF_ERROR(AllocatePinned<int32_t>(&h_check_, 1, "check count"));
  }
  // Dedupe and the grouping by server run one after the other on plan_stream_: one workspace.
  const int max_ids = static_cast<int>(opt_.max_ids);
  workspace_bytes_ = std::max(cuda::DedupeWorkspaceBytes(max_ids),
                              exchange_.num_servers() > 1 ? cuda::GroupByServerWorkspaceBytes(max_ids) : 0);
  OSPREY_RETURN_IF_ERROR(AllocateDevice<unsigned char>(&d_workspace_, workspace_bytes_, "dedupe workspace"));
  OSPREY_RETURN_IF_ERROR(AllocateDevice<float>(&d_rows_, opt_.max_ids * dim_, "step rows"));
  OSPREY_RETURN_IF_ERROR(AllocateDevice<float>(&d_probs_, opt_.max_batch, "probabilities"));
  OSPREY_RETURN_IF_ERROR(AllocateDevice<float>(&d_loss_, 1, "loss"));
  const StepSizes z = sizes();
  for (StepGradients& g : grads_) OSPREY_RETURN_IF_ERROR(g.Allocate(z, num_stages()));
  OSPREY_RETURN_IF_ERROR(AllocatePinned<float>(&h_loss_, 1, "loss"));
  for (int i = 0; i < opt_.ring; ++i) OSPREY_RETURN_IF_ERROR(inputs_[i].Allocate(z));
  return Status::OK();
}

Status GpuTrainer::InitData() {
  OSPREY_RETURN_IF_ERROR(exchange_.InstallCodecs(cpu_model_->dense_tensors(), opt_.encode_on_device));
  OSPREY_RETURN_IF_ERROR(InitEncoder());
  OSPREY_LOG_INFO("worker {}: dense gradient encoded on the {}: {}", rank_, opt_.encode_on_device ? "device" : "host",
                  opt_.encode_why);
  if (opt_.row_cast != codec::ValueType::kFp32) {
    OSPREY_LOG_INFO("worker {}: row gradients cast to {} on the device", rank_, codec::ValueTypeName(opt_.row_cast));
  }
  if (opt_.row_widen != codec::ValueType::kFp32) {
    OSPREY_LOG_INFO("worker {}: pulled rows widened from {} on the device", rank_, codec::ValueTypeName(opt_.row_widen));
  }
  reader_ = std::make_unique<BatchReader>(job_, rank_, num_workers_, opt_.reader);
  if (opt_.reader.pool > 0) OSPREY_RETURN_IF_ERROR(reader_->Start());  // made outside the training time
  std::vector<float> init(num_params_);
  cpu_model_->InitDense(job_.model.seed, init.data());
  return exchange_.InitDense(init.data());
}

Status GpuTrainer::InitEncoder() {
  device_encoder_.reset();
  if (opt_.encode_on_device) {
    // The messages this worker pushes: the servers some bucket pushes (with a host group, its own).
    std::vector<DenseRoute> pushed;
    for (const DenseRoute& r : exchange_.dense_routes()) {
      for (const DenseBucket& b : plan_.buckets) {
        if (b.push_servers[r.server]) {
          pushed.push_back(r);
          break;
        }
      }
    }
    OSPREY_ASSIGN_OR_RETURN(device_encoder_,
                            DeviceDenseEncoder::Create(exchange_.compressor(), exchange_.dense_table(), pushed));
  }
  return Status::OK();
}

// Without prefetch the main thread runs the prefetch stages itself, in order.
Status GpuTrainer::PrepareInline(int64_t step, StepInput* in) {
  OSPREY_RETURN_IF_ERROR(PlanStep(step, in));
  OSPREY_RETURN_IF_ERROR(PullStep(step, in));
  if (host_group_) OSPREY_RETURN_IF_ERROR(BroadcastParams(in));
  return Status::OK();
}

Status GpuTrainer::SendInline(int64_t step) {
  auto t0 = Clock::now();
  Status s = CommStep(step);
  if (s.ok()) s = PushStep(step);
  const double push_s = Since(t0);
  times_.push += push_s;
  Count(StepMetrics::kPush, push_s);
  return s;
}

// bsp rollback (gpu/gpu_resume.cc): a segment that failed because the job rolled back to a cut
// is followed by another from the cut's clock.
Status GpuTrainer::Run(const std::function<void(const Progress&)>& on_log) {
  OSPREY_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  auto start = Clock::now();
  Status status = RunSegment(on_log);
  uint64_t generation = 0;
  int64_t clock = 0;
  while (true) {
    if (status.ok() && pause_at_ >= 0) {  // a scale step's pause
      const int64_t at = std::exchange(pause_at_, -1);
      status = AtBoundary(at);
    } else if (!status.ok() && AwaitBspRollback(*exchange_.client(), job_, rank_, status, &generation, &clock)) {
      status = Rewind(generation, clock);
    } else {
      break;
    }
    if (status.ok()) status = RunSegment(on_log);
  }
  train_seconds_ = Since(start);
  return status;
}

// Steps first_step_ .. train.steps - 1, every thread of the loop started and joined here.
Status GpuTrainer::RunSegment(const std::function<void(const Progress&)>& on_log) {
  const int64_t steps = job_.train.steps;
  if (opt_.reader.pool == 0) OSPREY_RETURN_IF_ERROR(reader_->Start());
  const bool prefetch = job_.worker.prefetch;
  if (prefetch) StartPrefetch(steps);
  Status status;
  int64_t computed = first_step_;
  for (int64_t t = first_step_; t < steps; ++t) {
    uint64_t generation = 0;
    int64_t clock = 0;
    if (exchange_.client()->ReadyRollback(&generation, &clock)) {  // Run rewinds
      status = Aborted("bsp rollback to clock " + std::to_string(clock) + " is ready");
      break;
    }
    if (boundary_ != nullptr && host_group_ == nullptr && t > first_step_ && boundary_->Pending(t)) {
      pause_at_ = t;  // Run pauses once the steps before t are pushed and answered
      break;
    }
    StepInput* in = &inputs_[t % opt_.ring];
    auto t0 = Clock::now();
    status = prefetch ? board_->WaitFor(kReady, t) : PrepareInline(t, in);
    const double wait_s = Since(t0);
    times_.wait_input += wait_s;
    Count(StepMetrics::kWaitInput, wait_s);
    if (status.code() == StatusCode::kOutOfRange) {  // a finite data source ended
      status = Status::OK();
      break;
    }
    if (!status.ok()) break;
    status = Compute(in);
    if (status.ok() && !prefetch) status = SendInline(t);
    if (!status.ok()) break;
    computed = t + 1;
    if (step_metrics_) step_metrics_->ObserveStep(Since(t0));
    if (on_log && (t + 1) % job_.train.log_every_steps == 0) on_log(progress());
  }
  if (prefetch && status.ok()) {  // let the comm and pusher threads send what was computed
    auto t0 = Clock::now();
    status = board_->WaitFor(kPushed, computed - 1);
    const double push_s = Since(t0);
    times_.push += push_s;
    Count(StepMetrics::kPush, push_s);
  }
  StopPrefetch();
  Status pushes = exchange_.WaitPushes(std::numeric_limits<int64_t>::max());
  OSPREY_RETURN_IF_ERROR(status);
  return pushes;
}

void GpuTrainer::StartPrefetch(int64_t steps) {
  planner_ = std::thread([this, steps] { PlannerLoop(steps); });
  for (int i = 0; i < opt_.pull_threads; ++i) pullers_[i] = std::thread([this, i, steps] { PullerLoop(i, steps); });
  comm_thread_ = std::thread([this, steps] { CommLoop(steps); });
  pusher_ = std::thread([this, steps] { PusherLoop(steps); });
}

// The loops below end at the first failure: their own (recorded on the board for the main
// thread) or another thread's, or at Stop.
void GpuTrainer::PlannerLoop(int64_t steps) {
  cudaSetDevice(device_);
  for (int64_t t = first_step_; t < steps; ++t) {
    // Step t's input held step t - ring's: free once it was pushed and the main thread read its
    // timing events (a re-recorded plan_start would leave that read cudaErrorNotReady).
    if (!board_->WaitFor(kPushed, t - opt_.ring).ok()) return;
    if (!board_->WaitFor(kComputed, t - opt_.ring).ok()) return;
    Status s = PlanStep(t, &inputs_[t % opt_.ring]);
    if (!s.ok()) return board_->Fail(s);
    board_->Reach(kPlanned, t);
  }
}

// Puller i takes the steps t with t % pull_threads == i.
void GpuTrainer::PullerLoop(int puller, int64_t steps) {
  cudaSetDevice(device_);
  const int p = opt_.pull_threads;
  for (int64_t t = first_step_ + ((puller - first_step_ % p) + p) % p; t < steps; t += p) {
    if (!board_->WaitFor(kPlanned, t).ok()) return;
    Status s = PullStep(t, &inputs_[t % opt_.ring]);
    if (!s.ok()) return board_->Fail(s);
    board_->Reach(host_group_ ? kPulled : kReady, t);
  }
}

// The only thread that calls NCCL during training, so every local rank issues the collectives
// in the same order: the parameter all-gather of step t, then step t's gradient reduces.
void GpuTrainer::CommLoop(int64_t steps) {
  cudaSetDevice(device_);
  for (int64_t t = first_step_; t < steps; ++t) {
    if (host_group_) {
      if (!board_->WaitFor(kPulled, t).ok()) return;
      Status s = BroadcastParams(&inputs_[t % opt_.ring]);
      if (!s.ok()) return board_->Fail(s);
      board_->Reach(kReady, t);
    }
    Status s = CommStep(t);
    if (!s.ok()) return board_->Fail(s);
  }
}

void GpuTrainer::PusherLoop(int64_t steps) {
  cudaSetDevice(device_);
  for (int64_t t = first_step_; t < steps; ++t) {
    Status s = PushStep(t);
    if (!s.ok()) return board_->Fail(s);
  }
}

void GpuTrainer::StopPrefetch() {
  if (board_) board_->Stop();
  if (planner_.joinable()) planner_.join();
  for (std::thread& p : pullers_) {
    if (p.joinable()) p.join();
  }
  if (comm_thread_.joinable()) comm_thread_.join();
  if (pusher_.joinable()) pusher_.join();
  if (reader_) reader_->Stop();
}

StatusOr<EvalResult> GpuTrainer::Evaluate() {
  OSPREY_ASSIGN_OR_RETURN(auto eval, MakeDataSource(job_, rank_, num_workers_, /*train=*/false));
  std::vector<float> params(num_params_);
  OSPREY_RETURN_IF_ERROR(exchange_.PullDenseForEval(params.data()));
  std::vector<float> probs, labels, oracle, batch_probs, rows;
  std::vector<uint64_t> keys;
  std::vector<int32_t> row_index;
  data::Batch batch;
  while (static_cast<int64_t>(probs.size()) < job_.train.eval_samples) {
    int n = static_cast<int>(std::min<int64_t>(opt_.max_batch, job_.train.eval_samples - probs.size()));
    OSPREY_RETURN_IF_ERROR(eval->Next(n, &batch));
    if (batch.size == 0) break;
    data::DedupeKeys(batch, &keys, &row_index);
    rows.resize(keys.size() * dim_);
    batch_probs.resize(batch.size);
    OSPREY_RETURN_IF_ERROR(exchange_.PullRowsForEval(keys.data(), keys.size(), rows.data()));
    OSPREY_RETURN_IF_ERROR(
        model_->PredictHost(params.data(), rows.data(), keys.size(), row_index.data(), batch, batch_probs.data()));
    probs.insert(probs.end(), batch_probs.begin(), batch_probs.end());
    labels.insert(labels.end(), batch.labels.begin(), batch.labels.end());
    oracle.insert(oracle.end(), batch.oracle_prob.begin(), batch.oracle_prob.end());
  }
  return ScoreEvaluation(probs, labels, oracle);
}

void GpuTrainer::SetMetrics(metrics::Registry* registry) {
  step_metrics_ = std::make_unique<StepMetrics>(registry, DlrmFlopsPerSample(job_.model.model.dlrm),
                                                job_.metrics.peak_flops_per_sec);
  cache_metrics_ = std::make_unique<CacheMetrics>(registry);
}

Progress GpuTrainer::progress() const {
  Progress p;
  p.step = step_.load();
  p.samples = samples_.load();
  p.loss = loss_.load();
  p.compression_warning = CompressionWarning(exchange_.compression_stats().diagnostics);
  return p;
}

void GpuTrainer::FillReport(proto::WorkerReport* report) const {
  StepTimes times = times_;
  times.pull = 0;
  for (double p : pull_seconds_) times.pull += p;
  times.nccl = nccl_reduce_seconds_ + nccl_bcast_seconds_;
  FillStepReport(exchange_.compression_stats(), times, report);
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

}  // namespace gpu

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
  return std::unique_ptr<TrainLoop>(std::make_unique<gpu::GpuTrainer>(job, rank, num_workers, client, device, host));
}

}  // namespace osprey::worker
