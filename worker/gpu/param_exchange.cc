#include "worker/gpu/param_exchange.h"

namespace osprey::worker::gpu {

ParamExchange::ParamExchange(const config::JobConfig& job, int rank, Client* client)
    : job_(job), rank_(rank), client_(client) {}

ParamExchange::~ParamExchange() {
  if (compressor_ && !device_compressor_) (void)client_->SetEncoder(dense_table_, nullptr);  // the client owns it
}

Status ParamExchange::Init() {
  OSPREY_ASSIGN_OR_RETURN(sparse_table_, client_->TableId(job_.model.sparse_table));
  OSPREY_ASSIGN_OR_RETURN(dense_table_, client_->TableId(job_.model.dense_table));
  num_servers_ = client_->shard_map().server_endpoints_size();
  return Status::OK();
}

Status ParamExchange::SetClient(Client* next) {
  client_ = next;
  device_compressor_.reset();
  compressor_ = nullptr;
  return Init();
}

Status ParamExchange::InstallCodecs(const codec::TensorLayout& dense_layout, bool dense_on_device) {
  const config::TableConfig& dense = job_.tables[job_.TableIndex(job_.model.dense_table)];
  if (dense_on_device && dense.codec.type != "none") {
    // The same checks SetTableCodecs makes, without installing the compressor on the client.
    if (!dense_layout.empty()) {
      if (Status s = codec::ValidateTensorLayout(dense_layout, dense_spec().size()); !s.ok()) {
        return InvalidArgument("table '" + dense_spec().name() + "': " + s.message());
      }
    }
    OSPREY_ASSIGN_OR_RETURN(device_compressor_, DenseCompressor::Create(dense.codec, rank_ + 1, dense_layout));
    compressor_ = device_compressor_.get();
  } else {
    OSPREY_ASSIGN_OR_RETURN(compressor_, SetTableCodecs(dense, dense_table_, rank_ + 1, client_, dense_layout));
  }
  const config::TableConfig& sparse = job_.tables[job_.TableIndex(job_.model.sparse_table)];
  return SetTableCodecs(sparse, sparse_table_, rank_ + 1, client_).status();
}

Status ParamExchange::InitDense(const float* values) { return client_->Wait(client_->InitDense(dense_table_, values)); }

const proto::TableSpec& ParamExchange::dense_spec() const { return client_->shard_map().tables(dense_table_); }

CompressionStats ParamExchange::compression_stats() const {
  return compressor_ ? compressor_->stats() : CompressionStats{};
}

Status ParamExchange::PullStep(int64_t step, const uint64_t* keys, size_t n, void* rows, float* params,
                               const std::vector<bool>* own_servers, uint64_t* sparse_version,
                               uint64_t* dense_version, const int32_t* server_counts, codec::ValueType rows_as) {
  const int32_t* counts = server_counts != nullptr && num_servers_ > 1 ? server_counts : nullptr;
  Ticket pulled_rows =
      rows_as != codec::ValueType::kFp32
          ? client_->PullCastRows(sparse_table_, keys, n, static_cast<uint16_t*>(rows), rows_as, counts, step)
      : counts != nullptr ? client_->PullByServer(sparse_table_, keys, n, static_cast<float*>(rows), counts, step)
                          : client_->Pull(sparse_table_, keys, n, static_cast<float*>(rows), step);
  Ticket dense = own_servers ? client_->PullDense(dense_table_, params, step, *own_servers)
                             : client_->PullDense(dense_table_, params, step);
  Status s1 = client_->Wait(pulled_rows);
  Status s2 = client_->Wait(dense);
  OSPREY_RETURN_IF_ERROR(s1);
  OSPREY_RETURN_IF_ERROR(s2);
  *sparse_version = client_->version(sparse_table_);
  *dense_version = client_->version(dense_table_);
  return Status::OK();
}

void ParamExchange::PushRows(int64_t step, const uint64_t* keys, size_t n, const float* grads,
                             const int32_t* server_counts, uint64_t version) {
  step_tickets_.push_back(num_servers_ > 1
                              ? client_->PushByServer(sparse_table_, keys, n, grads, server_counts, step, version)
                              : client_->Push(sparse_table_, keys, n, grads, step, version));
}

void ParamExchange::PushCastRows(int64_t step, const uint64_t* keys, size_t n, const uint16_t* rows,
                                 codec::ValueType type, const int32_t* server_counts, uint64_t version) {
  step_tickets_.push_back(client_->PushCastRows(sparse_table_, keys, n, rows, type,
                                                num_servers_ > 1 ? server_counts : nullptr, step, version));
}

void ParamExchange::PushDense(int64_t step, const float* grads, uint64_t version, const std::vector<bool>& servers) {
  step_tickets_.push_back(client_->PushDense(dense_table_, grads, step, version, servers));
}

void ParamExchange::PushDenseEncoded(int64_t step, const std::vector<EncodedDenseFrame>& frames, uint64_t version) {
  step_tickets_.push_back(client_->PushDenseEncoded(dense_table_, frames, step, version));
}

void ParamExchange::EndStep(int64_t step) {
  pushes_.emplace_back(step, std::move(step_tickets_));
  step_tickets_.clear();
}

Status ParamExchange::WaitPushes(int64_t through) {
  Status first;
  while (!pushes_.empty() && pushes_.front().first <= through) {
    for (Ticket t : pushes_.front().second) {
      Status s = client_->Wait(t);
      if (first.ok() && !s.ok()) first = s;
    }
    pushes_.pop_front();
  }
  return first;
}

Status ParamExchange::PullDenseForEval(float* params) {
  return client_->Wait(client_->PullDense(dense_table_, params));
}

Status ParamExchange::PullRowsForEval(const uint64_t* keys, size_t n, float* rows) {
  return client_->Wait(client_->Pull(sparse_table_, keys, n, rows));
}

}  // namespace osprey::worker::gpu
