// Trainer: the training loop of osprey-worker -- data, model, and the parameter-server client.
//
// One step: read a batch; dedupe its feature keys; pull the rows of those keys and the dense
// parameters (both requests in flight together); forward/backward; push the row gradients and
// the dense gradient (asynchronously: they complete while the next batch is read and pulled).
// Init() gives the dense table its initial values (every worker sends the same values from
// model.seed; the server keeps the first).
//
// Threading: Run/Evaluate on one thread; progress() may be read from any thread (heartbeats).
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "job/job_config.h"
#include "common/status.h"
#include "worker/adaptive_ratio.h"
#include "worker/client/client.h"
#include "worker/compression.h"
#include "worker/data/batch.h"
#include "worker/models/model.h"
#include "worker/scale_pause.h"
#include "osprey.pb.h"

namespace osprey::metrics {
class Registry;
}  // namespace osprey::metrics

namespace osprey::worker {

class StepMetrics;  // worker_metrics.h

// Where batches come from: the synthetic planted-model generator or Criteo TSV files.
class DataSource {
 public:
  virtual ~DataSource() = default;
  // Fills `out` with `batch_size` samples (fewer only when a finite source ends; 0 = ended).
  virtual Status Next(int batch_size, data::Batch* out) = 0;
  // Moves past the next `samples` samples, as if read (a restarted worker resuming its stream).
  // This default reads and drops them; the synthetic stream seeks, the Criteo reader skips lines.
  virtual Status Skip(int64_t samples);
};

// Training stream of worker `rank` (train=true) or the held-out evaluation stream (train=false).
// bsp rollback (trainer_resume.cc), shared by the CPU and GPU loops: after a step that failed
// with `s`, waits (at most the server replace timeout) for the job's rollback to be ready when
// one was announced or `s` is a server's Aborted refusal; true with *generation, *clock when there
// is one to rewind to.
bool AwaitBspRollback(const Client& client, const config::JobConfig& job, int rank, const Status& s,
                      uint64_t* generation, int64_t* clock);

StatusOr<std::unique_ptr<DataSource>> MakeDataSource(const config::JobConfig& job, int rank,
                                                     int num_workers, bool train);

struct Progress {
  int64_t step = 0;
  uint64_t samples = 0;
  double loss = 0;  // moving average of the batch loss
  std::string compression_warning;  // CompressionWarning of the dense pushes; "" when healthy
  // Heartbeat.step_seconds & co. (adaptive per-node ratio): exponential averages over the last
  // ~10 steps of the own step time (the step minus its wait on pulls, i.e. on the other
  // workers in bsp/ssp) and its push (send + wait for acks, without encode) and encode parts.
  double step_seconds = 0;
  double step_push_seconds = 0;
  double step_encode_seconds = 0;
  double density = 0;  // the dense codec's current density (adaptive or configured); 0: none
  bool barrier_exempt = false;  // adaptive_ratio.async_barrier: this worker left the step barrier
};

struct EvalResult {
  double auc = 0;
  double logloss = 0;
  double oracle_auc = 0;  // NaN when the data has no known truth (Criteo)
  uint64_t samples = 0;
};

// Where a worker's step time went, in seconds summed over steps (see proto WorkerReport).
struct StepTimes {
  double wait_input = 0;  // main thread blocked on the step's inputs (data, pulls not hidden)
  double compute = 0;     // forward + backward (+ device copies on GPU workers)
  double push = 0;        // encode + send pushes + wait for earlier pushes
  double nccl = 0;        // collectives inside the host
  double read = 0;        // prefetch side: reading / generating batches
  double dedupe = 0;      // prefetch side: deduping keys
  double cache = 0;       // prefetch side: hot-row cache planning
  double pull = 0;        // prefetch side: waiting for pulls
  // GPU workers: device time of each step's stages (CUDA events on their streams).
  double device_plan = 0;     // upload, dedupe, grouping and the cache index (plan stream)
  double device_pull = 0;     // pulled rows and dense parameters copied in and scattered
  double device_gather = 0;   // the step's rows gathered from the cache
  double device_compute = 0;  // forward + backward
};

// The training loop osprey-worker runs: the CPU Trainer below or the GPU trainer
// (worker/gpu_trainer.h). Init, Run and Evaluate on one thread; progress() from any thread.
class TrainLoop {
 public:
  virtual ~TrainLoop() = default;
  // Builds the model and data, installs compression, and initialises the dense table.
  virtual Status Init() = 0;
  // Runs job.train.steps steps; `on_log` is called every log_every_steps steps.
  virtual Status Run(const std::function<void(const Progress&)>& on_log) = 0;
  // Evaluates the current parameters on job.train.eval_samples held-out samples.
  virtual StatusOr<EvalResult> Evaluate() = 0;
  virtual Progress progress() const = 0;
  virtual double train_seconds() const = 0;
  // Adds this loop's statistics (compression, step-time breakdown, cache, device) to *report.
  virtual void FillReport(proto::WorkerReport* report) const = 0;
  // Per-step metrics (worker_metrics.h) into `registry`, which must outlive the loop; call
  // before Run. Loops that do not count per step ignore it.
  virtual void SetMetrics(metrics::Registry* registry) {}
  // A restarted worker (its ResumePlan's start, worker/resume_plan.h): after Init, continue at
  // step `step` -- the data stream moves past step * batch_size samples and Run() trains the
  // steps from `step` to train.steps, so progress() and the report count the rank's whole job.
  // Unimplemented for a loop that cannot resume.
  virtual Status ResumeAt(int64_t step) {
    return step == 0 ? Status::OK() : Unimplemented("this training loop cannot resume at a step");
  }
  // Elastic servers (scale_pause.h): asked at every step boundary; borrowed, outlives the loop.
  // Loops that cannot switch clients (the GPU loop) ignore it, so a scale step times out.
  virtual void SetStepBoundary(StepBoundary* boundary) {}
  // From each heartbeat reply, any thread (the heartbeat thread): the job's median own step time
  // (ClusterState.median_step_seconds, the adaptive per-node ratio's target) and the barrier
  // clock (ClusterState.barrier_clock, -1: none; adaptive_ratio.async_barrier). Others ignore it.
  virtual void SetJobPace(double median_seconds, int64_t barrier_clock) {}
};

// Shared by both loops: AUC and logloss of held-out predictions, and the oracle's AUC when the
// data carries the true probabilities (oracle the same size as labels), else NaN.
EvalResult ScoreEvaluation(const std::vector<float>& probs, const std::vector<float>& labels,
                           const std::vector<float>& oracle);

// Shared by both loops: the compression (with the density trajectory) and step-time fields of a
// WorkerReport.
void FillStepReport(const CompressionStats& comp, const StepTimes& times, proto::WorkerReport* report);

class Trainer final : public TrainLoop {
 public:
  // `client` is borrowed and must outlive the Trainer.
  Trainer(const config::JobConfig& job, int rank, int num_workers, Client* client);
  // Removes the dense encoder it installed from the client (which outlives the Trainer).
  ~Trainer() override;

  // Init() sets the tables' encoders on the client (SetTableCodecs): a DenseCompressor when the
  // dense table's codec is not "none", the sparse table's row casts.
  Status Init() override;
  Status Run(const std::function<void(const Progress&)>& on_log) override;
  StatusOr<EvalResult> Evaluate() override;

  Progress progress() const override;
  double train_seconds() const override { return train_seconds_; }
  void FillReport(proto::WorkerReport* report) const override;
  void SetMetrics(metrics::Registry* registry) override;
  Status ResumeAt(int64_t step) override;  // trainer_resume.cc
  void SetStepBoundary(StepBoundary* boundary) override { boundary_ = boundary; }
  void SetJobPace(double median_seconds, int64_t barrier_clock) override {
    median_step_seconds_.store(median_seconds);
    barrier_clock_.store(barrier_clock);
  }
  // Dense push compression so far (all zero when the dense table is not compressed).
  CompressionStats compression_stats() const;
  StepTimes step_times() const { return times_; }

 private:
  Status Step(data::Batch* batch);
  // Step with train.accumulate_steps > 1 (trainer_accumulate.cc).
  Status AccumulatedStep(data::Batch* batch);
  Status WaitPushes();
  // After a step: updates the step-time averages and lets the adaptive ratio move the density.
  void AfterStep(const StepTimes& before, double encode_before, double wall_seconds);
  // Before step `step` when boundary_ says so: drain, pause, and go on with the client it gives
  // (trainer_scale.cc).
  Status AtBoundary(int64_t step);
  bool AwaitRollback(const Status& s, uint64_t* generation, int64_t* clock) {  // AwaitBspRollback
    return AwaitBspRollback(*client_, job_, rank_, s, generation, clock);
  }
  // Drops what is in flight, moves the data stream to clock `clock`'s first sample and the step
  // counter back to it, and stamps `generation` in every later request.
  Status Rewind(uint64_t generation, int64_t clock);
  // adaptive_ratio.async_barrier, before step *step of a worker that left the barrier: when the
  // workers holding it are ahead (barrier_clock_), skips to their clock -- the data stream moves
  // past the skipped clocks' batches, unread -- and sets *step to it (trainer_resume.cc).
  Status SkipToBarrier(int64_t* step);
  // The clocks SkipToBarrier skipped (skipped_), and the samples a step reads (its micro-batches).
  uint64_t clocks_skipped() const;
  int64_t SamplesPerStep() const {
    return static_cast<int64_t>(job_.train.batch_size) * std::max(1, job_.train.accumulate_steps);
  }

  const config::JobConfig& job_;
  const int rank_;
  const int num_workers_;
  Client* client_;
  StepBoundary* boundary_ = nullptr;
  std::unique_ptr<models::Model> model_;
  std::unique_ptr<DataSource> data_;
  DenseCompressor* compressor_ = nullptr;  // owned by the client; null unless the dense table has a codec
  std::unique_ptr<AdaptiveRatio> adaptive_;  // null unless the dense codec has adaptive_ratio
  uint32_t sparse_table_ = 0;
  uint32_t dense_table_ = 0;
  int dim_ = 0;

  std::vector<float> params_;      // dense parameters, pulled every step
  std::vector<float> dense_grad_;
  std::vector<uint64_t> keys_;
  std::vector<int32_t> row_index_;
  std::vector<float> rows_;
  std::vector<float> row_grad_;
  std::vector<float> probs_;
  std::vector<Ticket> push_tickets_;
  // Gradient accumulation: the summed dense gradient and the merged rows (keys in first-use order).
  std::vector<float> acc_dense_;
  std::vector<uint64_t> acc_keys_;
  std::vector<float> acc_rows_;
  std::unordered_map<uint64_t, size_t> acc_slot_;

  uint64_t rows_pulled_ = 0;
  int64_t first_step_ = 0;  // ResumeAt
  int64_t clocks_redone_ = 0;  // bsp rollbacks: clocks trained again
  std::atomic<int64_t> step_{0};
  std::atomic<uint64_t> samples_{0};
  std::atomic<double> loss_{0};
  std::atomic<double> median_step_seconds_{0};  // SetJobPace
  std::atomic<int64_t> barrier_clock_{-1};      // SetJobPace
  std::atomic<bool> barrier_exempt_{false};     // the adaptive ratio's, for the heartbeats
  uint64_t steps_outside_barrier_ = 0;
  // The clock ranges [from, to) SkipToBarrier skipped, in order; a bsp rollback to clock C
  // forgets those at or past C (they are trained or skipped again) and counts only trained samples.
  std::vector<std::pair<int64_t, int64_t>> skipped_;
  std::atomic<double> step_seconds_{0}, step_push_seconds_{0}, step_encode_seconds_{0}, density_{0};
  double train_seconds_ = 0;
  StepTimes times_;
  std::unique_ptr<StepMetrics> step_metrics_;  // null unless SetMetrics
};

}  // namespace osprey::worker
