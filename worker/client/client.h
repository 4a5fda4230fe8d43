// Client: the parameter-server client that workers -- Osprey's own and users' training code --
// embed. It talks to every server of a shard map through one Transport.
//
//   Client client(options, std::move(transport), shard_map);
//   OSPREY_RETURN_IF_ERROR(client.Start());
//   Ticket t = client.Pull(table, keys, n, rows);     // asynchronous
//   ... compute ...
//   OSPREY_RETURN_IF_ERROR(client.Wait(t));           // rows are filled now
//
// Every call is asynchronous and returns a Ticket; Wait(ticket) blocks until every server involved
// replied, or a reply was an error, or options.timeout_ms passed (DeadlineExceeded naming the op,
// table and server). A call sends ONE message per server it involves: keys are partitioned by the
// placement function (common/placement.h), dense tables by chunk. At most options.max_inflight
// messages are outstanding; a call that would exceed it blocks until replies arrive (or fails
// with DeadlineExceeded after timeout_ms).
//
// Memory: `keys` and input floats are copied into per-server frames before the call returns,
// except for PushDense(table, Buffer), which sends slices of the Buffer without copying. Output
// arrays (`out`) must stay valid until Wait() returns; after Wait() returns -- with any status --
// the client never touches them again. Pulls into a float array copy each reply once, into the
// array; PullDense(table, Buffer*) hands over the reply frame instead when it can.
//
// Threading: all methods are thread-safe. The transport's I/O thread only matches each reply to
// its request (under the client's lock, no payload copy); a pull's reply frames are kept as they
// arrived and Wait() copies them into `out` on the waiting thread, outside the lock, once every
// server replied. So threads waiting on different pulls copy in parallel, the I/O thread is free
// to take the next reply meanwhile, and replies of a failed ticket are never copied. Every Ticket
// must be waited on exactly once (its bookkeeping, and the reply frames it holds, are released by
// Wait).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/transport.h"
#include "proto/wire.h"

namespace osprey::worker {

using Ticket = uint64_t;

// Encodes the fp32 gradient of one dense push message (the chunks of `table` that server
// `server` owns, concatenated: `n` floats at `grad`) into `values`, and records the codec and its
// meta in `header` (codec, codec_value_type, codec_count, codec_chunk). Called on the thread that
// issues the push; must not keep `grad`. An error fails the push's ticket.
using DenseEncoder = std::function<Status(uint32_t table, int server, const float* grad, size_t n,
                                          proto::Header* header, Buffer* values)>;

struct ClientOptions {
  int worker_rank = 0;
  int timeout_ms = 30000;
  int max_inflight = 64;
};

struct ClientStats {
  uint64_t requests = 0;
  uint64_t bytes_pushed = 0;  // all frames of push/init requests
  uint64_t bytes_pulled = 0;  // values frames of pull replies
  uint64_t errors = 0;
};

class Client {
 public:
  Client(const ClientOptions& options, std::unique_ptr<Transport> transport,
         const proto::ShardMap& shard_map);
  ~Client();

  // Connects to every server of the shard map and starts the transport.
  Status Start();
  // Stops the transport; outstanding tickets fail with Aborted.
  void Stop();

  // Table id of `name`; NotFound listing the tables when unknown.
  StatusOr<uint32_t> TableId(const std::string& name) const;
  const proto::ShardMap& shard_map() const { return map_; }

  // Sparse rows: out[i*dim .. (i+1)*dim) receives the row of keys[i] (duplicates allowed).
  // `clock` is the worker's step the pull is for (the server may hold it until that step's
  // parameters are ready, per the table's consistency mode).
  Ticket Pull(uint32_t table, const uint64_t* keys, size_t n, float* out, int64_t clock = 0);
  // Sparse gradients: grads[i*dim ..) is the gradient of keys[i]. `clock` is the worker's step;
  // `version` the parameter version this gradient was computed from (for staleness).
  Ticket Push(uint32_t table, const uint64_t* keys, size_t n, const float* grads,
              int64_t clock = 0, uint64_t version = 0);
  // Push with the keys already grouped by owner (as common/placement.h's ServerForKey places them,
  // e.g. cuda::GroupKeysByServer): keys[0, counts[0]) belong to server 0, the next counts[1] to
  // server 1, and so on (`counts` has one entry per server and sums to n). Each server's keys and
  // rows are sent as one contiguous slice: no hashing and no per-row copies here. Same semantics
  // as Push otherwise. Counts that do not sum to n fail the ticket (InvalidArgument); a key sent
  // to a server that does not own it is refused by that server (FailedPrecondition naming it).
  Ticket PushByServer(uint32_t table, const uint64_t* keys, size_t n, const float* grads, const int32_t* counts,
                      int64_t clock = 0, uint64_t version = 0);
  // Dense: the whole table (table size floats).
  Ticket PullDense(uint32_t table, float* out, int64_t clock = 0);
  // The same into a Buffer, without a client-side copy where it can: after Wait() returns OK,
  // *out holds the table's size floats. When one server holds every chunk of the table (one
  // server, or a table of one chunk), *out is that server's reply frame itself; otherwise the
  // replies are assembled into a new Buffer. `out` must stay valid until Wait() returns; after
  // an error its contents are unspecified.
  Ticket PullDense(uint32_t table, Buffer* out, int64_t clock = 0);
  // Only the chunks of the servers s with servers[s] true are pulled into `out` (the floats of
  // the other chunks are left as they are; a GPU host group pulls its slice and all-gathers the
  // rest). Every other server that holds chunks of the table gets an empty pull carrying `clock`:
  // a bsp/ssp server learns a worker's progress from its pulls and holds the reply until `clock`
  // is ready, so Wait returns once every server of the table is ready for `clock`, as for a full
  // pull. `servers` has one entry per server.
  Ticket PullDense(uint32_t table, float* out, int64_t clock, const std::vector<bool>& servers);
  Ticket PushDense(uint32_t table, const float* grads, int64_t clock = 0, uint64_t version = 0);
  // Only the messages for servers s with servers[s] true (a GPU host group splits the servers
  // among its workers); the others are not sent. `servers` has one entry per server.
  Ticket PushDense(uint32_t table, const float* grads, int64_t clock, uint64_t version,
                   const std::vector<bool>& servers);
  // Zero-copy: `grads` (table size floats) is sent as slices of the Buffer.
  Ticket PushDense(uint32_t table, const Buffer& grads, int64_t clock = 0, uint64_t version = 0);
  // Gives dense chunks their initial values unless another worker already did (first wins).
  Ticket InitDense(uint32_t table, const float* values);

  Status Wait(Ticket ticket);

  // Sends the gradient rows of every later Push / PushByServer of sparse `table` as `codec`:
  // CODEC_NONE (fp32, the default), CODEC_FP16 or CODEC_BF16 (round to nearest even, finite
  // values beyond the format's range saturate to its largest finite value; half the bytes). The
  // server decodes them to fp32 before merging. InvalidArgument for a dense or unknown table or
  // another codec (rows of a sparse table are never sparsified). Not thread-safe with concurrent
  // pushes to the same table; call before training starts.
  Status SetSparseRowCodec(uint32_t table, proto::Codec codec);
  // Asks the servers to send the rows of every later Pull of sparse `table` as `codec` (CODEC_NONE,
  // CODEC_FP16 or CODEC_BF16, cast as above from the servers' fp32 weights: half the bytes); Wait
  // widens them back to fp32 into `out`, exactly (every fp16 / bf16 value is a float). The model
  // then computes with the rounded weights; the servers keep and update fp32. Errors and
  // threading as SetSparseRowCodec.
  Status SetSparsePullCodec(uint32_t table, proto::Codec codec);

  // Compresses every later PushDense of `table` with `encoder` (nullptr: plain fp32). Not
  // thread-safe with concurrent pushes to the same table; call before training starts.
  void SetDenseEncoder(uint32_t table, DenseEncoder encoder);

  // Highest parameter version any reply of `table` reported.
  uint64_t version(uint32_t table) const;
  ClientStats stats() const;

 private:
  struct Part;         // one outstanding message
  // The chunks of one dense table that one server owns, computed once per shard map.
  struct DenseRoute {
    int server = 0;
    Buffer keys;                                        // chunk ids (the keys frame)
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // (first float, floats) per chunk
    uint64_t floats = 0;
    bool contiguous = true;                             // chunks form one range of the table
  };
  struct TicketState;  // one call

  Ticket NewTicket(proto::Op op, uint32_t table, Status immediate = Status::OK());
  Ticket SendDense(proto::Op op, uint32_t table, const float* in, const Buffer* in_buffer,
                   float* out, int64_t clock, uint64_t version, const std::vector<bool>* servers = nullptr,
                   Buffer* out_buffer = nullptr);
  // What a ticket was for, for error messages (built only when an error is reported).
  std::string Describe(proto::Op op, uint32_t table) const;
  Status CheckTable(uint32_t table, bool sparse) const;
  // Registers `part` and sends it; failures are recorded on the ticket.
  void SendPart(Ticket ticket, int server, proto::Header header, Buffer keys, Buffer values,
                std::unique_ptr<Part> part);
  void OnReply(Message&& msg);
  // Copies (or hands over) one arrived pull reply into the caller's output; called by Wait.
  static void Deliver(Part* part);
  void FailTicketLocked(TicketState* t, const Status& s);
  // SetSparseRowCodec / SetSparsePullCodec: checks, then sets (*codecs)[table] under mu_.
  Status SetTableRowCodec(uint32_t table, proto::Codec codec, const char* verb,
                           std::vector<proto::Codec>* codecs);

  const ClientOptions options_;
  std::unique_ptr<Transport> transport_;
  const proto::ShardMap map_;
  std::vector<PeerId> peers_;        // by server rank
  std::unordered_map<PeerId, int> server_of_peer_;
  std::vector<DenseEncoder> dense_encoders_;  // by table id; set before use
  std::vector<proto::Codec> sparse_codecs_;   // by table id: wire type of sparse push rows; set before use
  std::vector<proto::Codec> pull_codecs_;     // by table id: wire type of sparse pull rows; set before use
  std::vector<std::vector<DenseRoute>> dense_routes_;  // by table id; immutable after construction

  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_request_id_ = 1;                                  // GUARDED_BY(mu_)
  Ticket next_ticket_ = 1;                                        // GUARDED_BY(mu_)
  std::unordered_map<uint64_t, std::unique_ptr<Part>> pending_;   // GUARDED_BY(mu_) by request id
  std::unordered_map<Ticket, std::unique_ptr<TicketState>> tickets_;  // GUARDED_BY(mu_)
  int inflight_ = 0;                                              // GUARDED_BY(mu_)
  bool stopped_ = false;                                          // GUARDED_BY(mu_)
  std::vector<uint64_t> versions_;                                // GUARDED_BY(mu_)
  ClientStats stats_;                                             // GUARDED_BY(mu_)
};

}  // namespace osprey::worker
