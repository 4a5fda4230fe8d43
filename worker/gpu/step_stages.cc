// The device work of each stage of a GPU step (gpu_trainer_impl.h): which stream it runs on,
// which events order it against the other streams, and where it hands off through board_.
#include <chrono>
#include <cmath>
#include <cstring>

#include "worker/cuda/cuda_check.cuh"
#include "worker/cuda/sparse/sparse_kernels.h"
#include "worker/gpu/gpu_trainer_impl.h"

namespace osprey::worker::gpu {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Host batch -> pinned -> device (plan_stream).
Status UploadBatch(const data::Batch& b, size_t ids, StepInput* in, cudaStream_t stream) {
  std::memcpy(in->h_ids.data(), b.ids.data(), ids * sizeof(uint64_t));
  std::memcpy(in->h_dense.data(), b.dense.data(), b.dense.size() * sizeof(float));
  std::memcpy(in->h_labels.data(), b.labels.data(), b.labels.size() * sizeof(float));
  OSPREY_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(in->d_ids.data(), in->h_ids.data(), ids * sizeof(uint64_t), cudaMemcpyHostToDevice, stream));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(in->d_dense.data(), in->h_dense.data(), b.dense.size() * sizeof(float),
                                              cudaMemcpyHostToDevice, stream));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(in->d_labels.data(), in->h_labels.data(),
                                              b.labels.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
  return Status::OK();
}

}  // namespace

// Prefetch stage 1 of step `step`: the batch, its keys deduped on the device, the cache plan
// (on the device with worker.cache.index device: then only the miss keys come back).
// Device work goes to plan_stream_.
Status GpuTrainer::PlanStep(int64_t step, StepInput* in) {
  auto t0 = Clock::now();
  const data::Batch* batch = nullptr;
  OSPREY_RETURN_IF_ERROR(reader_->Take(step, &in->host, &batch));
  const double read_s = Since(t0);
  times_.read += read_s;
  Count(StepMetrics::kRead, read_s);
  const data::Batch& b = *batch;
  if (b.size > opt_.max_batch || b.num_sparse != num_sparse_ || b.num_dense != num_dense_features_) {
    return InvalidArgument("step " + std::to_string(step) + ": batch of " + std::to_string(b.size) + " samples with " +
                           std::to_string(b.num_sparse) + " sparse / " + std::to_string(b.num_dense) +
                           " dense features does not match the model");
  }
  in->step = step;
  in->batch = b.size;
  const size_t ids = static_cast<size_t>(b.size) * num_sparse_;
  auto t1 = Clock::now();
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventRecord(in->plan_start, plan_stream_));
  OSPREY_RETURN_IF_ERROR(UploadBatch(b, ids, in, plan_stream_));
  OSPREY_RETURN_IF_ERROR(cuda::DedupeFeatureKeys(in->d_ids.as<uint64_t>(), b.size, num_sparse_,
                                                 in->d_unique.as<uint64_t>(), in->d_row_index.as<int32_t>(),
                                                 in->d_count.as<int32_t>(), d_workspace_.data(), workspace_bytes_,
                                                 plan_stream_));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(in->h_count.data(), in->d_count.data(), sizeof(int32_t),
                                              cudaMemcpyDeviceToHost, plan_stream_));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(plan_stream_));
  const int u = in->h_count.as<int32_t>()[0];
  if (u < 0 || static_cast<size_t>(u) > ids) return Internal("device dedupe returned " + std::to_string(u) + " keys");
  in->num_unique = u;
  const int servers = exchange_.num_servers();
  if (servers > 1) {
    // The pushes then send each server's keys and rows as one slice (Client::PushByServer).
    OSPREY_RETURN_IF_ERROR(cuda::GroupKeysByServer(exchange_.sparse_table(), servers, in->d_unique.as<uint64_t>(), u,
                                                   in->d_row_index.as<int32_t>(), static_cast<int>(ids),
                                                   in->d_server_counts.as<int32_t>(), d_workspace_.data(),
                                                   workspace_bytes_, plan_stream_));
    OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(in->h_server_counts.data(), in->d_server_counts.data(),
                                                servers * sizeof(int32_t), cudaMemcpyDeviceToHost, plan_stream_));
  }
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(in->h_unique.data(), in->d_unique.data(), u * sizeof(uint64_t),
                                              cudaMemcpyDeviceToHost, plan_stream_));
  // Also orders the copies above before anything the puller or the compute stream does.
  OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(plan_stream_));
  const double dedupe_s = Since(t1);
  times_.dedupe += dedupe_s;
  Count(StepMetrics::kDedupe, dedupe_s);

  auto t2 = Clock::now();
  OSPREY_RETURN_IF_ERROR(cache_->Plan(in, servers, plan_stream_));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventRecord(in->plan_end, plan_stream_));
  const double cache_s = Since(t2);
  times_.cache += cache_s;
  Count(StepMetrics::kCache, cache_s);
  if (cache_metrics_) {  // once per step: the shards' sums, no per-row work
    const RowCacheStats cs = cache_->stats();
    cache_metrics_->Update(cs.lookups, cs.hits, cs.evictions);
  }
  return Status::OK();
}

// Prefetch stage 2 of step `step`: pull the misses and the dense parameters (with a host group,
// only this worker's slice), put the rows into their cache slots. Device work goes to the
// puller's stream, pull_stream_[step % pull_threads].
Status GpuTrainer::PullStep(int64_t step, StepInput* in) {
  const int puller = static_cast<int>(step % opt_.pull_threads);
  // bsp/ssp: this step's pulls must reach the servers after the previous step's pushes.
  auto t3 = Clock::now();
  if (opt_.gate_pulls) OSPREY_RETURN_IF_ERROR(board_->WaitFor(kPushed, step - 1));
  const size_t m = in->num_misses;
  if (opt_.check_pulls) PoisonPullTargets(in, m);
  // A failed pull fails the run, so the slots it left unfilled are never read.
  OSPREY_RETURN_IF_ERROR(exchange_.PullStep(step, in->miss_key_ptr, m, in->h_miss_rows.data(),
                                            in->h_params.as<float>(),
                                            host_group_ ? &host_group_->own_servers() : nullptr,
                                            &in->sparse_version, &in->dense_version, in->miss_server_counts,
                                            opt_.row_widen));
  if (opt_.check_pulls) OSPREY_RETURN_IF_ERROR(CheckPulled(step, *in, m));
  rows_pulled_[puller] += m;
  const double pull_s = Since(t3);
  pull_seconds_[puller] += pull_s;
  Count(StepMetrics::kPull, pull_s);
  if (step_metrics_) step_metrics_->OnPull(step, in->sparse_version, in->dense_version);
  cudaStream_t pull_stream = pull_stream_[puller];

  // The pulled rows go into their slots only after the previous step's gather read the cache
  // (a stale row is refreshed in the slot it already had; evicted slots were last used by a step
  // at least ring back).
  if (step > first_step_) {  // a resumed loop's first step follows no gather
    OSPREY_RETURN_IF_ERROR(board_->WaitFor(kGathered, step - 1));
    OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(pull_stream, inputs_[(step - 1) % opt_.ring].gathered, 0));
  }
  // The plan left the slots and the miss slots on the device (cache_index.h).
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventRecord(in->pull_start, pull_stream));
  if (opt_.row_widen != codec::ValueType::kFp32) {  // 16-bit rows: half the bytes, widened in the scatter
    OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(in->d_miss_rows.data(), in->h_miss_rows.data(),
                                                m * dim_ * sizeof(uint16_t), cudaMemcpyHostToDevice, pull_stream));
    OSPREY_RETURN_IF_ERROR(cuda::ScatterRowsWiden(in->d_miss_rows.as<uint16_t>(), opt_.row_widen,
                                                  in->d_miss_slots.as<int32_t>(), static_cast<int>(m), dim_,
                                                  d_cache_.as<float>(), pull_stream));
  } else {
    OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(in->d_miss_rows.data(), in->h_miss_rows.data(),
                                                m * dim_ * sizeof(float), cudaMemcpyHostToDevice, pull_stream));
    OSPREY_RETURN_IF_ERROR(cuda::ScatterRows(in->d_miss_rows.as<float>(), in->d_miss_slots.as<int32_t>(),
                                             static_cast<int>(m), dim_, d_cache_.as<float>(), pull_stream));
  }
  // With a host group the other ranks' slices are garbage here until BroadcastParams.
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(in->d_params.data(), in->h_params.data(), num_params_ * sizeof(float),
                                              cudaMemcpyHostToDevice, pull_stream));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventRecord(in->pull_end, pull_stream));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventRecord(host_group_ ? in->pulled : in->ready, pull_stream));
  return Status::OK();
}

Status GpuTrainer::BroadcastParams(StepInput* in) {
  if (!host_group_) return Internal("host group without NCCL");
  OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(comm_stream_, in->pulled, 0));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventRecord(in->bcast_start, comm_stream_));
  OSPREY_RETURN_IF_ERROR(host_group_->Broadcast(plan_.param_ranges, in->d_params.as<float>(), comm_stream_, in->step));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventRecord(in->bcast_end, comm_stream_));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventRecord(in->ready, comm_stream_));
  return Status::OK();
}

// The main-thread part of a step whose inputs are ready: gather, forward/backward. Backward
// hands each finished stage (a dense bucket, the row gradients) to the comm thread as it goes.
Status GpuTrainer::Compute(StepInput* in) {
  const int64_t step = in->step;
  const int u = in->num_unique;
  StepGradients& g = grads_[step % 2];
  // The gradient buffers and stage events of this step held step-2's, which the pusher must have
  // sent (and so the comm thread enqueued).
  auto t0 = Clock::now();
  OSPREY_RETURN_IF_ERROR(board_->WaitFor(kPushed, step - 2));
  board_->OpenStep(step);
  const double push_wait_s = Since(t0);
  times_.push += push_wait_s;
  Count(StepMetrics::kPush, push_wait_s);
  auto t1 = Clock::now();
  OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute_stream_, in->ready, 0));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventRecord(in->compute_start, compute_stream_));
  OSPREY_RETURN_IF_ERROR(cuda::GatherRows(d_cache_.as<float>(), in->d_slots.as<int32_t>(), u, dim_,
                                          d_rows_.as<float>(), compute_stream_));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventRecord(in->gathered, compute_stream_));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventRecord(in->compute_gathered, compute_stream_));
  board_->Reach(kGathered, step);
  if (opt_.check_pulls) OSPREY_RETURN_IF_ERROR(CheckGathered(step, u));

  // Stage k < num_buckets is dense bucket k; stage num_buckets the row gradients.
  Status hook_status;
  size_t next_bucket = 0;
  bool rows_signaled = false;
  auto signal = [&](int stage) {
    cudaError_t e = cudaEventRecord(g.events[stage].signaled, compute_stream_);
    if (e != cudaSuccess && hook_status.ok()) {
      hook_status = cuda::CudaStatus(e, "cudaEventRecord (gradient stage)", __FILE__, __LINE__);
    }
    board_->Post(StageBoard::kSignaled, step, stage);
  };
  cuda::BackwardHooks hooks;
  hooks.dense_ready = [&](size_t from) {
    for (; next_bucket < plan_.buckets.size() && plan_.buckets[next_bucket].begin >= from; ++next_bucket) {
      signal(static_cast<int>(next_bucket));
    }
  };
  hooks.rows_ready = [&] {
    rows_signaled = true;
    signal(rows_stage());
  };
  OSPREY_RETURN_IF_ERROR(model_->ForwardBackward(in->d_params.as<float>(), d_rows_.as<float>(), u,
                                                 in->d_row_index.as<int32_t>(), in->d_dense.as<float>(),
                                                 in->d_labels.as<float>(), in->batch, g.d_dense.as<float>(),
                                                 g.d_rows.as<float>(), d_probs_.as<float>(), d_loss_.as<float>(),
                                                 compute_stream_, &hooks));
  OSPREY_RETURN_IF_ERROR(hook_status);
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventRecord(in->compute_end, compute_stream_));
  if (next_bucket != plan_.buckets.size() || !rows_signaled) {
    return Internal("step " + std::to_string(step) + ": backward signaled " + std::to_string(next_bucket) + " of " +
                    std::to_string(plan_.buckets.size()) + " dense buckets" +
                    (rows_signaled ? "" : " and not the rows"));
  }
  OSPREY_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(h_loss_.data(), d_loss_.data(), sizeof(float), cudaMemcpyDeviceToHost, compute_stream_));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_stream_));
  double bcast_s = 0;
  if (host_group_) {  // the broadcast finished before the compute stream could start
    float ms = 0;
    OSPREY_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, in->bcast_start, in->bcast_end));
    bcast_s = ms * 1e-3;
  }
  nccl_bcast_seconds_ += bcast_s;
  const double compute_s = Since(t1) - bcast_s;  // the compute stream waited for the broadcast
  times_.compute += compute_s;
  Count(StepMetrics::kCompute, compute_s);
  Count(StepMetrics::kNccl, bcast_s);
  OSPREY_RETURN_IF_ERROR(CountDeviceTimes(*in));
  board_->Reach(kComputed, step);  // the planner may now reuse the input's events
  const float loss = h_loss_.as<float>()[0];
  if (!std::isfinite(loss)) return Internal("step " + std::to_string(step) + ": loss is not finite");
  double avg = step_.load() == first_step_ ? loss : 0.95 * loss_.load() + 0.05 * loss;
  loss_.store(avg);
  samples_.fetch_add(in->batch);
  if (step_metrics_) step_metrics_->AddSamples(in->batch);
  step_.fetch_add(1);
  return Status::OK();
}

// The device time of step's stages, from its timed events. The compute stream was synchronized
// and had waited for the pull, so only the plan stream's end may still be pending (a wait of
// nothing: the planner synchronized its stream before the pull began). The planner records into
// these events again for step + ring only after kComputed (PlannerLoop).
Status GpuTrainer::CountDeviceTimes(const StepInput& in) {
  struct Span {
    cudaEvent_t start, end;
    double* total;
  };
  for (const Span& s : {Span{in.plan_start, in.plan_end, &times_.device_plan},
                        Span{in.pull_start, in.pull_end, &times_.device_pull},
                        Span{in.compute_start, in.compute_gathered, &times_.device_gather},
                        Span{in.compute_gathered, in.compute_end, &times_.device_compute}}) {
    float ms = 0;
    OSPREY_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s.end));
    OSPREY_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, s.start, s.end));
    *s.total += ms * 1e-3;
  }
  return Status::OK();
}

Status GpuTrainer::CommStep(int64_t step) {
  StepGradients& g = grads_[step % 2];
  const StepInput* in = &inputs_[step % opt_.ring];
  for (int i = 0; i < num_stages(); ++i) {
    int stage = -1;
    OSPREY_RETURN_IF_ERROR(board_->WaitPosted(StageBoard::kSignaled, step, i, &stage));
    StageEvents& ev = g.events[stage];
    OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(comm_stream_, ev.signaled, 0));
    if (stage == rows_stage() && opt_.row_cast != codec::ValueType::kFp32) {
      // Cast on the device: half the bytes cross, and the pusher only slices them.
      const int64_t values = static_cast<int64_t>(in->num_unique) * dim_;
      OSPREY_RETURN_IF_ERROR(cuda::CastRowValues(g.d_rows.as<float>(), values, opt_.row_cast,
                                                 g.d_rows_cast.as<uint16_t>(), comm_stream_));
      OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(g.h_rows.data(), g.d_rows_cast.data(), values * sizeof(uint16_t),
                                                  cudaMemcpyDeviceToHost, comm_stream_));
    } else if (stage == rows_stage()) {
      OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(g.h_rows.data(), g.d_rows.data(),
                                                  static_cast<size_t>(in->num_unique) * dim_ * sizeof(float),
                                                  cudaMemcpyDeviceToHost, comm_stream_));
    } else {
      const DenseBucket& bucket = plan_.buckets[stage];
      float* d = g.d_dense.as<float>();
      OSPREY_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev.start, comm_stream_));
      if (host_group_) OSPREY_RETURN_IF_ERROR(host_group_->Reduce(bucket, d, comm_stream_, step, stage));
      OSPREY_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev.end, comm_stream_));
      if (device_encoder_) {
        // The servers whose last bucket this is have all their chunks final on this stream.
        for (size_t server = 0; server < bucket.push_servers.size(); ++server) {
          if (!bucket.push_servers[server]) continue;
          OSPREY_RETURN_IF_ERROR(
              device_encoder_->Enqueue(static_cast<int>(server), d, static_cast<int>(step % 2), comm_stream_));
        }
      }
      for (const OwnedRange& r : bucket.own) {
        if (device_encoder_) break;  // the encoder copies only the payloads
        OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(g.h_dense.as<float>() + r.first, d + r.first,
                                                    r.count * sizeof(float), cudaMemcpyDeviceToHost, comm_stream_));
      }
    }
    OSPREY_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev.done, comm_stream_));
    board_->Post(StageBoard::kEnqueued, step, stage);
  }
  return Status::OK();
}

Status GpuTrainer::PushStep(int64_t step) {
  const StepInput* in = &inputs_[step % opt_.ring];
  const StepGradients& g = grads_[step % 2];
  double nccl_s = 0;
  OSPREY_RETURN_IF_ERROR(exchange_.WaitPushes(step - kPushWindow));
  // The client copies keys and gradients into its frames before returning, so the pinned
  // buffers may be reused once the step's calls return.
  for (int i = 0; i < num_stages(); ++i) {
    int stage = -1;
    OSPREY_RETURN_IF_ERROR(board_->WaitPosted(StageBoard::kEnqueued, step, i, &stage));
    const StageEvents& ev = g.events[stage];
    OSPREY_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(ev.done));
    // An IPC reduce that gave up on a peer left garbage in its bucket: it must not be pushed.
    if (host_group_) OSPREY_RETURN_IF_ERROR(host_group_->PollIpc());
    if (stage == rows_stage() && opt_.row_cast != codec::ValueType::kFp32) {
      exchange_.PushCastRows(step, in->h_unique.as<uint64_t>(), in->num_unique, g.h_rows.as<uint16_t>(),
                             opt_.row_cast, in->h_server_counts.as<int32_t>(), in->sparse_version);
      continue;
    }
    if (stage == rows_stage()) {
      exchange_.PushRows(step, in->h_unique.as<uint64_t>(), in->num_unique, g.h_rows.as<float>(),
                         in->h_server_counts.as<int32_t>(), in->sparse_version);
      continue;
    }
    if (host_group_) {
      float ms = 0;
      OSPREY_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, ev.start, ev.end));
      nccl_s += ms * 1e-3;
    }
    const DenseBucket& bucket = plan_.buckets[stage];
    if (!bucket.any_push) continue;
    if (!device_encoder_) {
      exchange_.PushDense(step, g.h_dense.as<float>(), in->dense_version, bucket.push_servers);
      continue;
    }
    std::vector<EncodedDenseFrame> frames;
    for (size_t server = 0; server < bucket.push_servers.size(); ++server) {
      if (!bucket.push_servers[server]) continue;
      OSPREY_ASSIGN_OR_RETURN(EncodedDenseFrame f,
                              device_encoder_->Take(static_cast<int>(server), static_cast<int>(step % 2)));
      frames.push_back(std::move(f));
    }
    exchange_.PushDenseEncoded(step, frames, in->dense_version);
  }
  exchange_.EndStep(step);
  nccl_reduce_seconds_ += nccl_s;
  Count(StepMetrics::kNccl, nccl_s);
  board_->Reach(kPushed, step);
  return Status::OK();
}

}  // namespace osprey::worker::gpu
