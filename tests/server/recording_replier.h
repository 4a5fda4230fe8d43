// RecordingReplier: a Replier for tests that drive a TableShard directly; keeps every reply.
#pragma once

#include <vector>

#include "common/mutex.h"
#include "server/replier.h"

namespace osprey::server::testing {

class RecordingReplier : public Replier {
 public:
  struct Sent {
    PeerId peer;
    proto::Header header;  // the reply (OP_REPLY or OP_ERROR)
    Buffer values;
  };
  void Reply(PeerId peer, const proto::Header& header, Buffer values) override {
    MutexLock lock(&mu_);
    sent_.push_back(Sent{peer, header, std::move(values)});
  }
  void ReplyError(PeerId peer, const proto::Header& request, const Status& status) override {
    MutexLock lock(&mu_);
    sent_.push_back(Sent{peer, ErrorHeader(request, status), Buffer()});
  }
  std::vector<Sent> sent() {
    MutexLock lock(&mu_);
    return sent_;
  }

 private:
  Mutex mu_;
  std::vector<Sent> sent_ GUARDED_BY(mu_);
};

}  // namespace osprey::server::testing
