// BatchReader: the training batches of the GPU loop (worker/gpu_trainer.h), made ahead of time
// by threads of their own, taken by the planner in step order first, first + 1, ... (first is 0,
// or a restarted worker's resume step: SetFirstStep).
//
// Synthetic data: options.threads generators of the worker's stream, generator j making steps j,
// j + threads, ... (batch t is samples [t*B, (t+1)*B), as in the CPU loop), each at most
// 2 x threads steps ahead of the taker. Other sources: one thread over the DataSource, in order.
// With a pool (synthetic data, options.pool > 0 batches) the generators make batches 0 .. pool-1 once, in
// Start, and step t gets batch t % pool.
//
// Ownership: the reader borrows `job` (it must outlive the reader) and owns its threads and
// batches. Thread-safety: Start, Stop and Take from one thread at a time (the loop's planner, or
// the main thread without prefetch; Stop also from the destructor); the generator threads are
// the reader's own.
#pragma once

#include <cstdint>
#include <thread>
#include <vector>

#include "job/job_config.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "worker/data/batch.h"

namespace osprey::worker::gpu {

// How the reader makes batches (ResolveGpuOptions fills it from the job).
struct BatchReaderOptions {
  bool synthetic = true;  // the planted-model generator; false: MakeDataSource (data.source)
  int threads = 1;        // generators; 1 for other sources
  int pool = 0;           // batches made once and reused; 0: none (synthetic data only)
};

class BatchReader {
 public:
  BatchReader(const config::JobConfig& job, int rank, int num_workers, const BatchReaderOptions& options);
  ~BatchReader();  // Stop()
  BatchReader(const BatchReader&) = delete;
  BatchReader& operator=(const BatchReader&) = delete;

  // Starts the generators; with a pool, returns once the pool is made, or its first error (the
  // generator's Make error: InvalidArgument for a bad data.synthetic).
  Status Start() EXCLUDES(mu_);
  // Before Start: the first step Take will ask for (>= 0; default 0). A restarted worker resumes
  // its stream there: synthetic generators seek to sample first * batch_size, another source
  // reads past that many samples first (a source shorter than that ends: OutOfRange at first).
  void SetFirstStep(int64_t first) EXCLUDES(mu_);
  // Stops and joins the generators; a Take waiting then returns Aborted. Idempotent.
  void Stop() EXCLUDES(mu_);

  // The batch of `step` (taken in order first, first + 1, ...): *batch points to it, valid until the next
  // Take. It is swapped into *scratch, or with a pool is the pool's own (read-only) batch, not a
  // copy. Errors: OutOfRange when a finite source ended, Aborted after Stop, or the source's or
  // generator's error (delivered at the step it happened; the reader makes nothing after it).
  Status Take(int64_t step, data::Batch* scratch, const data::Batch** batch) EXCLUDES(mu_);

 private:
  struct Slot {
    int64_t step = -1;  // the step whose batch the slot holds; -1: empty
    data::Batch batch;
    Status status;
  };

  Status FillPool(int j);
  void Produce(int j, int64_t first) EXCLUDES(mu_);
  // Hands batch t (or its error) to slot t % slots; false when stopped first.
  bool Deliver(int64_t t, const Status& status, data::Batch* batch) EXCLUDES(mu_);

  const config::JobConfig& job_;
  const int rank_, num_workers_;
  const bool synthetic_;
  const int threads_;
  Mutex mu_;
  CondVar cv_;
  std::vector<Slot> slots_ GUARDED_BY(mu_);  // 2 x threads_, batch t in slot t % size
  int64_t next_take_ GUARDED_BY(mu_) = 0;  // also the first step until the first Take
  bool stop_ GUARDED_BY(mu_) = false;
  // Filled by Start before any Take, read-only afterwards: no lock.
  std::vector<data::Batch> pool_;
  // Started by Start, joined by Stop (the caller's thread only).
  std::vector<std::thread> workers_;
};

}  // namespace osprey::worker::gpu
