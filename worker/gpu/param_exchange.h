// ParamExchange: the GPU loop's traffic with the parameter servers (worker/gpu_trainer.h), and
// the only code of the loop that calls the Client. A step pulls its cache misses and the dense
// parameters, then pushes its row gradients (one slice per server) and its dense gradient (one
// message per server, sent bucket by bucket as backward finishes them); up to kPushWindow steps
// of pushes stay unacknowledged while later steps run. Evaluation pulls everything plainly.
//
// Ownership: borrows the client and the job (both outlive the exchange); owns the dense
// compressor it installs on the client (removed again by the destructor). Pointers passed to
// the calls are borrowed for the call: the client copies keys and gradients into its frames
// before a push returns, and a pull writes its output before PullStep returns.
//
// Thread-safety: PullStep, the *ForEval pulls and the accessors from any thread (the Client is
// thread-safe); the push calls (PushRows, PushDense, EndStep, WaitPushes) from one thread at a
// time -- the pusher, or the main thread once the pusher is joined or without prefetch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "job/job_config.h"
#include "common/status.h"
#include "worker/client/client.h"
#include "worker/compression.h"

namespace osprey::worker::gpu {

class ParamExchange {
 public:
  ParamExchange(const config::JobConfig& job, int rank, Client* client);
  ~ParamExchange();
  ParamExchange(const ParamExchange&) = delete;
  ParamExchange& operator=(const ParamExchange&) = delete;

  // Looks up the model's tables and the number of servers. Errors: the client's TableId (NotFound).
  Status Init();
  // Installs the tables' codecs on the client: the dense table's compressor (when its codec is
  // not none, seeded by rank + 1; `dense_layout`: the model's tensors, for granularity "layer") and
  // the sparse table's row codecs. With dense_on_device the dense compressor is not installed:
  // the exchange keeps it for the device encoder's bookkeeping (compressor()), and the dense
  // pushes come encoded (PushDenseEncoded). Call before training. Errors: SetTableCodecs'.
  Status InstallCodecs(const codec::TensorLayout& dense_layout, bool dense_on_device = false);
  // Gives the dense table its initial values (every worker sends the same; the first wins).
  Status InitDense(const float* values);

  uint32_t sparse_table() const { return sparse_table_; }
  uint32_t dense_table() const { return dense_table_; }
  int num_servers() const { return num_servers_; }  // of the shard map, at Init
  const proto::TableSpec& dense_spec() const;
  CompressionStats compression_stats() const;
  // The dense table's compressor (null with codec none); owned by the client, or by the exchange
  // when the dense table is encoded on the device.
  DenseCompressor* compressor() const { return compressor_; }
  // The dense table's messages, one per server holding chunks (Client::dense_routes).
  const std::vector<DenseRoute>& dense_routes() const { return client_->dense_routes(dense_table_); }
  Client* client() const { return client_; }  // the bsp rollback's state
  // A scale step's new client (worker/scale_pause.h), with nothing in flight: looks the tables and
  // the server count up again (Init) and drops the dense compressor; call InstallCodecs next (a
  // compressor's error-feedback residual starts from zero, as on the CPU worker).
  Status SetClient(Client* next);

  // The pulls of `step`, in flight together: the rows of keys[0, n) into rows (n x dim floats),
  // and the dense parameters into params -- all of them when own_servers is null, else only the
  // chunks of the servers it marks (the others get a clock-only pull). On success *sparse_version
  // and *dense_version are the client's table versions after the pulls. Errors: the pulls'.
  // server_counts (one per server) non-null: the keys come grouped by server with these counts
  // (the device cache index's misses), and are pulled by server without hashing (PullByServer).
  // `rows_as` kFp16 / kBf16: the rows come as those 16-bit values, not widened (rows is then a
  // uint16_t array; Client::PullCastRows).
  Status PullStep(int64_t step, const uint64_t* keys, size_t n, void* rows, float* params,
                  const std::vector<bool>* own_servers, uint64_t* sparse_version, uint64_t* dense_version,
                  const int32_t* server_counts = nullptr, codec::ValueType rows_as = codec::ValueType::kFp32);

  // The pushes of `step`, in order: PushRows and PushDense any number of times, then EndStep.
  // PushRows: n keys with their gradient rows; with several servers keys are grouped by server
  // (server_counts, one per server, as cuda::GroupKeysByServer makes them). PushDense: the
  // chunks of the servers marked in `servers`, from grads (the whole dense vector).
  void PushRows(int64_t step, const uint64_t* keys, size_t n, const float* grads, const int32_t* server_counts,
                uint64_t version);
  // PushRows with the rows already cast to `type` (fp16 / bf16) on the device.
  void PushCastRows(int64_t step, const uint64_t* keys, size_t n, const uint16_t* rows, codec::ValueType type,
                    const int32_t* server_counts, uint64_t version);
  void PushDense(int64_t step, const float* grads, uint64_t version, const std::vector<bool>& servers);
  // The same for server messages already encoded (the device path; Client::PushDenseEncoded).
  void PushDenseEncoded(int64_t step, const std::vector<EncodedDenseFrame>& frames, uint64_t version);
  void EndStep(int64_t step);
  // Waits for the pushes of steps <= through (all: INT64_MAX); returns the first error.
  Status WaitPushes(int64_t through);

  // Evaluation: the whole dense vector, and rows of keys, without a clock.
  Status PullDenseForEval(float* params);
  Status PullRowsForEval(const uint64_t* keys, size_t n, float* rows);

 private:
  const config::JobConfig& job_;
  const int rank_;
  Client* client_;
  uint32_t sparse_table_ = 0, dense_table_ = 0;
  int num_servers_ = 1;
  DenseCompressor* compressor_ = nullptr;  // owned by the client (SetTableCodecs) or by device_compressor_
  std::unique_ptr<DenseCompressor> device_compressor_;  // dense on the device: not installed
  // The push thread's own (see Thread-safety): the step being pushed, and the steps in flight,
  // oldest first.
  std::vector<Ticket> step_tickets_;
  std::deque<std::pair<int64_t, std::vector<Ticket>>> pushes_;
};

}  // namespace osprey::worker::gpu
