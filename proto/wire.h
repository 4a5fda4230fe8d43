// Helpers for the data-plane framing shared by servers, clients and the coordinator:
// header (de)serialization with validation, and control-message frames.
#pragma once

#include <string>

#include "common/buffer.h"
#include "common/status.h"
#include "common/transport.h"
#include "osprey.pb.h"

namespace osprey {

// Serializes `header` into a new frame (protocol_version is set to the current one if 0).
Buffer SerializeHeader(const proto::Header& header);

// Parses frame 0 and checks the protocol version. InvalidArgument naming the problem.
StatusOr<proto::Header> ParseHeader(const Buffer& frame);

// Serializes any protobuf message into a frame (control messages ride in the values frame).
Buffer SerializeMessage(const google::protobuf::MessageLite& message);

// Parses a control message from a values frame; InvalidArgument naming `what` on failure.
Status ParseMessage(const Buffer& frame, google::protobuf::MessageLite* message, const char* what);

// A reply header for `request`: same request id, table and op OP_REPLY.
proto::Header ReplyHeader(const proto::Header& request);

// An OP_ERROR reply header carrying `status`.
proto::Header ErrorHeader(const proto::Header& request, const Status& status);

// The Status an OP_ERROR header carries (OK for other ops).
Status StatusFromHeader(const proto::Header& header);

}  // namespace osprey
