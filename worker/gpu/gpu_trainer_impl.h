// GpuTrainer: the GPU loop's orchestrator (worker/gpu_trainer.h says what the loop does). Private
// to the loop: MakeGpuTrainer (worker/gpu_trainer.cc) makes it. Its parts:
//   gpu_options.h     what the config asks for, resolved once (ResolveGpuOptions);
//   batch_reader.h    the batches, made ahead by reader threads;
//   param_exchange.h  every pull and push (the only calls into the Client);
//   host_group.h      the NCCL host group, bucket_plan.h the dense buckets and chunk ownership;
//   step_buffers.h    the steps' device and pinned memory and events;
//   stage_board.h     the hand-offs between the loop's threads.
// gpu_trainer.cc holds Init, Run and the thread loops; gpu/step_stages.cc the device work of
// each stage of a step (PlanStep, PullStep, BroadcastParams, Compute, CommStep, PushStep).
//
// Threads (with prefetch): the main thread computes step t; a planner plans t + ring - 1;
// pull_threads pullers pull steps t+1 .. (step s on puller s % pull_threads); a comm thread
// broadcasts the parameters (host group) and reduces and copies each gradient stage; a pusher
// sends them. Without prefetch the main thread runs every stage in order.
//
// Thread-safety: Init, Run, Evaluate and FillReport on one thread; progress() from any thread.
// Fields below are set by Init and read-only during Run unless they say which thread writes
// them; every hand-off between threads goes through board_.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "job/job_config.h"
#include "common/status.h"
#include "worker/cuda/codec_kernels.h"
#include "worker/cuda/dlrm/gpu_dlrm.h"
#include "worker/gpu/batch_reader.h"
#include "worker/gpu/bucket_plan.h"
#include "worker/gpu/cache_index.h"
#include "worker/gpu/device_encoder.h"
#include "worker/gpu/gpu_options.h"
#include "worker/gpu/host_group.h"
#include "worker/gpu/param_exchange.h"
#include "worker/gpu/stage_board.h"
#include "worker/gpu/step_buffers.h"
#include "worker/gpu_trainer.h"
#include "worker/models/dlrm.h"
#include "worker/trainer.h"
#include "worker/worker_metrics.h"

namespace osprey::worker::gpu {

// The milestones a step reaches, in order (StageBoard).
enum Milestone : int {
  kPlanned = 0,  // PlanStep done (planner)
  kPulled,       // host group: PullStep done, the broadcast may follow (puller)
  kReady,        // the step's inputs are complete (puller, or the comm thread after the broadcast)
  kGathered,     // the step's gather of cache rows is enqueued (main)
  kPushed,       // the step's pushes are sent (pusher)
  kComputed,     // the step's compute stream is synchronized and its timing events read (main);
                 // with kPushed, its inputs are free for step + ring
  kNumMilestones
};

class GpuTrainer final : public TrainLoop {
 public:
  // `client` is borrowed; device: a visible CUDA device.
  GpuTrainer(const config::JobConfig& job, int rank, int num_workers, Client* client, int device,
             const HostGroup& host);
  ~GpuTrainer() override;

  Status Init() override;
  Status Run(const std::function<void(const Progress&)>& on_log) override;
  StatusOr<EvalResult> Evaluate() override;
  Progress progress() const override;
  double train_seconds() const override { return train_seconds_; }
  void FillReport(proto::WorkerReport* report) const override;
  // Step-time phases, pull staleness, FLOPs and the cache's counters (worker_metrics.h); call
  // after Init, before Run.
  void SetMetrics(metrics::Registry* registry) override;
  // A restarted worker (worker/trainer.h): after Init, before Run. Every loop then runs steps
  // [step, train.steps) and the reader starts its stream at the step's first sample. A worker of
  // a host group (NCCL) cannot resume alone: Unimplemented.
  Status ResumeAt(int64_t step) override;
  // A scale step (worker/scale_pause.h): the loop pauses at the step the coordinator names, with
  // every push answered, and goes on with the new map's client (gpu/gpu_resume.cc). A worker of a
  // host group does not pause (its NCCL peers would have to switch together): the step is then
  // abandoned by the coordinator after its timeout, nothing moved.
  void SetStepBoundary(StepBoundary* boundary) override { boundary_ = boundary; }

 private:
  // Run's steps from first_step_ (gpu_trainer.cc), and the bsp rollback between two of them
  // (gpu/gpu_resume.cc): stops nothing (RunSegment has joined its threads), drops the pushes in
  // flight, restarts the board, the reader and the row cache at `clock` (the cached rows are from
  // before the rollback) and stamps `generation` in every later request.
  Status RunSegment(const std::function<void(const Progress&)>& on_log);
  Status Rewind(uint64_t generation, int64_t clock);
  // ResumeAt's, Rewind's and AtBoundary's common part: every loop starts at `step`.
  Status StartAt(int64_t step);
  // The scale step's pause before step `step` (RunSegment ended there, its pushes answered):
  // blocks in StepBoundary::Pause, switches to the client it returns (SwitchClient), empties the
  // row cache (the planner had planned steps past `step`) and starts every loop at `step` again.
  Status AtBoundary(int64_t step);
  // What depends on the shard map, made again for `next`: the exchange's tables and codecs, the
  // bucket plan, every buffer sized by the server count (the row cache's device memory too) and
  // the device encoder.
  Status SwitchClient(Client* next);
  Status InitEncoder();  // InitData's device encoder for the exchange's routes

  // Adds `seconds` to phase p of the step metrics (each thread its own phases; thread-safe).
  void Count(StepMetrics::Phase p, double seconds) const {
    if (step_metrics_) step_metrics_->AddPhase(p, seconds);
  }

  // Init, in order.
  Status InitModel();    // the CPU model's shape, the tables, opt_
  Status InitDevice();   // the device, the cache, GpuDlrm, the streams
  void InitBuckets();    // plan_, logged
  Status InitBuffers();  // every device and pinned buffer
  Status InitData();     // the codecs, the reader (a pool is made here), the dense table's values

  // The stages of a step (gpu/step_stages.cc). PlanStep on the planner thread, PullStep on a
  // puller, BroadcastParams on the comm thread (all inline on the main thread without prefetch).
  Status PlanStep(int64_t step, StepInput* in);
  Status PullStep(int64_t step, StepInput* in);
  // Host group: all-gathers the dense parameters of a step from the slices the local ranks pulled.
  Status BroadcastParams(StepInput* in);
  // Main thread: forward/backward of a prepared step; posts each gradient stage as backward
  // enqueues it.
  Status Compute(StepInput* in);
  // Main thread, after Compute synchronized the compute stream: adds the step's device stage
  // times (times_.device_*).
  Status CountDeviceTimes(const StepInput& in);
  // worker.check_pulls (gpu/step_checks.cc): a puller fills what its pull must write with NaN
  // (PoisonPullTargets) and afterwards finds every value finite (CheckPulled: the server never
  // holds a non-finite value, so one left means the client did not deliver it); the cache rows
  // start as NaN (InitBuffers) and the main thread finds every gathered value finite
  // (CheckGathered: else a slot was read before a pull wrote it).
  void PoisonPullTargets(StepInput* in, size_t rows) const;
  Status CheckPulled(int64_t step, const StepInput& in, size_t rows) const;
  Status CheckGathered(int64_t step, int rows);
  // Comm thread: for each stage as the main thread posts it, reduce (host group) and copy the
  // stage's gradients to the host on comm_stream_ -- or, with device encoding, enqueue the
  // encode of the servers whose last bucket it is (only their payloads are copied).
  Status CommStep(int64_t step);
  // Pusher thread: sends each stage's pushes once its gradients are on the host.
  Status PushStep(int64_t step);
  // The main thread's share of a step without prefetch, and the waits with it.
  Status PrepareInline(int64_t step, StepInput* in);
  Status SendInline(int64_t step);

  void StartPrefetch(int64_t steps);
  void PlannerLoop(int64_t steps);
  void PullerLoop(int puller, int64_t steps);
  void CommLoop(int64_t steps);
  void PusherLoop(int64_t steps);
  // Stops the board and joins the loop's threads and the reader's.
  void StopPrefetch();

  int num_stages() const { return static_cast<int>(plan_.buckets.size()) + 1; }
  int rows_stage() const { return static_cast<int>(plan_.buckets.size()); }
  StepSizes sizes() const;

  const config::JobConfig& job_;
  const int rank_, num_workers_;
  const int device_;
  const HostGroup host_;
  ParamExchange exchange_;
  GpuOptions opt_;
  std::string device_name_;
  std::unique_ptr<NcclHostGroup> host_group_;  // null: each worker reduces nothing, owns every chunk
  BucketPlan plan_;
  std::unique_ptr<cuda::GpuDlrm> model_;
  std::unique_ptr<models::Dlrm> cpu_model_;  // InitDense, sizes
  std::unique_ptr<CacheIndex> cache_;        // the planner's
  std::unique_ptr<BatchReader> reader_;
  // Dense compression on the device (opt_.encode_on_device): the comm thread enqueues each
  // server's encode once its last bucket is reduced, the pusher takes the frames.
  std::unique_ptr<DeviceDenseEncoder> device_encoder_;
  std::unique_ptr<StageBoard> board_;
  int dim_ = 0, num_sparse_ = 0, num_dense_features_ = 0;
  size_t num_params_ = 0;

  cudaStream_t plan_stream_ = nullptr, compute_stream_ = nullptr, comm_stream_ = nullptr;
  cudaStream_t pull_stream_[kMaxPullers] = {};
  cuda::DeviceBuffer d_cache_;      // float [capacity x dim]
  cuda::DeviceBuffer d_workspace_;  // dedupe / group-by-server scratch of plan_stream_
  size_t workspace_bytes_ = 0;
  // Main thread's: the step's rows gathered from the cache, the probabilities, the loss.
  cuda::DeviceBuffer d_rows_, d_probs_, d_loss_;
  cuda::PinnedBuffer h_loss_;
  cuda::DeviceBuffer d_check_;  // worker.check_pulls: the non-finite count of CheckGathered
  cuda::PinnedBuffer h_check_;
  StepGradients grads_[2];      // step t's at t % 2
  StepInput inputs_[kMaxRing];  // step t's at t % ring; the first ring are used
  std::thread planner_, comm_thread_, pusher_;
  std::thread pullers_[kMaxPullers];

  int64_t first_step_ = 0;  // ResumeAt, Rewind, AtBoundary: the first step every loop runs
  StepBoundary* boundary_ = nullptr;  // SetStepBoundary; null: never pauses
  int64_t pause_at_ = -1;             // RunSegment ended for a scale step's pause before this step
  std::atomic<int64_t> step_{0};
  std::atomic<uint64_t> samples_{0};
  std::atomic<double> loss_{0};
  double train_seconds_ = 0;
  // Each written by one thread, read by FillReport once Run joined them: times_ read/dedupe/cache
  // by the planner, wait_input/compute/push and device_* by the main thread; the reduces' device
  // time by the pusher, the broadcasts' by the main thread; rows_pulled_[i] and pull_seconds_[i]
  // by puller i.
  StepTimes times_;
  double nccl_reduce_seconds_ = 0;
  double nccl_bcast_seconds_ = 0;
  uint64_t rows_pulled_[kMaxPullers] = {};
  double pull_seconds_[kMaxPullers] = {};
  // Set by SetMetrics before Run, then read-only pointers: step_metrics_'s methods are
  // thread-safe (atomic adds); cache_metrics_ is updated by the planner only, once per step.
  std::unique_ptr<StepMetrics> step_metrics_;
  std::unique_ptr<CacheMetrics> cache_metrics_;
};

}  // namespace osprey::worker::gpu
