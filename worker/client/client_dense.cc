// The dense calls of Client: every PullDense / PushDense / InitDense is one DenseCall, sent as
// one message per server that owns chunks of the table (dense_routes.h).
#include <cstring>

#include "worker/client/client.h"
#include "worker/client/push_parts.h"

namespace osprey::worker {
namespace {

// Copies one server's chunks into the caller's table-sized array.
class DenseRangesSink final : public ReplySink {
 public:
  // The reply holds the route's chunks [begin, end) in order (a pull part: some of them).
  DenseRangesSink(float* out, const DenseRoute* route, size_t begin, size_t end)
      : out_(out), route_(route), begin_(begin), end_(end) {}
  void Deliver(Buffer reply) override {
    const uint8_t* src = reply.data();
    for (size_t i = begin_; i < end_; ++i) {
      const auto& [first, len] = route_->ranges[i];
      std::memcpy(out_ + first, src, len * sizeof(float));
      src += len * sizeof(float);
    }
  }

 private:
  float* const out_;
  const DenseRoute* const route_;  // owned by the client
  const size_t begin_, end_;
};

// Hands the reply frame (the whole table, in order) to the caller's Buffer: no copy, unless the
// transport delivered it misaligned for floats.
class DenseFrameSink final : public ReplySink {
 public:
  explicit DenseFrameSink(Buffer* out) : out_(out) {}
  void Deliver(Buffer reply) override {
    if (reinterpret_cast<uintptr_t>(reply.data()) % alignof(float) == 0) {
      *out_ = std::move(reply);
    } else {
      *out_ = Buffer::Copy(reply.data(), reply.size());
    }
  }

 private:
  Buffer* const out_;
};

}  // namespace

Ticket Client::PullDense(uint32_t table, float* out, int64_t clock) {
  DenseCall c;
  c.op = proto::OP_PULL_DENSE;
  c.table = table;
  c.clock = clock;
  c.out = out;
  return Dense(c);
}

Ticket Client::PullDense(uint32_t table, Buffer* out, int64_t clock) {
  DenseCall c;
  c.op = proto::OP_PULL_DENSE;
  c.table = table;
  c.clock = clock;
  c.out_buffer = out;
  return Dense(c);
}

Ticket Client::PullDense(uint32_t table, float* out, int64_t clock, const std::vector<bool>& servers) {
  DenseCall c;
  c.op = proto::OP_PULL_DENSE;
  c.table = table;
  c.clock = clock;
  c.servers = &servers;
  c.out = out;
  return Dense(c);
}

Ticket Client::PushDense(uint32_t table, const float* grads, int64_t clock, uint64_t version) {
  DenseCall c;
  c.op = proto::OP_PUSH_DENSE;
  c.table = table;
  c.clock = clock;
  c.version = version;
  c.in = grads;
  return Dense(c);
}

Ticket Client::PushDense(uint32_t table, const float* grads, int64_t clock, uint64_t version,
                         const std::vector<bool>& servers) {
  DenseCall c;
  c.op = proto::OP_PUSH_DENSE;
  c.table = table;
  c.clock = clock;
  c.version = version;
  c.servers = &servers;
  c.in = grads;
  return Dense(c);
}

Ticket Client::PushDense(uint32_t table, const Buffer& grads, int64_t clock, uint64_t version) {
  DenseCall c;
  c.op = proto::OP_PUSH_DENSE;
  c.table = table;
  c.clock = clock;
  c.version = version;
  c.in_buffer = &grads;
  return Dense(c);
}

Ticket Client::InitDense(uint32_t table, const float* values) {
  DenseCall c;
  c.op = proto::OP_INIT_DENSE;
  c.table = table;
  c.in = values;
  return Dense(c);
}

Status Client::CheckDenseCall(const DenseCall& c) const {
  OSPREY_RETURN_IF_ERROR(CheckTable(c.table, /*sparse=*/false));
  const proto::TableSpec& spec = map_.tables(c.table);
  const bool pull = c.op == proto::OP_PULL_DENSE;
  if (!pull && c.op != proto::OP_PUSH_DENSE && c.op != proto::OP_INIT_DENSE) {
    return InvalidArgument("dense call to table '" + spec.name() + "': op " + std::to_string(c.op) +
                           " is not a dense pull, push or init");
  }
  if (c.servers != nullptr && c.servers->size() != static_cast<size_t>(map_.server_endpoints_size())) {
    return InvalidArgument(std::string(pull ? "dense pull" : "dense push") + " to table '" + spec.name() +
                           "': server mask has " + std::to_string(c.servers->size()) + " entries for " +
                           std::to_string(map_.server_endpoints_size()) + " servers");
  }
  if (!pull && c.in_buffer != nullptr && c.in_buffer->size() != spec.size() * sizeof(float)) {
    return InvalidArgument("dense push to table '" + spec.name() + "': buffer has " +
                           std::to_string(c.in_buffer->size()) + " bytes, the table needs " +
                           std::to_string(spec.size() * sizeof(float)));
  }
  if (pull ? (c.out == nullptr && c.out_buffer == nullptr) : (c.in == nullptr && c.in_buffer == nullptr)) {
    return InvalidArgument("dense call to table '" + spec.name() + "' has no " + (pull ? "output" : "input"));
  }
  return Status::OK();
}

Ticket Client::Dense(const DenseCall& call) {
  Status bad = CheckDenseCall(call);
  Ticket ticket = requests_.Open(call.op, call.table, bad);
  if (!bad.ok()) return ticket;
  const std::vector<DenseRoute>& routes = dense_routes_[call.table];
  const uint64_t size = map_.tables(call.table).size();
  // A pull into a Buffer: one server's reply that is the whole table in order is taken as it is;
  // anything else lands in a Buffer of the table's size, like a pull into a float array.
  float* out = call.out;
  Buffer* out_frame = nullptr;
  if (call.out_buffer != nullptr) {
    if (routes.size() == 1 && routes[0].contiguous && routes[0].floats == size) {
      out_frame = call.out_buffer;
    } else {
      *call.out_buffer = Buffer::Allocate(size * sizeof(float));
      out = reinterpret_cast<float*>(call.out_buffer->mutable_data());
    }
  }
  // Init values always go as fp32.
  const std::shared_ptr<PushEncoder> encoder =
      call.op == proto::OP_PUSH_DENSE ? EncoderOf(call.table) : nullptr;
  for (const DenseRoute& route : routes) {
    if (!SendDenseRoute(ticket, call, route, out, out_frame, encoder.get())) break;
  }
  return ticket;
}

bool Client::SendDenseRoute(Ticket ticket, const DenseCall& call, const DenseRoute& route, float* out,
                            Buffer* out_frame, PushEncoder* encoder) {
  const int s = route.server;
  // Masked out: a push skips the server; a pull sends it an empty pull that only carries the
  // clock (no keys, no values back), so the server still sees this worker's progress.
  const bool clock_only = call.servers != nullptr && !(*call.servers)[s];
  const bool pull = call.op == proto::OP_PULL_DENSE;
  if (clock_only && !pull) return true;
  proto::Header h;
  h.set_op(call.op);
  h.set_table(call.table);
  h.set_clock(call.clock);
  h.set_version(call.version);
  Buffer keys = clock_only ? Buffer() : route.keys;
  if (pull) {
    if (clock_only) {
      Send(ticket, s, std::move(h), std::move(keys), Buffer(), 0, nullptr);
      return true;
    }
    if (out_frame != nullptr) {  // the whole table from one server, taken as it comes
      Send(ticket, s, std::move(h), std::move(keys), Buffer(), route.floats * sizeof(float),
           std::make_unique<DenseFrameSink>(out_frame));
      return true;
    }
    // A large reply comes in parts of whole chunks (push_parts.h, "Pulls in parts").
    const std::vector<size_t> starts = PartStarts(route.chunk_floats, options_.pull_part_bytes, kMaxClientPushParts);
    for (size_t p = 0; p < starts.size(); ++p) {
      const size_t end = p + 1 < starts.size() ? starts[p + 1] : route.ranges.size();
      uint64_t floats = 0;
      for (size_t i = starts[p]; i < end; ++i) floats += route.chunk_floats[i];
      Send(ticket, s, h, keys.Slice(starts[p] * sizeof(uint64_t), (end - starts[p]) * sizeof(uint64_t)), Buffer(),
           floats * sizeof(float), std::make_unique<DenseRangesSink>(out, &route, starts[p], end));
    }
    return true;
  }
  const float* src = call.in_buffer != nullptr ? call.in_buffer->as<float>() : call.in;
  PushValues v;
  v.table = call.table;
  v.server = s;
  v.floats = route.floats;
  if (route.contiguous) {
    const uint64_t first = route.ranges[0].first;
    v.base = src + first;
    v.first = first;
    if (call.in_buffer != nullptr) v.frame = call.in_buffer->Slice(first * sizeof(float), v.floats * sizeof(float));
  } else {
    v.base = src;
    v.ranges = route.ranges.data();
    v.num_ranges = route.ranges.size();
  }
  if (encoder == nullptr && call.op == proto::OP_PUSH_DENSE && options_.push_part_bytes > 0 &&
      route.ranges.size() > 1) {
    // The parts of a contiguous route are runs of it; of a scattered one, runs of its ranges.
    const std::vector<size_t> starts = PartStarts(route.chunk_floats, options_.push_part_bytes, kMaxClientPushParts);
    if (SendPushParts(ticket, s, h, keys, v, starts, &route.chunk_floats, 0)) {
      return true;
    }
  }
  Buffer values;
  if (encoder == nullptr) {
    values = v.Fp32Frame();
  } else if (Status es = encoder->Encode(v, &h, &values); !es.ok()) {
    requests_.Fail(ticket, es);
    return false;
  }
  Send(ticket, s, std::move(h), std::move(keys), std::move(values), 0, nullptr);
  return true;
}

const std::vector<DenseRoute>& Client::dense_routes(uint32_t table) const {
  static const std::vector<DenseRoute> kNone;
  return table < dense_routes_.size() ? dense_routes_[table] : kNone;
}

Ticket Client::PushDenseEncoded(uint32_t table, const std::vector<EncodedDenseFrame>& frames, int64_t clock,
                                uint64_t version) {
  // Everything is checked before the first message goes out, so a bad frame sends nothing.
  Status bad = CheckTable(table, /*sparse=*/false);
  std::vector<const DenseRoute*> routes(frames.size(), nullptr);
  for (size_t i = 0; bad.ok() && i < frames.size(); ++i) {
    const EncodedDenseFrame& f = frames[i];
    const std::string what = "encoded dense push to table '" + map_.tables(table).name() + "', server " +
                             std::to_string(f.server);
    for (const DenseRoute& r : dense_routes_[table]) {
      if (r.server == f.server) routes[i] = &r;
    }
    if (routes[i] == nullptr) {
      bad = InvalidArgument(what + ": the server holds no chunks of the table");
      break;
    }
    for (size_t j = 0; j < i; ++j) {
      if (frames[j].server == f.server) bad = InvalidArgument(what + ": two frames for the server");
    }
    if (Status v = codec::ValidateMeta(f.meta, f.payload.size(), routes[i]->floats); bad.ok() && !v.ok()) {
      bad = InvalidArgument(what + ": " + v.message());
    }
  }
  Ticket ticket = requests_.Open(proto::OP_PUSH_DENSE, table, bad);
  if (!bad.ok()) return ticket;
  for (size_t i = 0; i < frames.size(); ++i) {
    const EncodedDenseFrame& f = frames[i];
    proto::Header h;
    h.set_op(proto::OP_PUSH_DENSE);
    h.set_table(table);
    h.set_clock(clock);
    h.set_version(version);
    // The header fields DenseCompressor::Encode sets: only the codec for plain fp32.
    h.set_codec(static_cast<proto::Codec>(f.meta.codec));
    if (f.meta.codec != codec::CodecId::kNone) {
      h.set_codec_value_type(static_cast<uint32_t>(f.meta.value_type));
      h.set_codec_count(f.meta.count);
      h.set_codec_chunk(f.meta.chunk);
    }
    Send(ticket, f.server, std::move(h), routes[i]->keys, f.payload, 0, nullptr);
  }
  return ticket;
}

}  // namespace osprey::worker
