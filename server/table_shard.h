// TableShard: one table's part on one server: merge windows, the consistency mode, staleness
// policies, worker clocks, and the replies it owes: pulls held until their clock is ready and
// push acknowledgements held until their window is applied, answered through a Replier.
//
// Collaborators: a ConsistencyPolicy per mode (consistency_policy.h: implements the mode rules
// below), an Updater (updater.h: the optimizer step on the rows the Store hands out), the Store
// (storage only), the Replier (replier.h). All are borrowed except the policy and the updater.
//
// Mode rules (config::ConsistencyConfig; "progress" of a worker at this shard is the number of
// clocks it has finished here: a push with clock c sets it to >= c+1, a pull with clock c to >= c,
// since the client sends a step's pushes before the next step's pulls on the same connection):
//   bsp    pushes with clock c are merged into the window of clock c (a push for a clock that is
//          already closed goes into the oldest open one; from a worker that left the barrier,
//          adaptive_ratio.async_barrier, it is applied on arrival, a window of its own, since the
//          oldest open window may never close). Windows close in clock order once the
//          slowest LIVE worker's progress passes their clock; done() counts closed clocks. A pull
//          with clock c is answered once done() >= c (pulls with clock 0, e.g. evaluation, at
//          once).
//   ssp    one open window, closed after merge_max_pushes pushes or merge_window_us (whichever
//          first). A pull with clock c is held while c > slowest + staleness_bound; before held
//          pulls are answered the open window is applied, so they see every push received.
//   async  as ssp without holding pulls. merge_max_pushes 1 applies each push on arrival (with no
//          merge buffer: duplicate keys in one push are then successive steps, as before).
// "Live" workers are the ranks given to SetLiveWorkers; until it is called, every worker seen.
// Progress is learned only from requests to this shard, so a live worker that never sends this
// shard anything (no key of its batches lives here) holds bsp windows / ssp bounds at its last
// clock until it does; the client skips servers with no keys in a call, which for recommendation
// batches (thousands of ids hashed over a few servers) does not happen in practice. The
// coordinator's per-worker clock in ClusterState is not used (it can run ahead of the pushes in
// flight, which would close a window early).
//
// Limits: bsp/ssp clocks start at 0 (a restored job's workers start their steps at 0 again); an
// async/ssp window with merge_max_pushes > 1 and no merge_window_us stays open until enough
// pushes arrive (ssp: or a held pull is released).
// A closed window is ONE optimizer step on the merged gradient: the sum over its pushes divided
// by the number of pushes in it (merge_reduce mean; a key absent from a push counts as a zero
// gradient, i.e. the gradient of the mean loss over all workers' batches) or the plain sum.
//
// Staleness. version() counts this shard's applied windows; a push carries header.version, the
// version its worker last pulled (the reply's version).
//   dense tables (per table):  s = version() - header.version (0 if the push is newer).
//   sparse tables (per row):   s_row = the number of applied windows that updated THIS row since
//     header.version, from the last kRowHistory (4) update versions each row keeps
//     (Updater::RowStaleness): exact for 0..3; a row updated at least 4 times since then gets
//     max(4, table's s) (the table's s is an upper bound; hot rows are updated in nearly every
//     window, so it is close).
//     Rows not updated since the worker's pull get s_row = 0 whatever the table did meanwhile.
//     Rows restored from a checkpoint have no history (s_row = 0 until updated again).
// The staleness histogram (ServerCounters::staleness) counts one entry per sparse ROW pushed and
// one per dense PUSH.
// Policies of the window's step:
//   lr_scale inverse   dense: ApplyOptions.lr_scale = (1/n) sum_i 1/max(1, s_i) over the window's
//                      n pushes (lr / max(1, s) for n = 1). sparse: per row, the mean of
//                      1/max(1, s_row) over the pushes that carried the row.
//   momentum_decay     s_mean = mean staleness (dense: over the window's pushes; sparse: per row
//                      over the pushes that carried it), mu_eff = max(0, mu - s_mean/(s_mean+1)),
//                      ApplyOptions.momentum_scale = mu_eff / mu
//   drop_above N       dense: a push with s > N is not merged (reply OK, counted in
//                      pushes_dropped). sparse: rows with s_row > N are left out (rows_dropped);
//                      a push whose every row is dropped also counts in pushes_dropped. Either
//                      way the push still advances the worker's clock.
//   dc_lambda L > 0    DC-ASGD (delay_compensation.h): each push's gradient is replaced, before
//                      staleness and merging, by g + L * g * g * (w_now - w_at_pull) per element,
//                      w_at_pull being what this shard served the pushing worker at its last pull
//                      of the key (RecordPull); keys with no remembered pull are not compensated.
// Non-finite gradients: reject (the push is refused naming the key, nothing merged) or skip_row
// (sparse rows / dense chunks with a non-finite value are left out of the merge and counted).
//
// Checkpoint cut (bsp): SetCutClock(D) keeps the shard from closing the window of clock D or
// later (done() stays <= D) until the server has saved its state at done() == D and cleared it.
//
// Acknowledgements and failed windows. A push is acknowledged (an OK reply carrying version())
//   kOnMerge  (default; Store::acks_after_apply() false) once it is merged: the Server replies
//             right after Push, as it always did. "OK" means "accepted into a window", not
//             "applied": it is what keeps bsp/ssp throughput (a worker's push tickets complete
//             while its window waits for the others).
//   kOnApply  (Store::acks_after_apply() true, e.g. a write_through store: "a push is
//             acknowledged only after its window's rows are in the store") once the window
//             containing it is applied and Store::Sync returned OK; the shard holds the ack in the
//             window and sends it itself. A push applied on arrival, dropped by drop_above, or
//             refused is answered at once either way. bsp does not deadlock on held acks as long
//             as a worker sends all its pushes of a clock before it waits for any of them (the
//             client: within max_inflight messages; worker/trainer.cc waits for a step's pushes
//             only after sending the next step's pulls).
//   A window whose apply fails (an Updater / Store error, or Sync) makes the table FAILED: the
//   error, naming the table, the window's clock (bsp) or window number and the cause, is sent to
//   every held ack (that window's and any later open window's: none of them is applied) and to
//   every held pull, every later push and pull of this table gets it as its reply, and Advance
//   returns it (the Server logs it). The failed window's pushes do not count as applied and
//   version() does not move. So under kOnApply no pusher ever saw OK for an unapplied window;
//   under kOnMerge a pusher saw "merged" and learns of the failure at its next request to the
//   table -- at the latest its next pull, so it never trains on weights that silently lack its
//   update. Rows of the failed window may be partly updated (a store writes block by block); the
//   table is not served again by this server (a restart restores a checkpoint or, #11/#12, the
//   store's durable state). Tested by tests/server/window_failure_test.cc.
//
// Thread-safety: none; the server calls every method under its work lock. The Replier is called
// from inside Push / Pull / Advance.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/codec/encoded.h"  // codec::ValueType
#include "common/config/table_config.h"
#include "common/status.h"
#include "common/transport.h"
#include "proto/wire.h"
#include "server/admission/row_lifecycle.h"
#include "server/consistency_policy.h"
#include "server/delay_compensation.h"
#include "server/hold_budget.h"
#include "server/merge_buffer.h"
#include "server/replier.h"
#include "server/store.h"
#include "server/updater.h"

namespace osprey::server {

// Server-wide counters the shards update (read by Server::stats from any thread).
struct ServerCounters {
  static constexpr int kStalenessBuckets = 16;  // 0: s = 0; i >= 1: s in [2^(i-1), 2^i)
  static int StalenessBucket(uint64_t s) {
    if (s == 0) return 0;
    int b = 64 - __builtin_clzll(s);  // s in [2^(b-1), 2^b)
    return b < kStalenessBuckets - 1 ? b : kStalenessBuckets - 1;
  }
  std::atomic<uint64_t> pushes_applied{0};
  std::atomic<uint64_t> pushes_dropped{0};
  std::atomic<uint64_t> rows_dropped{0};  // sparse rows left out by drop_above
  std::atomic<uint64_t> dc_compensated{0};    // DC-ASGD rows / chunks compensated
  std::atomic<uint64_t> dc_uncompensated{0};  // DC-ASGD: pushed with no remembered pull
  std::atomic<uint64_t> rows_skipped{0};
  std::atomic<uint64_t> windows_applied{0};
  std::atomic<uint64_t> pulls_held{0};
  std::array<std::atomic<uint64_t>, kStalenessBuckets> staleness{};
  admission::LifecycleCounters lifecycle;  // feature admission and eviction (sparse tables)
};

class TableShard {
 public:
  static constexpr int64_t kNoDeadline = ConsistencyPolicy::kNoDeadline;

  // Creates table `spec` (id `id`, layout from an Updater of config.optimizer) in `store` and the
  // shard over it. `store`, `counters` and `replier` are borrowed and outlive the shard.
  // InvalidArgument for a bad optimizer config; CreateTable's errors.
  static StatusOr<std::unique_ptr<TableShard>> Create(uint32_t id, const proto::TableSpec& spec,
                                                      const config::TableConfig& config,
                                                      std::vector<uint64_t> owned_chunks,
                                                      uint64_t num_chunks, Store* store,
                                                      ServerCounters* counters, Replier* replier);
  TableShard(uint32_t id, const proto::TableSpec& spec, const config::TableConfig& config,
             uint64_t num_chunks, Store* store, std::unique_ptr<Updater> updater,
             ServerCounters* counters, Replier* replier);

  // Merges (or applies) a validated push; `g` holds the floats of `n` keys. InvalidArgument for a
  // non-finite gradient under `reject`; the table's failure (see above), including one this push's
  // own apply on arrival caused. When `ack` is set and acks are kOnApply, a merged push's ack is
  // taken into its window (ack->held = true) and sent by the shard; otherwise the caller replies.
  // A leading part of a push sent in parts (h.push_part() < h.push_parts(), proto Header) is
  // checked and its rows applied or merged like any push, but it is not the worker's push: it
  // does not bump the version, join its window's push count or progress, hold its ack or count
  // in pushes_applied / pushes_dropped; the last part does all of that for the whole push.
  struct Ack {
    PendingReply reply;
    bool held = false;
  };
  Status Push(const proto::Header& h, const uint64_t* keys, size_t n, const float* g,
              int64_t now_us, Ack* ack = nullptr);
  // The same with the push's values frame: a merge window then keeps `values` alive until it
  // closes and merges its rows by reference (MergeBuffer::AddRef) instead of copying them, so an
  // open window holds its pushes' frames (at most the sum of their sizes). The floats must not
  // change while held. Prefer this form whenever the caller has the frame as a Buffer.
  Status Push(const proto::Header& h, const uint64_t* keys, size_t n, const Buffer& values,
              int64_t now_us, Ack* ack = nullptr);
  // A validated pull (header `h`, frames in `msg`): answered now through the Replier when its
  // clock is ready, else held and answered by the Advance that makes it ready (then Advance runs
  // once, since the pull's clock may be the progress a bsp window waited for). Errors (the
  // table's failure, a store error) are answered as OP_ERROR replies. Returns the table's
  // failure (for the caller's log) when it failed, now or before.
  Status Pull(const proto::Header& h, Message msg, int64_t now_us);

  // Closes the windows that are due at `now_us` (sending their held acks) and answers the pulls
  // that became answerable. Call after every push, live-set change and timer tick. Returns the
  // table's failure when a window's apply failed (now or before).
  Status Advance(int64_t now_us);
  // When Advance must next run for a time window (kNoDeadline: none pending).
  int64_t NextDeadlineUs() const;

  // ranks: the live workers. Takes effect at the next Advance.
  void SetLiveWorkers(const std::vector<int>& ranks, const std::vector<int>& left = {}) {
    clocks_.SetLive(ranks, left);
  }

  // Feature admission / eviction of a sparse table (server/admission/row_lifecycle.h); null when
  // its config asks for neither. Set by Create. A table with eviction merges by key, never by
  // row id (deleted rows' ids are reused: native_store.h).
  admission::RowLifecycle* lifecycle() const { return lifecycle_.get(); }
  void set_lifecycle(std::unique_ptr<admission::RowLifecycle> l) { lifecycle_ = std::move(l); }

  // DC-ASGD counters; null when dc_lambda is 0.
  const DelayCompensation* delay_compensation() const { return dc_.get(); }

  // bsp checkpoint cut: windows of clock >= `clock` stay open (done() <= clock) until
  // ClearCutClock. No effect in ssp/async.
  void SetCutClock(int64_t clock) { cut_clock_ = clock; }
  void ClearCutClock() { cut_clock_ = std::numeric_limits<int64_t>::max(); }
  bool bsp() const { return policy_->mode() == ConsistencyMode::kBsp; }
  // Whether any worker has sent this shard a clocked request (a bsp shard that saw none never
  // moves and is not waited for by a checkpoint cut).
  bool active() const { return clocks_.any(); }
  // OK, or the failure of a window's apply (see above).
  const Status& failure() const { return failed_; }

  const proto::TableSpec& spec() const { return spec_; }
  uint64_t num_chunks() const { return num_chunks_; }
  uint64_t version() const { return version_; }
  void set_version(uint64_t v) { version_ = v; }  // restore
  int64_t done() const { return done_; }
  // bsp: a replacement server (failover) resumes at its checkpoint's clock, not at 0.
  void set_done(int64_t clock) { done_ = clock; }
  // bsp rollback (server_rollback.cc): answers every held pull and ack with `why`, drops the
  // open windows, and sets the clocks closed and every worker's progress back to `clock`.
  void Rewind(int64_t clock, const Status& why);
  size_t num_held() const { return held_.size(); }
  // Held pulls and held acks are admitted against `budget` (borrowed, outlives the shard; null:
  // unlimited); one beyond it is answered with the budget's ResourceExhausted error at once.
  void set_hold_budget(HoldBudget* budget) { budget_ = budget; }
  // Large merged windows (rows by id) are applied, and large sparse pulls read, over `pool`
  // (borrowed, outlives the shard; null: this thread only). Same bits either way (apply_pool.h).
  void set_apply_pool(ApplyPool* pool) { apply_pool_ = pool; }

 private:
  // A pull waiting for its clock: the request as received (frames keep their buffers alive).
  struct HeldPull {
    Message msg;
    proto::Header header;
  };
  struct Window {
    MergeBuffer buffer;     // dense tables, and sparse ones on a store without row ids
    RowMergeBuffer rows;    // sparse tables on a store with row ids (row_ids_)
    int pushes = 0;
    int leading_parts = 0;  // leading parts merged since the window was last applied (Push)
    double lr_weight_sum = 0;  // sum of 1 / max(1, s_i)
    double staleness_sum = 0;
    bool any_stale = false;  // some push had s > 0 (sparse: per-row options needed)
    int64_t first_us = 0;
    std::vector<PendingReply> acks;  // kOnApply: acks owed when this window is applied
    std::vector<Store::PushMark> marks;  // marks_: the window's pushes, staged before its Sync
  };

  bool sparse() const { return spec_.type() == proto::TABLE_SPARSE; }
  size_t Width(uint64_t key) const;
  uint64_t Staleness(const proto::Header& h) const;
  // A push's lr weight under lr_inverse: 1 / max(1, staleness).
  static double LrWeight(uint64_t s) { return 1.0 / std::max<double>(1.0, static_cast<double>(s)); }
  ApplyOptions Options(int pushes, double lr_weight_sum, double staleness_sum) const;
  // Sparse rows of a push read before merging, in one store visit: the weights now into dc_w_
  // (DC-ASGD) and / or the rows' staleness since h.version() into row_s_ (per_row).
  // With by_id the rows are resolved to ids (into ids_, creating missing rows) and read by id.
  Status ReadPushRows(const proto::Header& h, const uint64_t* keys, size_t n, bool weights,
                      bool per_row, uint64_t s, bool by_id);
  // DC-ASGD: replaces *g by the compensated gradient (in dc_g_).
  Status Compensate(const proto::Header& h, const uint64_t* keys, size_t n, const float** g);
  // Sparse per-row staleness policies for a push of table staleness s > 0, from row_s_: counts
  // the histogram and compacts keys / g (into kept_keys_ / kept_g_) when drop_above leaves rows
  // out.
  // With by_id, ids_ is compacted alike.
  void RowPolicies(const uint64_t** keys, size_t* n, const float** g, bool by_id);
  // Per-row options of a window's n rows from the merge buffer's entry stats.
  const ApplyOptions* RowOptions(const MergeBuffer::EntryStats* st, size_t n, float grad_scale);
  // Merges a push's n rows (gradients at g, kept by reference when by_ref) into w.rows.
  // have_ids: ids_ already holds the rows' ids (ReadPushRows by id).
  Status MergeRows(Window* w, const uint64_t* keys, size_t n, const float* g, bool by_ref,
                   bool any_bad, bool per_row, bool have_ids);
  // The same into w.buffer (by key).
  void MergeKeys(Window* w, const uint64_t* keys, size_t n, const float* g, bool by_ref,
                 bool any_bad, bool per_row);
  Status CheckFinite(const uint64_t* keys, size_t n, const float* g, bool* any_bad) const;
  // values: the push's frame when g points into it (merged by reference), else null.
  Status PushImpl(const proto::Header& h, const uint64_t* keys, size_t n, const float* g,
                  const Buffer* values, int64_t now_us, Ack* ack);
  // A push of one-push windows: applied at once (by_id: to the rows of ids_).
  // A push applied on arrival, of at least 1024 keys on a store with concurrent row visits:
  // resolves its keys to row ids (ids_) first, reads only (over the apply pool from 2 x 32k
  // keys), then creates the missing rows here in key order; true when ids_ holds them. The apply
  // then goes by id on this thread, in push order. Two simple passes (slots, then rows, each
  // prefetched ahead) beat the one pass by key that does both: 1M x 16 pushes 1.36x faster on one
  // thread (bench/results/2026-12-07-sparse-push-version-2core.md).
  bool ResolveRowIds(const uint64_t* keys, size_t n);
  Status ApplyOnArrival(const proto::Header& h, const uint64_t* keys, size_t n, const float* g,
                        bool per_row, uint64_t s, bool by_id);
  Store::PushMark MarkOf(const proto::Header& h) const {
    return Store::PushMark{id_, static_cast<int>(h.worker_rank()), h.worker_incarnation(),
                           h.request_id()};
  }
  // The window a push of header h joins (created, with recycled buffers, when new).
  Window& WindowFor(const proto::Header& h, int64_t now_us);
  Status StoreApply(const uint64_t* keys, size_t n, const float* g, const ApplyOptions& o,
                    const ApplyOptions* row_options = nullptr);
  Status StoreApply(const uint64_t* keys, size_t n, const float* const* g, const ApplyOptions& o,
                    const ApplyOptions* row_options);
  // StoreApply of n contiguous rows g to the rows of ids_[0..n).
  Status StoreApplyById(size_t n, const float* g, const ApplyOptions& o,
                        const ApplyOptions* row_options);
  Status ApplyWindow(Window* w, int64_t clock);
  Status ApplyMerged(Window* w);
  // Marks the table failed by `cause` while applying the window of `clock` (see above) and
  // answers every owed reply with the failure. Returns the failure.
  Status Fail(const Status& cause, int64_t clock, int pushes);
  void Progress(int worker, int64_t clock) { clocks_.Advance(worker, clock); }
  // Answers the held pulls that became ready (bsp/ssp).
  void ReleaseHeld();
  // Row ids: tells the store (ReleaseRowIds) once no window holds any, so it may evict again.
  void ReleaseRowIdsIfIdle();
  // Builds and sends the reply of a ready pull (or its error).
  void AnswerPull(const proto::Header& h, const Message& msg);
  Status ServePull(const proto::Header& h, const Message& msg, proto::Header* reply,
                   Buffer* values);
  // What a held pull / held ack counts against the HoldBudget.
  static uint64_t HeldBytes(const HeldPull& p) { return sizeof(HeldPull) + p.msg.bytes(); }
  static uint64_t AckBytes(const PendingReply& a) {
    return sizeof(PendingReply) + a.request.ByteSizeLong();
  }
  void ReleaseAck(const PendingReply& a) {
    if (budget_ != nullptr) budget_->Release(a.peer, AckBytes(a));
  }
  void ReleasePull(const HeldPull& p) {
    if (budget_ != nullptr) budget_->Release(p.msg.peer, HeldBytes(p));
  }
  // DC-ASGD: remembers the `n` keys' floats `values` just served to the pull `h`.
  void RecordPull(const proto::Header& h, const uint64_t* keys, size_t n, const float* values);
  // The rows of keys[0, n) into out as `type` (n * dim values of codec::RowValueBytes(type)):
  // fp32, or fp16 / bf16 with codec::CastRowValues' bits, cast as each row is read. Spread over
  // the apply pool when it is large and the store allows concurrent visits: each thread writes the
  // rows of its range that exist; the keys without a row are then pulled (created, in key order,
  // as one thread would) on this thread.
  Status PullSparseRowsAs(const uint64_t* keys, size_t n, codec::ValueType type, uint8_t* out);

  const uint32_t id_;
  const proto::TableSpec spec_;
  const ShardRules rules_;
  const uint64_t num_chunks_;
  const std::unique_ptr<ConsistencyPolicy> policy_;
  Store* const store_;
  const std::unique_ptr<Updater> updater_;
  ServerCounters* const counters_;
  Replier* const replier_;
  HoldBudget* budget_ = nullptr;
  ApplyPool* apply_pool_ = nullptr;
  std::vector<uint8_t> pull_absent_;  // PullSparseRowsAs: keys without a row, reused
  const bool row_ids_;      // sparse table on a store with row ids: windows merge by row id
  const bool ack_on_apply_;  // Store::acks_after_apply()
  const bool marks_;         // Store::persists_push_marks()

  uint64_t version_ = 0;
  int64_t done_ = 0;                      // bsp: clocks closed
  std::map<int64_t, Window> windows_;     // bsp: by clock; ssp/async: one, at clock 0
  std::vector<MergeBuffer> spare_;        // bsp: cleared buffers of closed windows, reused
  std::vector<RowMergeBuffer> spare_rows_;
  WorkerClocks clocks_;
  std::vector<HeldPull> held_;
  int64_t cut_clock_ = std::numeric_limits<int64_t>::max();
  Status failed_;                          // OK until a window's apply fails
  std::unique_ptr<DelayCompensation> dc_;  // dc_lambda > 0
  std::unique_ptr<admission::RowLifecycle> lifecycle_;  // admission / eviction
  int64_t now_us_ = 0;  // the latest time Push / Pull / Advance was given (eviction's clock)
  // Scratch of Push / ApplyWindow, kept to avoid allocating per push.
  std::vector<float> dc_g_, dc_w_;
  std::vector<uint64_t> row_s_, kept_keys_;
  std::vector<uint64_t> missing_keys_;  // ResolveRowIds, reused
  std::vector<uint32_t> ids_;
  std::vector<const float*> gp_;
  std::vector<float> kept_g_;
  std::vector<ApplyOptions> row_opts_;
};

}  // namespace osprey::server
