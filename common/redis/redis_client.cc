// RedisClient: routing by slot, one pipelined round per node per attempt, redirections and
// retries. Why one loop for both modes: a single node is a slot map with one master, so the
// retry and error paths are the same code the cluster uses.
#include "common/redis/redis_client.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <thread>

#include "common/redis/node_connection.h"
#include "common/redis/slot_map.h"

namespace osprey::redis {

namespace {

constexpr int kMaxBackoffMs = 2000;
// MOVED/ASK do not spend retries (a resharding moves many slots), but a batch may not bounce
// between nodes for ever.
constexpr int kMaxRedirects = 16;

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381" -> the endpoint; nullopt if malformed.
std::optional<Endpoint> RedirectTarget(const std::string& error) {
  const size_t sp = error.rfind(' ');
  const size_t colon = error.rfind(':');
  if (sp == std::string::npos || colon == std::string::npos || colon < sp) return std::nullopt;
  Endpoint ep{error.substr(sp + 1, colon - sp - 1), 0};
  try {
    ep.port = std::stoi(error.substr(colon + 1));
  } catch (...) {
    return std::nullopt;
  }
  return ep;
}

// Errors after which the same command may succeed a little later on the same cluster.
bool IsTransient(const std::string& error) {
  return StartsWith(error, "TRYAGAIN") || StartsWith(error, "CLUSTERDOWN") || StartsWith(error, "LOADING");
}

// One node's share of an attempt.
struct NodeBatch {
  Endpoint endpoint;
  std::vector<size_t> index;  // into the caller's commands
  std::vector<const Command*> argvs;
  std::vector<bool> asking;
  Status status;
  std::vector<Reply> replies;
};

// The progress of one Execute call.
struct BatchState {
  std::vector<Reply>* replies = nullptr;       // the caller's, one per command
  std::vector<size_t> pending;                 // commands without a final reply yet
  std::vector<std::optional<Endpoint>> redirect;  // where MOVED/ASK sent each for its next try
  std::vector<bool> ask;                       // ASKING before it on the next try
  bool transient = false;                      // this attempt met an error worth a backoff
  bool refresh = false;                        // this attempt says the slot map is stale
  Status last_error;
};

}  // namespace

struct RedisClient::Impl {
  RedisOptions options;
  SlotMap map;
  std::map<std::string, std::unique_ptr<NodeConnection>> conns;  // by Endpoint::ToString()
  Counters counters;

  // The pooled connection to `ep`, opened (again) when missing or broken.
  StatusOr<NodeConnection*> Conn(const Endpoint& ep) {
    auto& slot = conns[ep.ToString()];
    if (slot && slot->broken()) slot.reset();
    if (!slot) {
      OSPREY_ASSIGN_OR_RETURN(slot, NodeConnection::Open(ep, options));
    }
    return slot.get();
  }

  Status RefreshMap();
  const Endpoint& Route(const Command& c) const;
  std::vector<NodeBatch> SendPending(const std::vector<Command>& commands, BatchState* s);
  Status Absorb(NodeBatch& b, BatchState* s, std::vector<size_t>* next);
  Status Execute(const std::vector<Command>& commands, std::vector<Reply>* replies);
  Status ExecuteOnAllMasters(const Command& command, std::vector<Reply>* replies);
};

Status RedisClient::Impl::RefreshMap() {
  // Ask the masters we know first (the seeds may be gone after a resharding), then the seeds.
  std::vector<Endpoint> candidates = map.masters();
  for (const Endpoint& s : options.seeds) {
    if (std::find(candidates.begin(), candidates.end(), s) == candidates.end()) candidates.push_back(s);
  }
  Status last = Unavailable("redis cluster: no node to read the slot map from");
  std::string tried;
  for (const Endpoint& ep : candidates) {
    tried += (tried.empty() ? "" : ", ") + ep.ToString();
    auto conn = Conn(ep);
    if (!conn.ok()) {
      if (conn.status().code() == StatusCode::kPermissionDenied) return conn.status();
      last = conn.status();
      continue;
    }
    Reply reply;
    Status st = (*conn)->Call({"CLUSTER", "SLOTS"}, &reply);
    if (!st.ok()) {
      last = st;
      continue;
    }
    if (reply.is_error()) {
      if (StartsWith(reply.str, "NOAUTH") || StartsWith(reply.str, "WRONGPASS")) {
        return PermissionDenied("redis " + ep.ToString() + ": " + reply.str);
      }
      if (reply.str.find("cluster support disabled") != std::string::npos) {
        return FailedPrecondition("redis " + ep.ToString() +
                                  ": cluster mode is configured but the node is not a cluster node (" +
                                  reply.str + ")");
      }
      last = Unavailable("redis " + ep.ToString() + ": CLUSTER SLOTS failed: " + reply.str);
      continue;
    }
    auto parsed = SlotMap::FromClusterSlots(reply, ep);
    if (!parsed.ok()) {
      last = parsed.status();
      continue;
    }
    if (parsed->masters().empty()) {
      last = Unavailable("redis " + ep.ToString() + ": CLUSTER SLOTS lists no master");
      continue;
    }
    map = std::move(parsed).value();
    ++counters.map_refreshes;
    return Status::OK();
  }
  return Status(last.code(), "redis cluster: no node answered CLUSTER SLOTS (tried " + tried +
                                 "); last error: " + last.message());
}

const Endpoint& RedisClient::Impl::Route(const Command& c) const {
  if (c.key_index < 0) return map.masters().front();
  const int owner = map.MasterOf(KeySlot(c.args[c.key_index]));
  // An unassigned slot goes to any master: its answer (CLUSTERDOWN, MOVED) drives the retry.
  return map.masters()[owner < 0 ? 0 : owner];
}

namespace {

Status ValidateCommands(const std::vector<Command>& commands) {
  for (size_t i = 0; i < commands.size(); ++i) {
    const Command& c = commands[i];
    if (c.args.empty()) return InvalidArgument("redis command #" + std::to_string(i) + ": no arguments");
    if (c.key_index >= static_cast<int>(c.args.size())) {
      return InvalidArgument("redis command #" + std::to_string(i) + " (" + c.args[0] + "): key_index " +
                             std::to_string(c.key_index) + " but only " + std::to_string(c.args.size()) +
                             " arguments");
    }
  }
  return Status::OK();
}

}  // namespace

// One attempt: the pending commands grouped per node (a redirected command goes where its
// MOVED/ASK said), every node's pipeline written before any is read (one round trip for the
// attempt), then every node's replies read.
std::vector<NodeBatch> RedisClient::Impl::SendPending(const std::vector<Command>& commands,
                                                      BatchState* s) {
  std::vector<NodeBatch> batches;  // a handful of nodes: a linear search beats a map here
  NodeBatch* last = nullptr;
  for (size_t i : s->pending) {
    const Endpoint& ep = s->redirect[i] ? *s->redirect[i] : Route(commands[i]);
    if (last == nullptr || !(last->endpoint == ep)) {
      last = nullptr;
      for (NodeBatch& b : batches) {
        if (b.endpoint == ep) last = &b;
      }
      if (last == nullptr) {
        last = &batches.emplace_back();
        last->endpoint = ep;
      }
    }
    NodeBatch& b = *last;
    b.index.push_back(i);
    b.argvs.push_back(&commands[i]);
    b.asking.push_back(s->ask[i]);
    s->redirect[i].reset();
    s->ask[i] = false;
  }
  std::vector<std::pair<NodeBatch*, NodeConnection*>> sent;
  for (NodeBatch& b : batches) {
    auto conn = Conn(b.endpoint);
    b.status = conn.ok() ? (*conn)->Send(b.argvs, &b.asking) : conn.status();
    if (b.status.ok()) sent.emplace_back(&b, *conn);
  }
  for (auto& [b, conn] : sent) b->status = conn->Receive(&b->asking, b->index.size(), &b->replies);
  return batches;
}

// Files one node's replies: final ones into the caller's slots, MOVED/ASK/TRYAGAIN/... and the
// commands whose replies a broken connection lost back into `next`. Non-OK only for what a retry
// cannot fix (an io timeout: the node may still be working on the batch; a refused AUTH).
Status RedisClient::Impl::Absorb(NodeBatch& b, BatchState* s, std::vector<size_t>* next) {
  if (!b.status.ok() && (b.status.code() == StatusCode::kDeadlineExceeded ||
                         b.status.code() == StatusCode::kPermissionDenied)) {
    return b.status;
  }
  for (size_t j = 0; j < b.index.size(); ++j) {
    const size_t i = b.index[j];
    if (j >= b.replies.size()) {  // sent (maybe applied) but its reply was lost: resend
      s->last_error = b.status;
      s->transient = s->refresh = true;
      next->push_back(i);
      continue;
    }
    Reply& r = b.replies[j];
    if (r.is_error() && (StartsWith(r.str, "MOVED ") || StartsWith(r.str, "ASK "))) {
      const bool is_ask = StartsWith(r.str, "ASK ");
      s->redirect[i] = RedirectTarget(r.str);
      s->ask[i] = is_ask && s->redirect[i].has_value();
      ++(is_ask ? counters.asks : counters.moved);
      s->refresh = s->refresh || !is_ask;  // ASK is temporary: the map still names the owner
      next->push_back(i);
    } else if (r.is_error() && IsTransient(r.str)) {
      s->last_error = Unavailable("redis " + b.endpoint.ToString() + ": " + r.str);
      s->transient = s->refresh = true;
      next->push_back(i);
    } else {
      (*s->replies)[i] = std::move(r);
    }
  }
  return Status::OK();
}

Status RedisClient::Impl::Execute(const std::vector<Command>& commands, std::vector<Reply>* replies) {
  OSPREY_RETURN_IF_ERROR(ValidateCommands(commands));
  replies->assign(commands.size(), Reply());
  BatchState s;
  s.replies = replies;
  s.pending.resize(commands.size());
  for (size_t i = 0; i < s.pending.size(); ++i) s.pending[i] = i;
  s.redirect.resize(commands.size());
  s.ask.assign(commands.size(), false);
  int retries = 0, redirects = 0, backoff_ms = std::max(1, options.backoff_ms);
  while (!s.pending.empty()) {
    std::vector<NodeBatch> batches = SendPending(commands, &s);
    std::vector<size_t> next;
    s.transient = s.refresh = false;
    for (NodeBatch& b : batches) OSPREY_RETURN_IF_ERROR(Absorb(b, &s, &next));
    // Ascending order keeps the caller's order among the commands resent to one node.
    std::sort(next.begin(), next.end());
    s.pending.swap(next);
    if (s.pending.empty()) break;
    if (s.transient) {
      if (retries >= options.max_retries) {
        return Unavailable("redis: " + std::to_string(s.pending.size()) + " of " +
                           std::to_string(commands.size()) + " commands not delivered after " +
                           std::to_string(retries) + " retries; last error: " + s.last_error.message());
      }
      ++retries;
      ++counters.retries;
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      backoff_ms = std::min(backoff_ms * 2, kMaxBackoffMs);
    } else if (++redirects > kMaxRedirects) {
      return Unavailable("redis: " + std::to_string(s.pending.size()) + " commands still redirected after " +
                         std::to_string(kMaxRedirects) + " MOVED/ASK rounds (a resharding that does not settle?)");
    }
    if (s.refresh && options.cluster) {
      // A failed refresh keeps the old map; the redirect targets and the retry budget still apply.
      Status st = RefreshMap();
      if (st.code() == StatusCode::kPermissionDenied) return st;
    }
  }
  return Status::OK();
}

Status RedisClient::Impl::ExecuteOnAllMasters(const Command& command, std::vector<Reply>* replies) {
  if (command.args.empty()) return InvalidArgument("redis ExecuteOnAllMasters: command has no arguments");
  if (options.cluster) {
    Status st = RefreshMap();  // the masters may have changed since the last batch
    if (st.code() == StatusCode::kPermissionDenied) return st;
  }
  replies->clear();
  for (const Endpoint& ep : map.masters()) {
    int backoff_ms = std::max(1, options.backoff_ms);
    for (int attempt = 0;; ++attempt) {
      Reply reply;
      auto conn = Conn(ep);
      Status st = conn.ok() ? (*conn)->Call(command.args, &reply) : conn.status();
      if (st.ok() && !(reply.is_error() && IsTransient(reply.str))) {
        replies->push_back(std::move(reply));
        break;
      }
      if (st.ok()) st = Unavailable("redis " + ep.ToString() + ": " + reply.str);
      if (st.code() != StatusCode::kUnavailable || attempt >= options.max_retries) {
        return st.WithContext("redis: " + command.args[0] + " on every master");
      }
      ++counters.retries;
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      backoff_ms = std::min(backoff_ms * 2, kMaxBackoffMs);
    }
  }
  return Status::OK();
}

RedisClient::RedisClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RedisClient::~RedisClient() = default;

StatusOr<std::unique_ptr<RedisClient>> RedisClient::Connect(const RedisOptions& options) {
  if (options.seeds.empty()) return InvalidArgument("redis: no endpoints given");
  if (options.connect_timeout_ms <= 0 || options.io_timeout_ms <= 0) {
    return InvalidArgument("redis: connect_timeout_ms and io_timeout_ms must be > 0");
  }
  if (options.max_retries < 0 || options.backoff_ms < 0) {
    return InvalidArgument("redis: max_retries and backoff_ms must be >= 0");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (options.cluster) {
    OSPREY_RETURN_IF_ERROR(impl->RefreshMap());
  } else {
    const Endpoint& node = options.seeds.front();
    impl->map = SlotMap::SingleNode(node);
    OSPREY_ASSIGN_OR_RETURN(NodeConnection * conn, impl->Conn(node));
    Reply pong;
    OSPREY_RETURN_IF_ERROR(conn->Call({"PING"}, &pong));
    if (pong.is_error()) {
      if (StartsWith(pong.str, "NOAUTH")) return PermissionDenied("redis " + node.ToString() + ": " + pong.str);
      return Unavailable("redis " + node.ToString() + ": PING failed: " + pong.str);
    }
  }
  return std::unique_ptr<RedisClient>(new RedisClient(std::move(impl)));
}

Status RedisClient::Execute(const std::vector<Command>& commands, std::vector<Reply>* replies) {
  MutexLock lock(&mu_);
  return impl_->Execute(commands, replies);
}

Status RedisClient::ExecuteOnAllMasters(const Command& command, std::vector<Reply>* replies) {
  MutexLock lock(&mu_);
  return impl_->ExecuteOnAllMasters(command, replies);
}

size_t RedisClient::num_masters() const {
  MutexLock lock(&mu_);
  return impl_->map.masters().size();
}

std::vector<Endpoint> RedisClient::masters() const {
  MutexLock lock(&mu_);
  return impl_->map.masters();
}

RedisClient::Counters RedisClient::counters() const {
  MutexLock lock(&mu_);
  return impl_->counters;
}

}  // namespace osprey::redis
