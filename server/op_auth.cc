#include "server/op_auth.h"

#include "proto/applied_clocks_op.h"

#include <filesystem>

namespace osprey::server {
namespace {

bool IsControlOp(proto::Op op) {
  return op == proto::OP_SERVER_STATS || op == proto::OP_CHECKPOINT || op == proto::OP_SHUTDOWN ||
         op == proto::OP_ROWS_DIGEST;
}

// Sent only by another server of the job: a scale step's moved records (server/migration/).
bool IsServerOp(proto::Op op) { return op == proto::OP_MIGRATE_ROWS; }

bool IsDataOp(proto::Op op) {
  return op == proto::OP_PULL_SPARSE || op == proto::OP_PUSH_SPARSE ||
         op == proto::OP_PULL_DENSE || op == proto::OP_PUSH_DENSE || op == proto::OP_INIT_DENSE ||
         op == kOpAppliedClocks;
}

std::string Resolved(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  if (ec) return std::filesystem::path(path).lexically_normal().string();
  std::filesystem::path r = std::filesystem::weakly_canonical(p, ec);
  return (ec ? p.lexically_normal() : r).string();
}

}  // namespace

Status AuthorizeServerOp(proto::Op op, PeerRole role, bool roles_required, Refusal* kind) {
  if (role == PeerRole::kUnauthenticated) {
    if (!roles_required) return Status::OK();
    *kind = Refusal::kUnauthenticated;
    return PermissionDenied("op " + std::to_string(op) + " from an unauthenticated peer");
  }
  if (IsControlOp(op) && role != PeerRole::kCoordinator && role != PeerRole::kAdmin) {
    *kind = Refusal::kControlOp;
    return PermissionDenied("control op " + std::to_string(op) + " from role '" +
                            PeerRoleName(role) + "' (only the coordinator or admin may)");
  }
  if (IsServerOp(op) && role != PeerRole::kServer) {
    *kind = Refusal::kControlOp;
    return PermissionDenied("op " + std::to_string(op) + " from role '" + PeerRoleName(role) +
                            "' (only the job's servers may: a scale step's moved rows)");
  }
  if (IsDataOp(op) && role != PeerRole::kWorker) {
    *kind = Refusal::kDataOp;
    return PermissionDenied("data op " + std::to_string(op) + " from role '" + PeerRoleName(role) +
                            "' (only workers of this job may)");
  }
  return Status::OK();
}

Status CheckCheckpointDir(const std::string& requested, const std::string& configured) {
  if (configured.empty()) {
    return PermissionDenied("checkpoint directory '" + requested +
                            "' refused: no checkpoint.dir is configured");
  }
  const std::string root = Resolved(configured), want = Resolved(requested);
  const bool inside = want == root || (want.size() > root.size() && want.rfind(root, 0) == 0 &&
                                       (root.back() == '/' || want[root.size()] == '/'));
  if (!inside) {
    return PermissionDenied("checkpoint directory '" + requested +
                            "' is outside the configured checkpoint.dir '" + configured + "'");
  }
  return Status::OK();
}

}  // namespace osprey::server
