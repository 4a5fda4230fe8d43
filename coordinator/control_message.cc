#include "coordinator/control_message.h"

#include <utility>

#include "proto/wire.h"

namespace osprey::coordinator {
namespace {

proto::Header BaseHeader(proto::Op op, uint64_t request_id) {
  proto::Header h;
  h.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  h.set_op(op);
  h.set_request_id(request_id);
  return h;
}

}  // namespace

Message MakeRequest(PeerId peer, proto::Op op, uint64_t request_id,
                    const google::protobuf::MessageLite* body) {
  Message msg;
  msg.peer = peer;
  if (body != nullptr) msg.values = SerializeMessage(*body);
  proto::Header h = BaseHeader(op, request_id);
  h.set_value_bytes(msg.values.size());
  msg.header = SerializeHeader(h);
  return msg;
}

Message MakeReply(PeerId peer, uint64_t request_id, Buffer payload) {
  Message msg;
  msg.peer = peer;
  proto::Header h = BaseHeader(proto::OP_REPLY, request_id);
  h.set_value_bytes(payload.size());
  msg.header = SerializeHeader(h);
  msg.values = std::move(payload);
  return msg;
}

Message MakeErrorReply(PeerId peer, uint64_t request_id, const Status& status) {
  Message msg;
  msg.peer = peer;
  msg.header = SerializeHeader(ErrorHeader(BaseHeader(proto::OP_ERROR, request_id), status));
  return msg;
}

Status ParseRequestHeader(const Message& msg, proto::Header* header) {
  StatusOr<proto::Header> parsed = ParseHeader(msg.header);
  if (parsed.ok()) {
    *header = std::move(parsed).value();
    return Status::OK();
  }
  // Best effort, so that a peer speaking another version can match the error to its request.
  header->Clear();
  if (!header->ParseFromArray(msg.header.data(), static_cast<int>(msg.header.size()))) {
    header->Clear();
  }
  return parsed.status();
}

Status CheckNoKeys(const Message& msg, proto::Op op) {
  if (msg.keys.empty()) return Status::OK();
  return InvalidArgument(OpName(op) + ": control messages carry no keys, got " +
                         std::to_string(msg.keys.size()) + " bytes in frame 1");
}

Status ParseBody(const Message& msg, proto::Op op, google::protobuf::MessageLite* body) {
  OSPREY_RETURN_IF_ERROR(CheckNoKeys(msg, op));
  return ParseMessage(msg.values, body, body->GetTypeName().c_str())
      .WithContext(OpName(op));
}

std::string OpName(proto::Op op) {
  if (proto::Op_IsValid(op)) return proto::Op_Name(op);
  return "op " + std::to_string(static_cast<int>(op));
}

}  // namespace osprey::coordinator
