#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "common/logging.h"
#include "worker/data/criteo.h"
#include "worker/data/metrics.h"
#include "worker/data/synthetic.h"
#include "worker/models/model_factory.h"
#include "worker/worker_metrics.h"

namespace osprey::worker {
namespace {

// Stream id of the held-out evaluation set; training streams are the worker ranks.
constexpr uint64_t kEvalStream = uint64_t{1} << 32;

class SyntheticSource : public DataSource {
 public:
  explicit SyntheticSource(std::unique_ptr<data::SyntheticGenerator> gen) : gen_(std::move(gen)) {}
  Status Next(int batch_size, data::Batch* out) override {
    gen_->NextBatch(batch_size, out);
    return Status::OK();
  }
  Status Skip(int64_t samples) override {  // sample i is a pure function of (stream, i)
    gen_->SeekToSample(gen_->next_sample() + static_cast<uint64_t>(samples));
    return Status::OK();
  }

 private:
  std::unique_ptr<data::SyntheticGenerator> gen_;
};

// Reads a Criteo TSV shard; training wraps around at the end of the file (next epoch).
class CriteoSource : public DataSource {
 public:
  CriteoSource(std::string path, int shard, int shards, bool wrap)
      : path_(std::move(path)), shard_(shard), shards_(shards), wrap_(wrap) {}
  Status Open() {
    OSPREY_ASSIGN_OR_RETURN(reader_, data::CriteoReader::Open(path_, shard_, shards_));
    return Status::OK();
  }
  Status Next(int batch_size, data::Batch* out) override {
    OSPREY_RETURN_IF_ERROR(reader_->Next(batch_size, out));
    if (out->size == 0 && wrap_ && !empty_pass_) {
      empty_pass_ = true;  // a shard with no lines at all must not loop forever
      OSPREY_RETURN_IF_ERROR(Open());
      return Next(batch_size, out);
    }
    if (out->size > 0) empty_pass_ = false;
    return Status::OK();
  }
  // By line, without parsing; wraps around like Next (a shard of n lines skips `samples` mod n).
  Status Skip(int64_t samples) override {
    int64_t pass = 0;  // skipped since the last reopen
    while (samples > 0) {
      int64_t skipped = 0;
      OSPREY_RETURN_IF_ERROR(reader_->SkipSamples(samples, &skipped));
      samples -= skipped;
      pass += skipped;
      if (samples == 0 || !wrap_) break;
      if (pass == 0) break;  // an empty shard
      OSPREY_RETURN_IF_ERROR(Open());
      samples %= pass;  // whole passes over the shard change nothing
      pass = 0;
    }
    return Status::OK();
  }

 private:
  std::string path_;
  int shard_, shards_;
  bool wrap_;
  bool empty_pass_ = false;
  std::unique_ptr<data::CriteoReader> reader_;
};

}  // namespace

StatusOr<std::unique_ptr<DataSource>> MakeDataSource(const config::JobConfig& job, int rank,
                                                     int num_workers, bool train) {
  if (job.data.source == "synthetic") {
    OSPREY_ASSIGN_OR_RETURN(auto gen, data::SyntheticGenerator::Make(
                                          job.data.synthetic, train ? rank : kEvalStream));
    return std::unique_ptr<DataSource>(std::make_unique<SyntheticSource>(std::move(gen)));
  }
  const std::string& path = train ? job.data.train_path : job.data.eval_path;
  if (path.empty()) return InvalidArgument("data.eval_path is required to evaluate Criteo data");
  auto src = train ? std::make_unique<CriteoSource>(path, rank, num_workers, true)
                   : std::make_unique<CriteoSource>(path, 0, 1, false);
  OSPREY_RETURN_IF_ERROR(src->Open());
  return std::unique_ptr<DataSource>(std::move(src));
}

Trainer::Trainer(const config::JobConfig& job, int rank, int num_workers, Client* client)
    : job_(job), rank_(rank), num_workers_(num_workers), client_(client) {}

void Trainer::SetMetrics(metrics::Registry* registry) {
  const double flops = job_.model.model.type == "dlrm" ? DlrmFlopsPerSample(job_.model.model.dlrm) : 0;
  step_metrics_ = std::make_unique<StepMetrics>(registry, flops, job_.metrics.peak_flops_per_sec);
}

Trainer::~Trainer() {
  // The client owns the compressor: it goes back to fp32 dense pushes, as before Init (this
  // cannot fail: the table exists).
  if (compressor_ != nullptr) (void)client_->SetEncoder(dense_table_, nullptr);
}

CompressionStats Trainer::compression_stats() const {
  return compressor_ ? compressor_->stats() : CompressionStats{};
}

Status Trainer::Init() {
  OSPREY_ASSIGN_OR_RETURN(model_, models::MakeModel(job_.model.model));
  OSPREY_ASSIGN_OR_RETURN(data_, MakeDataSource(job_, rank_, num_workers_, /*train=*/true));
  OSPREY_ASSIGN_OR_RETURN(sparse_table_, client_->TableId(job_.model.sparse_table));
  OSPREY_ASSIGN_OR_RETURN(dense_table_, client_->TableId(job_.model.dense_table));
  dim_ = model_->embedding_dim();
  params_.resize(model_->num_dense_params());
  dense_grad_.resize(params_.size());
  model_->InitDense(job_.model.seed, params_.data());
  int dense_index = job_.TableIndex(job_.model.dense_table);
  if (dense_index >= 0) {
    OSPREY_ASSIGN_OR_RETURN(compressor_, SetTableCodecs(job_.tables[dense_index], dense_table_, rank_ + 1, client_,
                                                        model_->dense_tensors()));
    const codec::CodecConfig& codec = job_.tables[dense_index].codec;
    if (compressor_ != nullptr) density_.store(codec.density);
    if (compressor_ != nullptr && codec.adaptive_ratio.enabled) adaptive_ = std::make_unique<AdaptiveRatio>(codec);
  }
  int sparse_index = job_.TableIndex(job_.model.sparse_table);
  if (sparse_index >= 0) {
    OSPREY_RETURN_IF_ERROR(SetTableCodecs(job_.tables[sparse_index], sparse_table_, rank_ + 1, client_).status());
  }
  return client_->Wait(client_->InitDense(dense_table_, params_.data()));
}

Status Trainer::WaitPushes() {
  Status first;
  for (Ticket t : push_tickets_) {
    Status s = client_->Wait(t);
    if (first.ok() && !s.ok()) first = s;
  }
  push_tickets_.clear();
  return first;
}

namespace {
using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

void FillStepReport(const CompressionStats& comp, const StepTimes& t, proto::WorkerReport* report) {
  report->set_dense_push_bytes_raw(comp.bytes_raw);
  report->set_dense_push_bytes_encoded(comp.bytes_encoded);
  report->set_encode_seconds(comp.encode_seconds);
  report->set_compressed_messages(comp.compressed_messages);
  report->set_last_density(comp.last_density);
  const DiagnosticsSummary& d = comp.diagnostics;
  for (const LayerDiagnostics& l : d.layers) {
    proto::LayerCompressionDiagnostics* out = report->add_compression_layers();
    out->set_name(l.name);
    out->set_raw_norm(l.raw_norm);
    out->set_sent_norm(l.sent_norm);
    out->set_cosine(l.cosine);
    out->set_no_update_share(l.no_update_share);
  }
  if (d.steps > 0) {
    report->set_compression_cosine(d.cosine);
    report->set_compression_no_update_share(d.no_update_share);
    report->set_compression_warning(CompressionWarning(d));
  }
  for (const DensityPoint& p : comp.density_trajectory) {
    proto::DensityPoint* out = report->add_density_trajectory();
    out->set_step(p.step);
    out->set_density(p.density);
  }
  report->set_time_wait_input(t.wait_input);
  report->set_device_plan(t.device_plan);
  report->set_device_pull(t.device_pull);
  report->set_device_gather(t.device_gather);
  report->set_device_compute(t.device_compute);
  report->set_time_compute(t.compute);
  report->set_time_push(t.push);
  report->set_time_nccl(t.nccl);
  report->set_prefetch_read(t.read);
  report->set_prefetch_dedupe(t.dedupe);
  report->set_prefetch_cache(t.cache);
  report->set_prefetch_pull(t.pull);
}

void Trainer::AfterStep(const StepTimes& before, double encode_before, double wall_seconds) {
  const double encode = compressor_ != nullptr ? compressor_->encode_seconds() - encode_before : 0;
  const double own = std::max(0.0, wall_seconds - (times_.pull - before.pull));
  const double push = std::max(0.0, times_.push - before.push - encode);
  // ~10-step exponential averages: smooth enough to compare with the median, quick enough to
  // see a density move within the controller's interval.
  constexpr double kAlpha = 0.1;
  auto average = [](std::atomic<double>* avg, double x, bool first) {
    avg->store(first ? x : (1 - kAlpha) * avg->load() + kAlpha * x);
  };
  const bool first = step_seconds_.load() == 0;
  average(&step_seconds_, own, first);
  average(&step_push_seconds_, push, first);
  average(&step_encode_seconds_, encode, first);
  if (adaptive_ == nullptr) return;
  StepSample sample;
  sample.step = step_.load();
  sample.own_seconds = step_seconds_.load();
  sample.push_seconds = step_push_seconds_.load();
  sample.encode_seconds = step_encode_seconds_.load();
  sample.median_seconds = median_step_seconds_.load();
  if (barrier_exempt_.load()) ++steps_outside_barrier_;
  const bool moved = adaptive_->Update(sample);
  if (adaptive_->barrier_exempt() != barrier_exempt_.load()) {
    barrier_exempt_.store(adaptive_->barrier_exempt());
    OSPREY_LOG_INFO("worker {} {} the step barrier at step {}: own step {:.1f} ms vs median {:.1f} ms, density {}", rank_,
                    adaptive_->barrier_exempt() ? "leaves" : "rejoins", sample.step, 1e3 * sample.own_seconds,
                    1e3 * sample.median_seconds, adaptive_->density());
  }
  if (!moved) return;
  compressor_->SetAdaptive(adaptive_->density(), adaptive_->cheap_select());
  density_.store(adaptive_->density());
}

void Trainer::FillReport(proto::WorkerReport* report) const {
  FillStepReport(compression_stats(), times_, report);
  if (adaptive_ != nullptr) {
    report->set_adaptive_ratio(true);
    report->set_adaptive_final_density(adaptive_->density());
    report->set_adaptive_min_density(adaptive_->min_reached());
    report->set_adaptive_max_density(adaptive_->max_reached());
    report->set_adaptive_changes(adaptive_->changes());
    report->set_adaptive_cheap_select(adaptive_->cheap_select());
    report->set_adaptive_step_seconds(step_seconds_.load());
    report->set_adaptive_median_step_seconds(median_step_seconds_.load());
    report->set_adaptive_barrier_exits(adaptive_->barrier_exits());
    report->set_adaptive_steps_outside_barrier(steps_outside_barrier_);
    report->set_adaptive_clocks_skipped(clocks_skipped());
  }
  report->set_rows_pulled(rows_pulled_);
  report->set_device("cpu");
}

Status Trainer::Step(data::Batch* batch) {
  if (job_.train.accumulate_steps > 1) return AccumulatedStep(batch);
  // The CPU loop has no prefetch thread: read, dedupe and the wait for pulls are all on the
  // step's critical path, so they count both as prefetch-side times and as wait_input.
  auto t0 = Clock::now();
  OSPREY_RETURN_IF_ERROR(data_->Next(job_.train.batch_size, batch));
  if (batch->size == 0) return OutOfRange("training data ended");
  times_.read += Since(t0);
  auto t1 = Clock::now();
  data::DedupeKeys(*batch, &keys_, &row_index_);
  times_.dedupe += Since(t1);
  rows_pulled_ += keys_.size();
  rows_.resize(keys_.size() * dim_);
  row_grad_.resize(rows_.size());
  probs_.resize(batch->size);
  // Pulls carry the step they are for: in bsp/ssp the server answers once that step's
  // parameters are ready.
  int64_t clock = step_.load();
  Ticket pull_rows = client_->Pull(sparse_table_, keys_.data(), keys_.size(), rows_.data(), clock);
  Ticket pull_dense = client_->PullDense(dense_table_, params_.data(), clock);
  auto t2 = Clock::now();
  Status s1 = client_->Wait(pull_rows);
  Status s2 = client_->Wait(pull_dense);
  times_.pull += Since(t2);
  times_.wait_input += Since(t0);
  if (step_metrics_ != nullptr && s1.ok() && s2.ok()) {
    step_metrics_->OnPull(clock, client_->version(sparse_table_), client_->version(dense_table_));
  }
  auto t3 = Clock::now();
  OSPREY_RETURN_IF_ERROR(WaitPushes());  // last step's pushes; they overlapped with this pull
  times_.push += Since(t3);
  OSPREY_RETURN_IF_ERROR(s1);
  OSPREY_RETURN_IF_ERROR(s2);
  auto t4 = Clock::now();
  float loss = model_->ForwardBackward(params_.data(), rows_.data(), keys_.size(),
                                       row_index_.data(), *batch, dense_grad_.data(),
                                       row_grad_.data(), probs_.data());
  if (!std::isfinite(loss)) {
    return Internal("step " + std::to_string(step_.load()) + ": loss is not finite");
  }
  times_.compute += Since(t4);
  auto t5 = Clock::now();
  push_tickets_.push_back(client_->Push(sparse_table_, keys_.data(), keys_.size(),
                                        row_grad_.data(), clock, client_->version(sparse_table_)));
  push_tickets_.push_back(client_->PushDense(dense_table_, dense_grad_.data(), clock,
                                             client_->version(dense_table_)));
  times_.push += Since(t5);
  double avg = step_.load() == first_step_ ? loss : 0.95 * loss_.load() + 0.05 * loss;
  loss_.store(avg);
  samples_.fetch_add(batch->size);
  step_.fetch_add(1);
  return Status::OK();
}

Status Trainer::Run(const std::function<void(const Progress&)>& on_log) {
  auto start = std::chrono::steady_clock::now();
  data::Batch batch;
  for (int64_t i = first_step_; i < job_.train.steps; ++i) {
    const StepTimes before = times_;
    const uint64_t samples_before = samples_.load();
    if (boundary_ != nullptr && boundary_->Pending(i)) OSPREY_RETURN_IF_ERROR(AtBoundary(i));
    uint64_t generation = 0;
    int64_t rewind_to = 0;
    if (client_->ReadyRollback(&generation, &rewind_to)) {  // bsp rollback (trainer_resume.cc)
      OSPREY_RETURN_IF_ERROR(Rewind(generation, rewind_to));
      i = rewind_to - 1;
      continue;
    }
    if (barrier_exempt_.load()) {  // adaptive_ratio.async_barrier: catch up with the others
      OSPREY_RETURN_IF_ERROR(SkipToBarrier(&i));
      if (i >= job_.train.steps) break;
    }
    const auto step_start = std::chrono::steady_clock::now();
    const double encode_before = compressor_ != nullptr ? compressor_->encode_seconds() : 0;
    Status s = Step(&batch);
    if (s.ok()) {
      AfterStep(before, encode_before,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count());
    }
    if (step_metrics_ != nullptr && s.ok()) {
      step_metrics_->OnStep(before, times_, std::chrono::duration<double>(
                                                std::chrono::steady_clock::now() - step_start).count());
      step_metrics_->AddSamples(samples_.load() - samples_before);
    }
    if (s.code() == StatusCode::kOutOfRange) break;
    if (!s.ok() && AwaitRollback(s, &generation, &rewind_to)) {
      OSPREY_RETURN_IF_ERROR(Rewind(generation, rewind_to));
      i = rewind_to - 1;
      continue;
    }
    OSPREY_RETURN_IF_ERROR(s);
    if (on_log && (i + 1) % job_.train.log_every_steps == 0) on_log(progress());
  }
  OSPREY_RETURN_IF_ERROR(WaitPushes());
  train_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Status::OK();
}

StatusOr<EvalResult> Trainer::Evaluate() {
  OSPREY_ASSIGN_OR_RETURN(auto eval, MakeDataSource(job_, rank_, num_workers_, /*train=*/false));
  OSPREY_RETURN_IF_ERROR(client_->Wait(client_->PullDense(dense_table_, params_.data())));
  std::vector<float> probs, labels, oracle;
  data::Batch batch;
  while (static_cast<int64_t>(probs.size()) < job_.train.eval_samples) {
    int n = static_cast<int>(std::min<int64_t>(4096, job_.train.eval_samples - probs.size()));
    OSPREY_RETURN_IF_ERROR(eval->Next(n, &batch));
    if (batch.size == 0) break;
    data::DedupeKeys(batch, &keys_, &row_index_);
    rows_.resize(keys_.size() * dim_);
    probs_.resize(batch.size);
    OSPREY_RETURN_IF_ERROR(
        client_->Wait(client_->Pull(sparse_table_, keys_.data(), keys_.size(), rows_.data())));
    model_->Predict(params_.data(), rows_.data(), keys_.size(), row_index_.data(), batch,
                    probs_.data());
    probs.insert(probs.end(), probs_.begin(), probs_.end());
    labels.insert(labels.end(), batch.labels.begin(), batch.labels.end());
    oracle.insert(oracle.end(), batch.oracle_prob.begin(), batch.oracle_prob.end());
  }
  return ScoreEvaluation(probs, labels, oracle);
}

EvalResult ScoreEvaluation(const std::vector<float>& probs, const std::vector<float>& labels,
                           const std::vector<float>& oracle) {
  EvalResult r;
  r.samples = probs.size();
  r.auc = data::Auc(probs.data(), labels.data(), probs.size());
  r.logloss = data::LogLoss(probs.data(), labels.data(), probs.size());
  r.oracle_auc = oracle.size() == labels.size() && !oracle.empty()
                     ? data::Auc(oracle.data(), labels.data(), oracle.size())
                     : std::numeric_limits<double>::quiet_NaN();
  return r;
}

Progress Trainer::progress() const {
  Progress p;
  p.step = step_.load();
  p.samples = samples_.load();
  p.loss = loss_.load();
  if (compressor_ != nullptr) p.compression_warning = compressor_->warning();
  p.step_seconds = step_seconds_.load();
  p.step_push_seconds = step_push_seconds_.load();
  p.step_encode_seconds = step_encode_seconds_.load();
  p.density = density_.load();
  p.barrier_exempt = barrier_exempt_.load();
  return p;
}

}  // namespace osprey::worker
