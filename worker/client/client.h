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
// table and server). A call sends ONE message per server it involves: sparse keys are cut by
// server by one KeyRouter (key_router.h), dense tables by chunk (dense_routes.h). At most
// options.max_inflight messages are outstanding; a call that would exceed it blocks until replies
// arrive (or fails with DeadlineExceeded after timeout_ms). The tickets, replies and timeouts are
// kept by a RequestTable (request_table.h); what a push's values look like on the wire is its
// table's PushEncoder (push_encoder.h; SetEncoder).
//
// Memory: calls that take raw pointers copy `keys` and input floats into per-server frames before
// they return. Calls that take Buffers (the zero-copy Push / PushByServer, PushDense of a Buffer,
// DenseCall::in_buffer) send slices of them as they are wherever no gather or cast is needed
// (fp32 rows of one server or of one server's contiguous run; contiguous dense chunks): the
// message then holds a reference, so the caller's memory stays alive until the transport is done
// with it, and the bytes must not change after the call (common/buffer.h). Output arrays (`out`)
// must stay valid until Wait() returns; after Wait() returns -- with any status -- the client
// never touches them again. Pulls into a float array copy each reply once, into the array;
// PullDense(table, Buffer*) hands over the reply frame instead when it can.
//
// Threading: all methods are thread-safe. The transport's I/O thread only matches each reply to
// its request (no payload copy); Wait() copies a pull's replies into `out` on the waiting thread,
// once every server replied. So threads waiting on different pulls copy in parallel, and replies
// of a failed ticket are never copied. Every Ticket must be waited on exactly once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/codec/encoded.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport.h"
#include "proto/wire.h"
#include "worker/client/dense_routes.h"
#include "worker/client/key_router.h"
#include "worker/client/push_encoder.h"
#include "worker/client/request_table.h"

namespace osprey::worker {

struct ClientOptions {
  int worker_rank = 0;
  int timeout_ms = 30000;
  int max_inflight = 64;
  // Server failover (client_failover.cc): stamped on every request (Header.worker_incarnation)
  // so servers drop re-sent pushes they already applied; 0: not stamped.
  uint64_t incarnation = 0;
  // How long a request to a server the coordinator reports dead waits for its replacement
  // (cluster.server_replace_timeout_ms) before its ticket fails.
  int replace_timeout_ms = 0;
  // A fp32 push message to one server with at least twice this many bytes of values is sent in
  // parts of about this size (push_parts.h; job YAML client.push_part_bytes, default 1 MiB), so
  // the server applies one part while the next is on the wire. 0: never (the library default).
  size_t push_part_bytes = 0;
  // A sparse pull from one server whose reply has at least twice this many bytes of rows is asked
  // for in parts of about this size (pull requests of their own, one after the other on the
  // wire), so the server reads part p + 1's rows while part p's reply is on the wire (push_parts.h;
  // job YAML client.pull_part_bytes, default 1 MiB). 0: never (the library default).
  size_t pull_part_bytes = 0;
  // Wait takes the replies itself when no other thread is doing so (Transport::ReceiveUntil):
  // a reply then wakes the waiting thread straight from the transport, not through its I/O
  // thread. Off: replies are always taken by the I/O thread, which wakes the waiter.
  bool receive_in_wait = true;
};

// One call on a dense table: what PullDense / PushDense / InitDense build, for callers that need
// more than those (a server mask, a pull into a Buffer with a clock, ...).
struct DenseCall {
  proto::Op op = proto::OP_PULL_DENSE;  // OP_PULL_DENSE, OP_PUSH_DENSE or OP_INIT_DENSE
  uint32_t table = 0;
  int64_t clock = 0;     // the worker's step (bsp / ssp servers hold pulls until it is ready)
  uint64_t version = 0;  // push: the parameter version the gradient was computed from
  // One entry per server, or null for all. Push / init: only the messages of servers s with
  // (*servers)[s] true are sent (a GPU host group splits the servers among its workers). Pull:
  // only their chunks are pulled (the other floats of `out` are left as they are); every other
  // server holding chunks of the table gets an empty pull carrying `clock`, since a bsp/ssp
  // server learns a worker's progress from its pulls, so Wait returns once every server of the
  // table is ready for `clock`, as for a full pull. Must stay valid during the call only.
  const std::vector<bool>* servers = nullptr;
  // Push / init: the table's floats (table size), from `in`, or from `in_buffer` (size * 4 bytes;
  // sent as slices of it where a server's chunks are contiguous). Read during the call only
  // (the Buffer's slices may live on in the messages).
  const float* in = nullptr;
  const Buffer* in_buffer = nullptr;
  // Pull: into `out` (table size floats), or into *out_buffer: after Wait() returns OK it holds
  // the table's floats; when one server holds every chunk of the table it is that server's reply
  // frame itself (no client-side copy), otherwise a new Buffer the replies are assembled in
  // (contents unspecified after an error). Must stay valid until Wait() returns.
  float* out = nullptr;
  Buffer* out_buffer = nullptr;
};

// One server's message of a dense push, encoded by the caller (the GPU worker encodes its dense
// gradient on the device, worker/gpu/device_encoder.h): exactly what the table's PushEncoder
// would have produced for that server's message -- its header meta and its values frame.
struct EncodedDenseFrame {
  int server = 0;
  codec::EncodedMeta meta;  // codec kNone: plain fp32 (only the header's codec is set, as fp32 pushes)
  Buffer payload;           // the values frame, sent as it is
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
  // Pull with the keys already grouped by owner, as PushByServer's (counts per server, summing to
  // n): each server's run of keys is sent as it is and its reply lands as one contiguous run of
  // `out` (no hashing, no per-row scatter). Counts that do not sum to n fail the ticket
  // (InvalidArgument); a key sent to a server that does not own it is refused by that server.
  Ticket PullByServer(uint32_t table, const uint64_t* keys, size_t n, float* out, const int32_t* counts,
                      int64_t clock = 0);
  // Sparse gradients: grads[i*dim ..) is the gradient of keys[i]. `clock` is the worker's step;
  // `version` the parameter version this gradient was computed from (for staleness).
  Ticket Push(uint32_t table, const uint64_t* keys, size_t n, const float* grads,
              int64_t clock = 0, uint64_t version = 0);
  // Zero-copy push for callers that own their memory (pinned or registered staging): `keys`
  // holds n u64 keys and `rows` their n * dim floats. With one server and fp32 rows, the two
  // Buffers are the message's keys and values frames as they are (with several servers the
  // keys are partitioned and gathered as Push does). InvalidArgument when the sizes disagree
  // (keys not whole u64, rows not n * dim floats).
  Ticket Push(uint32_t table, const Buffer& keys, const Buffer& rows, int64_t clock = 0, uint64_t version = 0);
  // Push with the keys already grouped by owner (as common/placement.h's ServerForKey places them,
  // e.g. cuda::GroupKeysByServer): keys[0, counts[0]) belong to server 0, the next counts[1] to
  // server 1, and so on (`counts` has one entry per server and sums to n). Each server's keys and
  // rows are sent as one contiguous slice: no hashing and no per-row gather. Same semantics
  // as Push otherwise. Counts that do not sum to n fail the ticket (InvalidArgument); a key sent
  // to a server that does not own it is refused by that server (FailedPrecondition naming it).
  Ticket PushByServer(uint32_t table, const uint64_t* keys, size_t n, const float* grads, const int32_t* counts,
                      int64_t clock = 0, uint64_t version = 0);
  // The same from Buffers (sizes as for the zero-copy Push): with fp32 rows each server's keys
  // and rows go as slices of `keys` and `rows`, without a copy.
  Ticket PushByServer(uint32_t table, const Buffer& keys, const Buffer& rows, const int32_t* counts,
                      int64_t clock = 0, uint64_t version = 0);
  // Rows asked for as `type` (kFp16 / kBf16, whatever the table's pull codec) and delivered as
  // they came, 16-bit values into out[i*dim ..) for keys[i], for a caller that widens them itself
  // (a GPU worker, on the device: cuda::ScatterRowsWiden). Keys as Pull, or grouped by owner as
  // PullByServer when `counts` is not null. InvalidArgument for another type.
  Ticket PullCastRows(uint32_t table, const uint64_t* keys, size_t n, uint16_t* out, codec::ValueType type,
                      const int32_t* counts, int64_t clock = 0);
  // A push whose rows the caller already cast to `type` (kFp16 or kBf16, the bits of
  // codec::CastRowValues, e.g. cuda::CastRowValues on a GPU): rows[i*dim ..) are keys[i]'s
  // gradient as 16-bit values. Sent as the fp16 / bf16 row frames a row-cast encoder makes (the
  // server widens them), bypassing the table's encoder; one message per server, grouped by
  // `counts` as PushByServer when not null, else routed as Push. InvalidArgument for another type.
  Ticket PushCastRows(uint32_t table, const uint64_t* keys, size_t n, const uint16_t* rows, codec::ValueType type,
                      const int32_t* counts, int64_t clock = 0, uint64_t version = 0);

  // Any dense call (see DenseCall). InvalidArgument for a sparse or unknown table, a server mask
  // of the wrong length, a Buffer of the wrong size, or a missing input / output.
  Ticket Dense(const DenseCall& call);
  // Dense: the whole table (table size floats).
  Ticket PullDense(uint32_t table, float* out, int64_t clock = 0);
  // Into a Buffer, without a client-side copy where it can (DenseCall::out_buffer).
  Ticket PullDense(uint32_t table, Buffer* out, int64_t clock = 0);
  // Only the chunks of the servers s with servers[s] true (DenseCall::servers).
  Ticket PullDense(uint32_t table, float* out, int64_t clock, const std::vector<bool>& servers);
  Ticket PushDense(uint32_t table, const float* grads, int64_t clock = 0, uint64_t version = 0);
  // Only the messages for servers s with servers[s] true (DenseCall::servers).
  Ticket PushDense(uint32_t table, const float* grads, int64_t clock, uint64_t version,
                   const std::vector<bool>& servers);
  // Zero-copy: `grads` (table size floats) is sent as slices of the Buffer.
  Ticket PushDense(uint32_t table, const Buffer& grads, int64_t clock = 0, uint64_t version = 0);
  // Pushes dense messages the caller encoded itself, one per frame, to the frame's server, with
  // that server's chunk ids as the keys frame; the table's encoder is not called. The wire
  // message is the one PushDense would send had the encoder returned this frame. Each frame must
  // cover the server's whole share of the table (meta.length = its route's floats) and pass
  // codec::ValidateMeta. InvalidArgument (the ticket fails, nothing is sent) for a sparse or
  // unknown table, a server without chunks of it, two frames for one server, or a bad frame.
  Ticket PushDenseEncoded(uint32_t table, const std::vector<EncodedDenseFrame>& frames, int64_t clock = 0,
                          uint64_t version = 0);
  // The routes of dense `table` (the servers' chunk ranges; dense_routes.h); empty for a sparse
  // or unknown table. What a caller encoding its own dense messages cuts its gradient by.
  const std::vector<DenseRoute>& dense_routes(uint32_t table) const;
  // Gives dense chunks their initial values unless another worker already did (first wins).
  // Init messages always go as fp32 (no encoder).
  Ticket InitDense(uint32_t table, const float* values);

  Status Wait(Ticket ticket);
  // Waits every one of `tickets` (none may be waited otherwise); the first error, or OK. Cheaper
  // than a Wait per ticket for many requests in flight (RequestTable::WaitAll).
  Status WaitAll(const std::vector<Ticket>& tickets) { return requests_.WaitAll(tickets); }
  // True once Wait(ticket) would return at once; false after `max_ms` (RequestTable::WaitReady).
  bool WaitReady(Ticket ticket, int max_ms) { return requests_.WaitReady(ticket, max_ms); }

  // Encodes the values of every later push to `table` (sparse rows and dense chunks alike) with
  // `encoder`, which the client owns from now on; nullptr: plain fp32 (the default). The encoder
  // lives until it is replaced or the client is destroyed (pushes in flight keep the one they
  // started with), so a caller may keep a raw pointer to it for its statistics until then.
  // InvalidArgument for an unknown table, or one the encoder refuses (PushEncoder::CheckTable);
  // the table's encoder is then unchanged. Thread-safe; set it before training starts if every
  // push should see it.
  Status SetEncoder(uint32_t table, std::unique_ptr<PushEncoder> encoder);
  // Asks the servers to send the rows of every later Pull of sparse `table` as `codec` (CODEC_NONE,
  // CODEC_FP16 or CODEC_BF16, cast as MakeRowCastEncoder casts, from the servers' fp32 weights:
  // half the bytes); Wait widens them back to fp32 into `out`, exactly (every fp16 / bf16 value
  // is a float). The model then computes with the rounded weights; the servers keep and update
  // fp32. InvalidArgument for a dense or unknown table or another codec. Thread-safe.
  Status SetSparsePullCodec(uint32_t table, proto::Codec codec);

  // Highest parameter version any reply of `table` reported.
  uint64_t version(uint32_t table) const { return requests_.version(table); }
  ClientStats stats() const { return requests_.stats(); }

  // Server failover (client_failover.cc): the coordinator's view, from each heartbeat reply. A
  // server reported dead holds its requests' deadlines for options.replace_timeout_ms; a server
  // rank with a new incarnation (a replacement: new endpoint, or the same one restarted) is
  // connected to, and every unanswered request to it is re-sent (same request id; the server
  // drops pushes it already applied). Thread-safe.
  void OnClusterState(const proto::ClusterState& state) EXCLUDES(route_mu_);
  // Requests re-sent to replacements so far.
  uint64_t requests_resent() const { return requests_.resent(); }
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // bsp rollback (client_failover.cc; coordinator/job_state_rollback.cc). OnClusterState notes
  // the job's rollback generation and, once every server rolled back, its cut clock.
  // RollbackAnnounced: a generation later than the one this client stamps was announced (ready
  // or not). ReadyRollback: it is ready; *generation and *clock say which and to what clock.
  // SetRollbackGeneration: the generation stamped in every later request (Header
  // rollback_generation); servers refuse requests of an earlier one. Thread-safe.
  bool RollbackAnnounced() const EXCLUDES(route_mu_);
  bool ReadyRollback(uint64_t* generation, int64_t* clock) const EXCLUDES(route_mu_);
  void SetRollbackGeneration(uint64_t generation) {
    rollback_generation_.store(generation, std::memory_order_release);
  }
  uint64_t rollback_generation() const { return rollback_generation_.load(std::memory_order_acquire); }

  // Exact worker resume (client_resume.cc, worker/resume_plan.h). AppliedClocks asks server
  // `server` what it took from this client's worker rank (OP_APPLIED_CLOCKS): after Wait returns
  // OK, *out holds the reply's (number of tables + 1) words, as proto/osprey.proto lays them out.
  Ticket AppliedClocks(int server, std::vector<int64_t>* out);
  // From now on a push to (server s, table t) whose clock is <= floors[s][t] is not sent (that
  // server already took that step's push from this rank); its part of the ticket counts as done.
  // Missing entries: no floor. Thread-safe.
  void SetPushFloors(std::vector<std::vector<int64_t>> floors) EXCLUDES(floor_mu_);
  // Push messages SetPushFloors kept from being sent.
  uint64_t pushes_suppressed() const { return suppressed_.load(std::memory_order_relaxed); }

 private:
  // One sparse push, whichever public call made it.
  struct SparsePush {
    uint32_t table = 0;
    const uint64_t* keys = nullptr;
    size_t n = 0;
    const float* grads = nullptr;
    const int32_t* counts = nullptr;     // grouped by server (PushByServer), or null: route by hash
    const Buffer* key_buffer = nullptr;  // zero-copy calls: the Buffers behind keys and grads
    const Buffer* row_buffer = nullptr;
    int64_t clock = 0;
    uint64_t version = 0;
  };

  Ticket SendSparsePush(const SparsePush& push);
  // Pull and PullByServer: counts null routes the keys by hash.
  // Pull and PullByServer (raw kFp32: rows widened to fp32 into `out`, a float array) and
  // PullCastRows (raw kFp16 / kBf16: asked for as that type and copied into `out` as they came).
  Ticket SendSparsePull(uint32_t table, const uint64_t* keys, size_t n, void* out, const int32_t* counts,
                        int64_t clock, codec::ValueType raw = codec::ValueType::kFp32);
  // Checks a zero-copy push's Buffers against the table (keys whole u64, rows n * dim floats).
  // PushCastRows / PullCastRows (`what`: "push" / "pull"): a sparse table, type kFp16 or kBf16,
  // and a rows array when there are keys.
  Status CheckCastRows(uint32_t table, codec::ValueType type, size_t n, const void* rows, const char* what) const;
  Status CheckPushBuffers(uint32_t table, const Buffer& keys, const Buffer& rows) const;
  Status CheckDenseCall(const DenseCall& call) const;
  // Sends one dense message (one route of `call`); false when its encoder failed the ticket.
  bool SendDenseRoute(Ticket ticket, const DenseCall& call, const DenseRoute& route, float* out,
                      Buffer* out_frame, PushEncoder* encoder);
  // Admits one message with the request table and sends it; failures are recorded on the ticket.
  void Send(Ticket ticket, int server, proto::Header header, Buffer keys, Buffer values,
            size_t expect_bytes, std::unique_ptr<ReplySink> sink);
  // Sends the push message `v` (keys frame `keys`) as the parts starting at key indexes `starts`
  // (push_parts.h; key i has (*key_floats)[i] floats, or floats_per_key when null), each copied,
  // sliced or encoded (by `encoder`, one that EncodesPartsAlone, when not null) only when it goes
  // out, so part p + 1's copy overlaps the sending of part p. False, and nothing sent, when there
  // is one part or a value is not finite (the caller then sends it whole).
  bool SendPushParts(Ticket ticket, int server, const proto::Header& header, const Buffer& keys,
                     const PushValues& v, const std::vector<size_t>& starts,
                     const std::vector<uint64_t>* key_floats, size_t floats_per_key,
                     PushEncoder* encoder = nullptr);
  void OnReply(Message&& msg);
  // What a ticket was for, for error messages (built only when an error is reported).
  std::string Describe(proto::Op op, uint32_t table) const;
  Status CheckTable(uint32_t table, bool sparse) const;
  std::shared_ptr<PushEncoder> EncoderOf(uint32_t table) const EXCLUDES(codec_mu_);

  const ClientOptions options_;
  std::unique_ptr<Transport> transport_;
  const proto::ShardMap map_;
  const KeyRouter router_;
  const std::vector<std::vector<DenseRoute>> dense_routes_;  // by table id
  PeerId PeerOf(int server) const EXCLUDES(route_mu_);

  mutable Mutex route_mu_;
  std::vector<PeerId> peers_ GUARDED_BY(route_mu_);  // by server rank; a replacement's replaces it
  std::vector<std::string> endpoints_ GUARDED_BY(route_mu_);
  std::vector<uint64_t> incarnations_ GUARDED_BY(route_mu_);  // 0: not seen yet
  std::atomic<uint64_t> epoch_{0};
  std::atomic<uint64_t> rollback_generation_{0};      // stamped in requests
  uint64_t announced_generation_ GUARDED_BY(route_mu_) = 0;
  uint64_t ready_generation_ GUARDED_BY(route_mu_) = 0;
  int64_t ready_clock_ GUARDED_BY(route_mu_) = 0;
  RequestTable requests_;

  // True when the push `header` to `server` is below its floor (SetPushFloors): not to be sent.
  bool BelowFloor(int server, const proto::Header& header) const EXCLUDES(floor_mu_);
  mutable Mutex floor_mu_;
  std::vector<std::vector<int64_t>> floors_ GUARDED_BY(floor_mu_);  // [server][table]
  std::atomic<bool> has_floors_{false};
  mutable std::atomic<uint64_t> suppressed_{0};

  mutable Mutex codec_mu_;
  std::vector<std::shared_ptr<PushEncoder>> encoders_ GUARDED_BY(codec_mu_);  // by table id; null: fp32
  std::vector<proto::Codec> pull_codecs_ GUARDED_BY(codec_mu_);  // by table id: wire type of pulled rows
};

}  // namespace osprey::worker
