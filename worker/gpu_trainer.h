// The GPU training loop of osprey-worker, and the choice between it and the CPU Trainer.
//
// worker.device (job config) picks the loop:
//   cpu    the CPU Trainer (worker/trainer.h).
//   cuda   the GPU loop below; a build without CUDA, no visible device, or worker.gpu beyond the
//          visible devices is an error naming the problem.
//   auto   the GPU loop when this build has CUDA and a device is visible, else the CPU Trainer
//          (logged as a warning). Other GPU errors (out of memory, a cache that does not fit)
//          are errors, not fallbacks.
//
// The GPU loop (worker/gpu_trainer.cc and worker/gpu/, whose parts gpu/gpu_trainer_impl.h lists)
// computes DLRM steps on one CUDA device (GpuDlrm) with the
// same data, parameters and wire traffic as the CPU Trainer. Step t is prepared by a prefetch
// thread while step t-1 computes (worker.prefetch; off: inline, same results):
//   read      batch t from reader threads that generate synthetic batches ahead
//             (worker.data_threads; batch t is samples [t*B, (t+1)*B) of the worker's stream, as
//             on the CPU) or read the Criteo file;
//   dedupe    ids to the device, FeatureKeys deduped there (CUB radix sort) and grouped by the
//             server that owns them (cuda::GroupKeysByServer), the distinct keys back to the
//             host; the step's sparse push then sends each server one contiguous slice of keys
//             and rows (Client::PushByServer) instead of hashing and partitioning on the host;
//   cache     the hot-row cache (worker/cache/sharded_row_cache.h: worker.plan_threads shards
//             of worker/cache/row_cache.h, planned in parallel) maps each distinct key to a slot
//             of a device array [capacity x dim]; keys absent or pulled more than
//             staleness_bound steps ago are misses;
//   pull      only the misses are pulled from the servers (and the dense parameters), copied to
//             the device and scattered into their slots; worker.pull_threads threads take
//             turns by step, so the pulls of consecutive steps overlap.
// The main thread then gathers the step's rows from the cache into a compact array and runs
// forward + backward (worker.precision: fp32, tf32 or bf16 MLP products). Backward is observed
// as it is enqueued (cuda::BackwardHooks): the dense gradient is cut into buckets of
// worker.dense_bucket_bytes (rounded to whole chunks of the dense table; the top MLP's finish
// first), and each bucket, like the row gradients, is handed to a comm thread the moment backward
// has enqueued it. The comm thread (comm_stream_) waits on the device for the bucket, reduces it
// (host group, below) and copies it to the host; a pusher thread sends a server's dense push as
// soon as the last bucket holding one of its chunks is on the host, and the sparse push as soon
// as the row gradients are, so pushes leave while the rest of backward still runs. Each server
// still gets one dense and one sparse message per step (one gradient row per distinct key: GpuDlrm
// sums the uses of a row).
//
// Ordering with the servers: in bsp and ssp a pull for clock t+1 must reach a server after this
// worker's push of clock t (the server infers a worker's progress from its pulls), so there the
// prefetch thread sends step t+1's pulls once step t's pushes are sent; reading, deduping and
// cache planning still overlap the compute. In async the pulls go out at once.
//
// The cache: worker.cache.capacity_rows (or capacity_fraction of the key space) rows; 0 and 0
// means no reuse: staleness bound 0 and room for the steps in flight, so every step re-pulls every
// row it uses, exactly like the CPU loop. staleness_bound -1 takes the sparse table's: bsp 0, ssp
// its staleness_bound, async 4 (worker/gpu/gpu_options.h states every such rule). A row's "version" is the step it was pulled for, so the lag is
// counted in this worker's steps (in bsp that is exactly the number of server windows; in
// ssp/async it is the worker's own view). Pushes carry the client's table version at the time
// the step's misses were pulled.
//
// The NCCL host group (worker.nccl, when this build has NCCL and the host has several GPU
// workers): the workers of one host form a communicator (local rank 0 makes the unique id, the
// coordinator hands it to the others, OP_HOST_GROUP). Local rank r owns the servers s with
// s % local_size == r, and so the dense chunks those servers hold:
//   reduce      each dense bucket is reduced (ncclReduce, average over the host) to the owner of
//               each of its chunks -- a reduce-scatter along server ownership -- and only the
//               owner copies and pushes (compressed with the table's codec) those chunks;
//   pull        each rank pulls only its servers' chunks; the other servers get a clock-only
//               pull (no keys), which tells them this worker's progress (bsp/ssp windows close
//               on it) and is held like a real pull until the clock is ready;
//   all-gather  the comm thread broadcasts each chunk from its owner into every rank's copy of
//               the parameters before the step computes.
// So each dense chunk crosses the network once per host in each direction. The comm thread is
// the only one calling NCCL, in the same order on every rank: step t's broadcast, then step t's
// reduces bucket by bucket. Sparse rows are pulled and pushed by every worker for its own batch.
//
// The threads hand steps to each other through a StageBoard (worker/gpu/stage_board.h): "step t
// reached stage X" (planned, pulled, ready, gathered, pushed), the gradient stages of a step in
// the order backward finished them, and the first failure, which ends every thread's wait.
//
// Thread-safety: as TrainLoop.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "job/job_config.h"
#include "common/status.h"
#include "worker/client/client.h"
#include "worker/trainer.h"

namespace osprey::worker {

// This worker's place among the workers of its host (the coordinator's RegisterReply), and the
// exchange of the NCCL unique id through the coordinator: local rank 0 passes the id it made and
// gets it back, the others pass "" and get local rank 0's.
struct HostGroup {
  int local_rank = 0;
  int local_size = 1;
  std::function<StatusOr<std::string>(const std::string& nccl_id)> exchange_id;
};

// The loop job.worker.device asks for (see above). `client` is borrowed.
StatusOr<std::unique_ptr<TrainLoop>> MakeTrainLoop(const config::JobConfig& job, int rank, int num_workers,
                                                   Client* client, const HostGroup& host = HostGroup());

// The GPU loop on device job.worker.gpu (-1: local rank modulo the visible devices). Errors:
// FailedPrecondition when this build has no CUDA ("built without CUDA") or no device is visible;
// InvalidArgument when worker.gpu is not a visible device, or the model is not DLRM. Device memory
// is allocated in Init (ResourceExhausted when the cache does not fit).
StatusOr<std::unique_ptr<TrainLoop>> MakeGpuTrainer(const config::JobConfig& job, int rank, int num_workers,
                                                    Client* client, const HostGroup& host);

}  // namespace osprey::worker
