// RedisStore: the push marks (issue 12), the dedup window's durable part (server/push_dedup.h).
//
// Per server rank one hash, {P}:pushes:r<r> (row_layout.h): per (table, worker rank) the worker's
// incarnation, the last kMarkedIds request ids applied and the highest id evicted from them
// (ids reach a server out of order -- several client threads send, and a replacement can get a
// new push before the re-sends -- so a highest-id mark alone could hide an unapplied re-send),
// "applied" (the pushes applied by every
// incarnation of the rank) and "seq" (the last write's sequence number, so a write the client
// retried after a lost reply does not add to "applied" twice). Written by osprey_marks
// (redis_functions.cc), fenced by the rank's incarnation key (same hash slot {P}).
//
// When (write_through only; write_back does not persist marks):
//   single node: the marks go in the same MULTI/EXEC as the rows of the flush that applied the
//     pushes, so Redis holds both or neither: a push whose rows are in Redis is marked.
//   Redis Cluster: a flush's rows span slots, so no transaction can hold them with the marks; the
//     marks are written once every row write of the flush was acknowledged, before the pushes are
//     acknowledged to the workers. A kill -9 between the two leaves the rows without the marks:
//     the re-sent pushes of that one flush are applied again (at-least-once for one flush).
//   merge: redis: the rows are written by osprey_apply (redis_merge.cc) before Sync, so the marks
//     follow them as in a cluster (the same one-flush window) on a single node too.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "server/redis/redis_store.h"
#include "server/redis/redis_store_table.h"

namespace osprey::server {

namespace {
constexpr int kMarkedIds = 256;  // per (table, worker) in Redis (PushDedup keeps 4096 in memory)
}  // namespace

using redis::Command;
using redis::Reply;

void RedisStore::StagePushes(uint32_t table, const PushMark* marks, size_t n) {
  if (!persists_push_marks()) return;
  MutexLock l(&mu_);
  Table* t = any(table);
  if (t != nullptr) t->staged_pushes.insert(t->staged_pushes.end(), marks, marks + n);
}

Status RedisStore::LoadPushMarks(std::vector<PushMark>* marks, uint64_t* applied) const {
  *marks = loaded_marks_;
  *applied = loaded_applied_;
  return Status::OK();
}

Status RedisStore::ExecuteWithMarks(std::vector<Command>* rows,
                                    const std::vector<PushMark>& staged,
                                    redis::RedisClient* client, std::vector<Reply>* replies,
                                    Status* marked) {
  *marked = Status::OK();
  if (staged.empty()) return client->Execute(*rows, replies);
  // Per (table, worker): the newest incarnation's ids, in the order applied (a window can hold
  // both incarnations of a restarted worker; the later one is staged last).
  std::map<std::pair<uint32_t, int>, std::pair<uint64_t, std::string>> ids;
  for (const PushMark& m : staged) {
    if (m.incarnation == 0) continue;  // counted, never deduplicated
    auto& v = ids[{m.table, m.worker}];
    if (v.first != m.incarnation) v = {m.incarnation, std::string()};
    v.second += (v.second.empty() ? "" : " ") + std::to_string(m.request_id);
  }
  Command mark({"FCALL", "osprey_marks", "2", layout_->Incarnation(), layout_->PushMarks(),
                std::to_string(incarnation_), std::to_string(++marks_seq_),
                std::to_string(staged.size()), std::to_string(kMarkedIds)},
               3);
  for (auto& [tw, v] : ids) {
    mark.args.push_back("t" + std::to_string(tw.first) + ":w" + std::to_string(tw.second));
    mark.args.push_back(std::to_string(v.first));
    mark.args.push_back(std::move(v.second));
  }
  const std::string what = "writing the push marks of rank " + std::to_string(layout_->rank());
  if (!config_.cluster) {
    const size_t n = rows->size();
    std::vector<Command> tx;
    tx.reserve(n + 3);
    tx.push_back(Command({"MULTI"}, -1));
    for (Command& c : *rows) tx.push_back(std::move(c));
    tx.push_back(std::move(mark));
    tx.push_back(Command({"EXEC"}, -1));
    std::vector<Reply> raw;
    OSPREY_RETURN_IF_ERROR(client->Execute(tx, &raw));
    const Reply& exec = raw.back();
    if (exec.type != Reply::Type::kArray || exec.elements.size() != n + 1) {
      return Internal("redis store: the MULTI/EXEC of a write_through flush (" + std::to_string(n) +
                      " row writes and the push marks) did not run: " + exec.DebugString());
    }
    replies->assign(exec.elements.begin(), exec.elements.end() - 1);
    if (exec.elements.back().is_error()) *marked = RedisReplyError(exec.elements.back(), what);
    return Status::OK();
  }
  if (!rows->empty()) {
    OSPREY_RETURN_IF_ERROR(client->Execute(*rows, replies));
    for (const Reply& r : *replies) {
      if (r.is_error()) return Status::OK();  // rows refused: no marks (Flush reports the rows)
    }
  }
  std::vector<Reply> r;
  Status s = client->Execute({std::move(mark)}, &r);
  if (!s.ok()) {
    *marked = s.WithContext(what);
  } else if (r.size() != 1 || r[0].is_error()) {
    *marked = r.empty() ? Internal("redis store: " + what + ": no reply") : RedisReplyError(r[0], what);
  }
  return Status::OK();
}

Status RedisStore::ReadPushMarks() {
  loaded_marks_.clear();
  loaded_applied_ = 0;
  const std::string key = layout_->PushMarks();
  std::vector<Reply> r;
  OSPREY_RETURN_IF_ERROR(client_->Execute({Command({"HGETALL", key})}, &r));
  if (r.size() != 1 || r[0].type != Reply::Type::kArray) {
    return Internal("redis store: HGETALL " + key + ": " +
                    (r.empty() ? std::string("no reply") : r[0].DebugString()));
  }
  const std::vector<Reply>& e = r[0].elements;
  uint64_t seq = 0;
  for (size_t i = 0; i + 1 < e.size(); i += 2) {
    const std::string& field = e[i].str;
    const std::string& value = e[i + 1].str;
    unsigned long long a = 0, b = 0;
    unsigned table = 0;
    int worker = 0;
    char tail = 0;
    bool ok;
    if (field == "seq" || field == "applied") {
      ok = std::sscanf(value.c_str(), "%llu%c", &a, &tail) == 1;
      (field == "seq" ? seq : loaded_applied_) = a;
    } else {
      ok = std::sscanf(field.c_str(), "t%u:w%d%c", &table, &worker, &tail) == 2 &&
           std::sscanf(value.c_str(), "%llu %llu", &a, &b) == 2;
      if (ok) {
        loaded_marks_.push_back(PushMark{table, worker, a, b});  // the bound first (store.h)
        const char* p = value.c_str();
        for (int skip = 0; skip < 2; ++skip) p = std::strchr(p, ' ') != nullptr ? std::strchr(p, ' ') + 1 : "";
        char* end = nullptr;
        for (uint64_t id = std::strtoull(p, &end, 10); end != p; id = std::strtoull(p, &end, 10)) {
          loaded_marks_.push_back(PushMark{table, worker, a, id});
          p = end;
        }
        ok = *p == '\0';
      }
    }
    if (!ok) {
      return Internal("redis store: " + key + " field '" + field + "' = '" + value +
                      "' is not a push mark (another layout wrote it?)");
    }
  }
  {
    MutexLock l(&flush_mu_);
    marks_seq_ = seq;
  }
  if (!e.empty()) {
    OSPREY_LOG_INFO("redis store: rank {} read {} push marks, {} pushes applied so far ({})",
                    layout_->rank(), loaded_marks_.size(), loaded_applied_, key);
  }
  return Status::OK();
}

}  // namespace osprey::server
