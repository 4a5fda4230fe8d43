// Trainer's step boundary for a scale step (scale_pause.h): with the last step's pushes answered
// nothing of this loop is in flight, so switching to another Client loses and repeats nothing.
#include "worker/trainer.h"

namespace osprey::worker {

Status Trainer::AtBoundary(int64_t step) {
  OSPREY_RETURN_IF_ERROR(WaitPushes());
  OSPREY_ASSIGN_OR_RETURN(Client* next, boundary_->Pause(step));
  if (next == client_) return Status::OK();
  // The new client routes by the new map; the tables' encoders are installed on it afresh (a
  // dense compressor's error-feedback residual starts from zero again).
  client_ = next;
  compressor_ = nullptr;
  int dense_index = job_.TableIndex(job_.model.dense_table);
  if (dense_index >= 0) {
    OSPREY_ASSIGN_OR_RETURN(compressor_, SetTableCodecs(job_.tables[dense_index], dense_table_, rank_ + 1, client_));
    // The adaptive ratio's current choice carries over to the new compressor.
    if (compressor_ != nullptr && adaptive_ != nullptr) {
      compressor_->SetAdaptive(adaptive_->density(), adaptive_->cheap_select());
    }
  }
  int sparse_index = job_.TableIndex(job_.model.sparse_table);
  if (sparse_index >= 0) {
    OSPREY_RETURN_IF_ERROR(SetTableCodecs(job_.tables[sparse_index], sparse_table_, rank_ + 1, client_).status());
  }
  return Status::OK();
}

}  // namespace osprey::worker
