// Trainer::AccumulatedStep: gradient accumulation (train.accumulate_steps, job_config.h). The
// dense parameters are pulled once per step; each micro-batch pulls its rows (at the step's
// clock, so in bsp/ssp every micro-batch sees the same parameters), runs forward/backward, and
// adds its gradients: dense element by element in micro-batch order (the first is copied),
// rows into one slot per distinct key. One sparse and one dense push per step.
#include <chrono>
#include <cmath>

#include "worker/trainer.h"

namespace osprey::worker {
namespace {
using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

Status Trainer::AccumulatedStep(data::Batch* batch) {
  const int64_t clock = step_.load();
  Ticket pull_dense = client_->PullDense(dense_table_, params_.data(), clock);
  bool dense_pulled = false;
  acc_dense_.resize(params_.size());
  acc_keys_.clear();
  acc_rows_.clear();
  acc_slot_.clear();
  uint64_t samples = 0;
  double loss_sum = 0;
  double wait = 0;  // read, dedupe and pulls: on the step's critical path (no prefetch thread)
  int batches = 0;
  for (int m = 0; m < job_.train.accumulate_steps; ++m) {
    auto tr = Clock::now();
    OSPREY_RETURN_IF_ERROR(data_->Next(job_.train.batch_size, batch));
    if (batch->size == 0) {
      if (m == 0) return OutOfRange("training data ended");
      break;  // a last, shorter step
    }
    times_.read += Seconds(tr);
    wait += Seconds(tr);
    auto td = Clock::now();
    data::DedupeKeys(*batch, &keys_, &row_index_);
    times_.dedupe += Seconds(td);
    wait += Seconds(td);
    rows_pulled_ += keys_.size();
    rows_.resize(keys_.size() * dim_);
    row_grad_.resize(rows_.size());
    probs_.resize(batch->size);
    Ticket pull_rows = client_->Pull(sparse_table_, keys_.data(), keys_.size(), rows_.data(), clock);
    auto tp = Clock::now();
    Status rows_ok = client_->Wait(pull_rows);
    if (!dense_pulled) {
      OSPREY_RETURN_IF_ERROR(client_->Wait(pull_dense));
      dense_pulled = true;
    }
    times_.pull += Seconds(tp);
    wait += Seconds(tp);
    OSPREY_RETURN_IF_ERROR(rows_ok);
    auto tc = Clock::now();
    const float loss = model_->ForwardBackward(params_.data(), rows_.data(), keys_.size(), row_index_.data(), *batch,
                                               dense_grad_.data(), row_grad_.data(), probs_.data());
    if (!std::isfinite(loss)) return Internal("step " + std::to_string(clock) + ": loss is not finite");
    if (m == 0) {
      acc_dense_ = dense_grad_;
    } else {
      for (size_t i = 0; i < acc_dense_.size(); ++i) acc_dense_[i] += dense_grad_[i];
    }
    const size_t d = static_cast<size_t>(dim_);
    for (size_t j = 0; j < keys_.size(); ++j) {
      auto [it, fresh] = acc_slot_.emplace(keys_[j], acc_keys_.size());
      if (fresh) {
        acc_keys_.push_back(keys_[j]);
        acc_rows_.insert(acc_rows_.end(), row_grad_.begin() + j * d, row_grad_.begin() + (j + 1) * d);
      } else {
        float* dst = acc_rows_.data() + it->second * d;
        for (size_t c = 0; c < d; ++c) dst[c] += row_grad_[j * d + c];
      }
    }
    times_.compute += Seconds(tc);
    samples += batch->size;
    loss_sum += loss;
    ++batches;
  }
  times_.wait_input += wait;
  auto t5 = Clock::now();
  OSPREY_RETURN_IF_ERROR(WaitPushes());  // last step's pushes overlapped with this step's work
  push_tickets_.push_back(client_->Push(sparse_table_, acc_keys_.data(), acc_keys_.size(), acc_rows_.data(), clock,
                                        client_->version(sparse_table_)));
  push_tickets_.push_back(client_->PushDense(dense_table_, acc_dense_.data(), clock, client_->version(dense_table_)));
  times_.push += Seconds(t5);
  const double loss = loss_sum / batches;
  loss_.store(clock == 0 ? loss : 0.95 * loss_.load() + 0.05 * loss);
  samples_.fetch_add(samples);
  step_.fetch_add(1);
  return Status::OK();
}

}  // namespace osprey::worker
