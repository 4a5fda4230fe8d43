#include "server/scale_agent.h"

#include "common/logging.h"
#include "server/migration/row_sender.h"

namespace osprey::server {

ScaleAgent::ScaleAgent(Server* server, coordinator::CoordinatorClient* coord, MakeDialer make_dialer,
                       int timeout_ms)
    : server_(server), coord_(coord), make_dialer_(std::move(make_dialer)), timeout_ms_(timeout_ms) {}

ScaleAgent::~ScaleAgent() {
  if (thread_.joinable()) thread_.join();
}

void ScaleAgent::OnState(const proto::ClusterState& state) {
  const proto::ScaleStatus& scale = state.scale();
  if (scale.phase() != proto::SCALE_TRANSFERRING) return;
  const int rank = server_->rank();
  // Only the servers of the old map transfer; a joining one got the new map at registration.
  if (rank < 0 || rank >= scale.from_servers()) return;
  const uint64_t epoch = scale.target().epoch();
  uint64_t seen = started_epoch_.load();
  if (epoch <= seen || !started_epoch_.compare_exchange_strong(seen, epoch)) return;
  if (thread_.joinable()) thread_.join();  // the previous step's, long done
  thread_ = std::thread([this, target = scale.target()] { Transfer(target); });
}

void ScaleAgent::Transfer(proto::ShardMap target) {
  const int rank = server_->rank();
  if (rank >= target.server_endpoints_size()) leaving_.store(true);
  proto::ScaleRequest done;
  done.set_kind(proto::SCALE_DONE);
  done.set_rank(rank);
  Status st;
  auto dialer = make_dialer_();
  if (!dialer.ok()) {
    st = dialer.status();
  } else {
    migration::RowSender sender(std::move(*dialer), timeout_ms_);
    StatusOr<Server::ReshardResult> r = server_->Reshard(target, &sender);
    if (r.ok()) {
      done.set_rows_sent(r->records_sent);
    } else {
      st = r.status();
    }
  }
  if (!st.ok()) {
    OSPREY_LOG_ERROR("server {}: scale to epoch {} failed: {}", rank, target.epoch(), st.ToString());
    done.set_error("server " + std::to_string(rank) + ": " + st.ToString());
  }
  StatusOr<proto::ScaleReply> reply = coord_->Scale(done, timeout_ms_);
  if (!reply.ok()) {
    OSPREY_LOG_ERROR("server {}: scale report not answered: {}", rank, reply.status().ToString());
    return;
  }
  if (reply->removed()) {
    OSPREY_LOG_INFO("server {}: removed from the job by the scale step to epoch {}; its rows are "
                    "with the other servers, exiting", rank, target.epoch());
    removed_.store(true);
  }
}

}  // namespace osprey::server
