#include "worker/gpu/batch_reader.h"

#include <memory>
#include <utility>

#include "worker/data/synthetic.h"
#include "worker/trainer.h"

namespace osprey::worker::gpu {

BatchReader::BatchReader(const config::JobConfig& job, int rank, int num_workers, const BatchReaderOptions& options)
    : job_(job), rank_(rank), num_workers_(num_workers), synthetic_(options.synthetic),
      threads_(options.synthetic ? options.threads : 1), slots_(2 * threads_),
      pool_(options.synthetic ? static_cast<size_t>(options.pool) : 0) {}

BatchReader::~BatchReader() { Stop(); }

Status BatchReader::Start() {
  if (!pool_.empty()) {
    std::vector<Status> errors(threads_);
    for (int j = 0; j < threads_; ++j) workers_.emplace_back([this, j, &errors] { errors[j] = FillPool(j); });
    for (auto& t : workers_) t.join();
    workers_.clear();
    for (const Status& e : errors) OSPREY_RETURN_IF_ERROR(e);
    return Status::OK();
  }
  int64_t first = 0;
  {
    MutexLock lock(&mu_);
    first = next_take_;
  }
  for (int j = 0; j < threads_; ++j) workers_.emplace_back([this, j, first] { Produce(j, first); });
  return Status::OK();
}

void BatchReader::SetFirstStep(int64_t first) {
  MutexLock lock(&mu_);
  next_take_ = first;
}

void BatchReader::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

Status BatchReader::Take(int64_t step, data::Batch* scratch, const data::Batch** batch) {
  if (!pool_.empty()) {
    *batch = &pool_[step % pool_.size()];
    return Status::OK();
  }
  *batch = scratch;
  MutexLock lock(&mu_);
  Slot& slot = slots_[step % slots_.size()];
  cv_.Wait(&lock, [&]() REQUIRES(mu_) { return slot.step == step || stop_; });
  if (slot.step != step) return Aborted("batch reader stopped");
  std::swap(*scratch, slot.batch);
  Status s = slot.status;
  slot.step = -1;
  next_take_ = step + 1;
  cv_.SignalAll();
  return s;
}

Status BatchReader::FillPool(int j) {
  OSPREY_ASSIGN_OR_RETURN(auto gen, data::SyntheticGenerator::Make(job_.data.synthetic, static_cast<uint64_t>(rank_)));
  const int b = job_.train.batch_size;
  for (size_t t = j; t < pool_.size(); t += threads_) {
    gen->SeekToSample(static_cast<uint64_t>(t) * b);
    gen->NextBatch(b, &pool_[t]);
  }
  return Status::OK();
}

bool BatchReader::Deliver(int64_t t, const Status& status, data::Batch* batch) {
  MutexLock lock(&mu_);
  cv_.Wait(&lock, [&]() REQUIRES(mu_) { return stop_ || t < next_take_ + static_cast<int64_t>(slots_.size()); });
  if (stop_) return false;
  Slot& slot = slots_[t % slots_.size()];
  std::swap(slot.batch, *batch);
  slot.status = status;
  slot.step = t;
  cv_.SignalAll();
  return true;
}

void BatchReader::Produce(int j, int64_t first) {
  std::unique_ptr<data::SyntheticGenerator> gen;
  std::unique_ptr<DataSource> source;
  Status status;
  if (synthetic_) {
    auto g = data::SyntheticGenerator::Make(job_.data.synthetic, static_cast<uint64_t>(rank_));
    if (g.ok()) gen = std::move(*g); else status = g.status();
  } else {
    auto src = MakeDataSource(job_, rank_, num_workers_, /*train=*/true);
    if (src.ok()) source = std::move(*src); else status = src.status();
  }
  const int b = job_.train.batch_size;
  if (source && first > 0) status = source->Skip(first * b);  // one thread: j == 0
  data::Batch batch;
  for (int64_t t = first + j; ; t += threads_) {
    if (status.ok()) {
      if (gen) {
        gen->SeekToSample(static_cast<uint64_t>(t) * b);
        gen->NextBatch(b, &batch);
      } else {
        status = source->Next(b, &batch);
        if (status.ok() && batch.size == 0) status = OutOfRange("training data ended");
      }
    }
    if (!Deliver(t, status, &batch)) return;
    if (!status.ok()) return;  // the error is delivered at step t; nothing after it
  }
}

}  // namespace osprey::worker::gpu
