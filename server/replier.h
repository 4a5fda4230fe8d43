// Replier: the narrow reply interface a TableShard answers its own requests through (held pulls,
// and push acknowledgements held until their window is applied), so it never hands transport
// messages back to the Server.
//
// Implemented by Server (over its Transport); tests inject a recording one. Thread-safety: Reply
// and ReplyError may be called from any thread (a TableShard calls them under the server's work
// lock, from whichever thread closed a window); they never call back into the TableShard.
#pragma once

#include "common/buffer.h"
#include "common/status.h"
#include "common/transport.h"
#include "proto/wire.h"

namespace osprey::server {

class Replier {
 public:
  virtual ~Replier() = default;
  // Sends `header` (a reply built by ReplyHeader from the request) and `values` to `peer`. A send
  // that fails is the implementation's to log; the caller has nothing left to do for it.
  virtual void Reply(PeerId peer, const proto::Header& header, Buffer values) = 0;
  // Sends an OP_ERROR reply to `request` from `peer` carrying `status` (counted as a bad request).
  virtual void ReplyError(PeerId peer, const proto::Header& request, const Status& status) = 0;
};

// A request whose reply is owed: where it came from and its header (ReplyHeader's input).
struct PendingReply {
  PeerId peer = 0;
  proto::Header request;
};

}  // namespace osprey::server
