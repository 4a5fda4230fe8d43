#include "worker/compression.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>

namespace osprey::worker {
namespace {

bool IsSparseCodec(codec::CodecId id) {
  return id == codec::CodecId::kTopK || id == codec::CodecId::kRandomK;
}

// Floats per encode unit of a message of n floats.
size_t UnitFloats(const codec::CodecConfig& config, size_t n) {
  if (config.granularity != "bucket") return n;
  return std::max<size_t>(1, config.bucket_bytes / sizeof(float));
}

StatusOr<proto::Codec> RowCodec(const std::string& type, const char* field) {
  if (type == "none") return proto::CODEC_NONE;
  if (type == "fp16") return proto::CODEC_FP16;
  if (type == "bf16") return proto::CODEC_BF16;
  return InvalidArgument(std::string(field) + " '" + type + "' cannot carry sparse rows (none, fp16 or bf16)");
}

}  // namespace

StatusOr<DenseCompressor*> SetTableCodecs(const config::TableConfig& config, uint32_t table, uint64_t seed,
                                          Client* client, const codec::TensorLayout& layout) {
  if (table >= static_cast<uint32_t>(client->shard_map().tables_size())) {
    return InvalidArgument("table id " + std::to_string(table) + " does not exist");
  }
  if (client->shard_map().tables(table).type() == proto::TABLE_SPARSE) {
    OSPREY_ASSIGN_OR_RETURN(proto::Codec push, RowCodec(config.codec.type, "codec"));
    OSPREY_ASSIGN_OR_RETURN(proto::Codec pull, RowCodec(config.pull_codec, "pull_codec"));
    OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<PushEncoder> rows, MakeRowCastEncoder(push));
    OSPREY_RETURN_IF_ERROR(client->SetEncoder(table, std::move(rows)));
    OSPREY_RETURN_IF_ERROR(client->SetSparsePullCodec(table, pull));
    return nullptr;
  }
  if (config.codec.type == "none") return nullptr;
  if (!layout.empty()) {
    const uint64_t floats = client->shard_map().tables(table).size();
    if (Status s = codec::ValidateTensorLayout(layout, floats); !s.ok()) {
      return InvalidArgument("table '" + client->shard_map().tables(table).name() + "': " + s.message());
    }
  }
  OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<DenseCompressor> comp, DenseCompressor::Create(config.codec, seed, layout));
  DenseCompressor* borrowed = comp.get();
  OSPREY_RETURN_IF_ERROR(client->SetEncoder(table, std::move(comp)));
  return borrowed;
}

StatusOr<std::unique_ptr<DenseCompressor>> DenseCompressor::Create(const codec::CodecConfig& config, uint64_t seed,
                                                                   codec::TensorLayout layout) {
  OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<codec::Codec> codec, codec::MakeCodec(config));
  if (config.granularity == "layer" && layout.empty()) {
    return InvalidArgument("codec.granularity = layer needs the model's tensor list (none was given)");
  }
  if (config.granularity == "layer" && config.type == "onebit") {
    return InvalidArgument("codec.granularity = layer: onebit chunks cannot follow tensor boundaries (use bucket)");
  }
  if (config.type == "onebit" && config.granularity == "bucket" &&
      (config.bucket_bytes / sizeof(float)) % config.onebit_chunk != 0) {
    return InvalidArgument("codec.bucket_bytes = " + std::to_string(config.bucket_bytes) +
                           ": onebit buckets must hold a multiple of onebit_chunk (" +
                           std::to_string(config.onebit_chunk) + ") floats");
  }
  std::unique_ptr<codec::Codec> cheap;
  if (config.adaptive_ratio.enabled && config.type == "topk" && config.topk_method == "exact" &&
      config.select == "magnitude") {
    codec::CodecConfig sampled = config;
    sampled.topk_method = "sample";
    OSPREY_ASSIGN_OR_RETURN(cheap, codec::MakeCodec(sampled));
  }
  return std::unique_ptr<DenseCompressor>(
      new DenseCompressor(config, std::move(codec), std::move(cheap), seed, std::move(layout)));
}

void DenseCompressor::SetAdaptive(double density, bool cheap_select) {
  MutexLock lock(&mu_);
  density_scale_ = density / config_.density;
  cheap_select_ = cheap_select && cheap_codec_ != nullptr;
}

Status DenseCompressor::CheckTable(const proto::TableSpec& table) const {
  if (table.type() == proto::TABLE_DENSE) return Status::OK();
  return InvalidArgument("table '" + table.name() + "' is sparse; its rows are cast (fp16 / bf16), never compressed");
}

Status DenseCompressor::Encode(const PushValues& in, proto::Header* header, Buffer* values) {
  MutexLock lock(&mu_);
  const size_t n = in.floats;
  ++stats_.messages;
  stats_.bytes_raw += n * sizeof(float);
  if (n * sizeof(float) < config_.min_compress_bytes || config_.type == "none") {
    header->set_codec(proto::CODEC_NONE);
    *values = in.Fp32Frame();
    stats_.bytes_encoded += values->size();
    return Status::OK();
  }
  Ranges ranges;
  if (in.ranges != nullptr) {
    ranges.assign(in.ranges, in.ranges + in.num_ranges);
  } else {
    ranges.emplace_back(in.first, n);
  }
  if (in.contiguous()) return EncodeLocked(in.table, in.server, ranges, in.base, n, header, values);
  gather_.resize(n);
  in.CopyTo(gather_.data());
  return EncodeLocked(in.table, in.server, ranges, gather_.data(), n, header, values);
}

Status DenseCompressor::Encode(uint32_t table, int server, const float* grad, size_t n, proto::Header* header,
                               Buffer* values) {
  PushValues in;
  in.table = table;
  in.server = server;
  in.floats = n;
  in.base = grad;
  return Encode(in, header, values);
}

void DenseCompressor::StartStream(uint32_t table, int server, const Ranges& ranges, size_t n, Stream* st) const {
  const uint64_t step = st->step;
  *st = Stream{};
  st->step = step;
  st->length = n;
  st->ranges = ranges;
  if (config_.granularity == "layer") {
    for (const codec::LayerSegment& seg : codec::LayerSegments(layout_, ranges)) {
      Unit u;
      u.begin = seg.begin;
      u.size = seg.size;
      u.state.min_k = config_.layer_min_k;
      st->units.push_back(std::move(u));
    }
  } else {
    const size_t unit = UnitFloats(config_, n);
    st->units.resize((n + unit - 1) / unit);
    for (size_t u = 0; u < st->units.size(); ++u) {
      st->units[u].begin = u * unit;
      st->units[u].size = std::min(unit, n - u * unit);
    }
  }
  for (size_t u = 0; u < st->units.size(); ++u) {
    // Distinct, reproducible random streams per worker, table, server and unit.
    st->units[u].state.tensor_seed = (seed_ * 0x9E3779B97F4A7C15ull) ^ (uint64_t{table} << 40) ^
                                     (static_cast<uint64_t>(server) << 24) ^ u;
  }
}

Status DenseCompressor::EncodeLocked(uint32_t table, int server, const Ranges& ranges, const float* grad, size_t n,
                                     proto::Header* header, Buffer* values) {
  Stream& st = streams_[{table, server}];
  if (st.length != n || st.ranges != ranges) {
    // First use, or the server's share of the table changed (a new shard map): a residual of
    // chunks this message no longer covers is meaningless, so the stream starts over (its step
    // count goes on: it places the message in the run's density trajectory).
    StartStream(table, server, ranges, n, &st);
    diagnostics_.StartStream({table, server}, ranges, n);
  }
  auto start = std::chrono::steady_clock::now();
  codec::EncodedMeta meta;
  OSPREY_RETURN_IF_ERROR(EncodeUnits(&st, grad, n, &meta, values));
  stats_.encode_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  OSPREY_RETURN_IF_ERROR(diagnostics_.Observe({table, server}, grad, n, codec::EncodedView{meta, values->data(), values->size()}));
  header->set_codec(static_cast<proto::Codec>(meta.codec));
  header->set_codec_value_type(static_cast<uint32_t>(meta.value_type));
  header->set_codec_count(meta.count);
  header->set_codec_chunk(meta.chunk);
  ++stats_.compressed_messages;
  stats_.bytes_encoded += values->size();
  stats_.last_density = n > 0 ? static_cast<double>(meta.count) / static_cast<double>(n) : 1.0;
  RecordDensity(st.step++, meta.count, n);
  return Status::OK();
}

void DenseCompressor::RecordDensity(uint64_t step, uint64_t selected, uint64_t length) {
  if (step > last_step_) {
    last_step_ = step;
    last_ = StepCount{};
  }
  if (step == last_step_) {
    last_.selected += selected;
    last_.length += length;
  }
  if (step % stride_ != 0) return;
  auto it = samples_.find(step);
  if (it == samples_.end()) {
    // A new sampled step: when the evenly spaced points are full, keep every other one.
    while (samples_.size() >= kMaxTrajectoryPoints - 1) {
      stride_ *= 2;
      for (auto s = samples_.begin(); s != samples_.end();) {
        s = s->first % stride_ != 0 ? samples_.erase(s) : std::next(s);
      }
      if (step % stride_ != 0) return;
    }
    it = samples_.emplace(step, StepCount{}).first;
  }
  it->second.selected += selected;
  it->second.length += length;
}

Status DenseCompressor::EncodeUnits(Stream* st, const float* grad, size_t n, codec::EncodedMeta* meta,
                                    Buffer* values) {
  const codec::Codec& codec = cheap_select_ ? *cheap_codec_ : *codec_;
  for (Unit& u : st->units) {
    u.state.density_scale = density_scale_;
    OSPREY_RETURN_IF_ERROR(codec.Encode(grad + u.begin, u.size, &u.state, &u.encoded));
  }
  if (st->units.size() == 1) {
    // Hand the payload vector to the Buffer (no copy); the next Encode allocates a new one,
    // which for a compressed frame is small.
    *meta = st->units[0].encoded.meta;
    *values = Buffer::FromVector(std::move(st->units[0].encoded.payload));
    st->units[0].encoded.payload = {};
    return Status::OK();
  }
  // Several units: one frame for the message, laid out as if the message had been encoded at
  // once (encoded.h): sparse indices shifted by the unit's offset, all indices before all
  // values; onebit all scales before all sign words (units hold whole chunks and words); dense
  // casts back to back.
  *meta = st->units[0].encoded.meta;
  meta->length = n;
  const bool sparse = IsSparseCodec(meta->codec);
  const bool onebit = meta->codec == codec::CodecId::kOneBit;
  size_t count = 0, scales = 0, total = 0;
  for (const Unit& x : st->units) {
    count += x.encoded.meta.count;
    if (onebit) scales += (x.encoded.meta.length + meta->chunk - 1) / meta->chunk;
    total += x.encoded.payload.size();
  }
  meta->count = sparse ? count : n;
  *values = Buffer::Allocate(total);
  uint8_t* head = values->mutable_data();
  uint8_t* tail = head + (sparse ? 4 * count : onebit ? 4 * scales : total);
  for (size_t u = 0; u < st->units.size(); ++u) {
    const codec::Encoded& e = st->units[u].encoded;
    const uint8_t* p = e.payload.data();
    if (sparse) {
      const uint32_t off = static_cast<uint32_t>(st->units[u].begin);
      for (size_t i = 0; i < e.meta.count; ++i, head += 4) {
        uint32_t idx;
        std::memcpy(&idx, p + 4 * i, 4);
        idx += off;
        std::memcpy(head, &idx, 4);
      }
      size_t vbytes = e.payload.size() - 4 * e.meta.count;
      std::memcpy(tail, p + 4 * e.meta.count, vbytes);
      tail += vbytes;
    } else if (onebit) {
      size_t sbytes = 4 * ((e.meta.length + meta->chunk - 1) / meta->chunk);
      std::memcpy(head, p, sbytes);
      head += sbytes;
      std::memcpy(tail, p + sbytes, e.payload.size() - sbytes);
      tail += e.payload.size() - sbytes;
    } else {
      std::memcpy(head, p, e.payload.size());
      head += e.payload.size();
    }
  }
  return Status::OK();
}

std::vector<uint32_t> DenseCompressor::StartExternal(uint32_t table, int server, const Ranges& ranges, size_t n) {
  MutexLock lock(&mu_);
  Stream& st = streams_[{table, server}];
  if (st.length != n || st.ranges != ranges) {
    StartStream(table, server, ranges, n, &st);
    diagnostics_.StartStream({table, server}, ranges, n);
  }
  return diagnostics_.SamplePositions({table, server});
}

Status DenseCompressor::RecordExternal(uint32_t table, int server, size_t n, const codec::EncodedView& frame,
                                       const float* samples, size_t num_samples, double encode_seconds) {
  MutexLock lock(&mu_);
  if (frame.meta.codec != codec::CodecId::kNone) {
    auto it = streams_.find({table, server});
    if (it == streams_.end() || it->second.length != n) {
      return FailedPrecondition("compression: external stream (table " + std::to_string(table) + ", server " +
                                std::to_string(server) + ") not started for " + std::to_string(n) + " floats");
    }
    OSPREY_RETURN_IF_ERROR(diagnostics_.ObserveSamples({table, server}, samples, num_samples, n, frame));
  }
  ++stats_.messages;
  stats_.bytes_raw += n * sizeof(float);
  stats_.bytes_encoded += frame.size;
  if (frame.meta.codec == codec::CodecId::kNone) return Status::OK();
  auto it = streams_.find({table, server});
  stats_.encode_seconds += encode_seconds;
  ++stats_.compressed_messages;
  stats_.last_density = n > 0 ? static_cast<double>(frame.meta.count) / static_cast<double>(n) : 1.0;
  RecordDensity(it->second.step++, frame.meta.count, n);
  return Status::OK();
}

CompressionStats DenseCompressor::stats() const {
  MutexLock lock(&mu_);
  CompressionStats out = stats_;
  auto density = [](const StepCount& c) {
    return c.length > 0 ? static_cast<double>(c.selected) / static_cast<double>(c.length) : 1.0;
  };
  for (const auto& [step, count] : samples_) {
    if (step != last_step_) out.density_trajectory.push_back({step, density(count)});
  }
  if (last_.length > 0) out.density_trajectory.push_back({last_step_, density(last_)});
  out.diagnostics = diagnostics_.Summary();
  return out;
}

double DenseCompressor::encode_seconds() const {
  MutexLock lock(&mu_);
  return stats_.encode_seconds;
}

std::string DenseCompressor::warning() const {
  MutexLock lock(&mu_);
  return CompressionWarning(diagnostics_.Summary());
}

}  // namespace osprey::worker
