// Control messages between nodes and the coordinator: the request/reply framing on top of
// proto/wire.h.
//
// A control request is frame 0 = proto::Header (protocol_version = PROTOCOL_VERSION_CURRENT, op,
// request_id), frame 1 = empty keys, frame 2 = one serialized control message (RegisterRequest,
// Heartbeat, ...). The reply echoes request_id with op OP_REPLY (values = the reply message) or
// OP_ERROR (status_code + error, values empty).
//
// Every function here is pure and thread-safe. Nothing aborts on bad bytes: a message that cannot
// be parsed is an InvalidArgument the caller turns into an OP_ERROR reply and counts.
#pragma once

#include <cstdint>
#include <string>

#include "common/buffer.h"
#include "common/status.h"
#include "common/transport.h"
#include "osprey.pb.h"

namespace osprey::coordinator {

// A request to `peer`: header(op, request_id) | empty | `body` serialized (null: empty frame).
Message MakeRequest(PeerId peer, proto::Op op, uint64_t request_id,
                    const google::protobuf::MessageLite* body);

// The success reply to `request_id`, carrying `payload` (a serialized reply message, or empty).
Message MakeReply(PeerId peer, uint64_t request_id, Buffer payload);

// The OP_ERROR reply to `request_id` with status.code() and status.message().
// Precondition: !status.ok().
Message MakeErrorReply(PeerId peer, uint64_t request_id, const Status& status);

// Parses and checks frame 0 (ParseHeader of wire.h). On error *header still holds whatever
// could be read -- in particular the request_id of a header with a wrong protocol version, so the
// error reply can be matched by the sender; 0 when nothing could be read.
Status ParseRequestHeader(const Message& msg, proto::Header* header);

// InvalidArgument naming `op` when the keys frame is not empty (control messages carry no keys).
Status CheckNoKeys(const Message& msg, proto::Op op);

// CheckNoKeys, then parses the values frame into *body; InvalidArgument naming `op` when the
// bytes do not parse.
Status ParseBody(const Message& msg, proto::Op op, google::protobuf::MessageLite* body);

// "OP_REGISTER", or "op 99" for values the enum does not know.
std::string OpName(proto::Op op);

}  // namespace osprey::coordinator
