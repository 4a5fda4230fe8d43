#include "proto/wire.h"

namespace osprey {

Buffer SerializeHeader(const proto::Header& header) {
  if (header.protocol_version() != 0) return SerializeMessage(header);
  proto::Header copy = header;
  copy.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  return SerializeMessage(copy);
}

StatusOr<proto::Header> ParseHeader(const Buffer& frame) {
  proto::Header h;
  if (frame.empty() || !h.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
    return InvalidArgument("malformed header frame (" + std::to_string(frame.size()) +
                           " bytes do not parse as osprey.proto.Header)");
  }
  if (h.protocol_version() != proto::PROTOCOL_VERSION_CURRENT) {
    return InvalidArgument("protocol version " + std::to_string(h.protocol_version()) +
                           " is not supported (this build speaks " +
                           std::to_string(proto::PROTOCOL_VERSION_CURRENT) + ")");
  }
  return h;
}

Buffer SerializeMessage(const google::protobuf::MessageLite& message) {
  Buffer b = Buffer::Allocate(message.ByteSizeLong());
  message.SerializeWithCachedSizesToArray(b.mutable_data());
  return b;
}

Status ParseMessage(const Buffer& frame, google::protobuf::MessageLite* message, const char* what) {
  if (!message->ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
    return InvalidArgument(std::string("malformed ") + what + " (" + std::to_string(frame.size()) +
                           " bytes)");
  }
  return Status::OK();
}

proto::Header ReplyHeader(const proto::Header& request) {
  proto::Header h;
  h.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  h.set_op(proto::OP_REPLY);
  h.set_request_id(request.request_id());
  h.set_table(request.table());
  return h;
}

proto::Header ErrorHeader(const proto::Header& request, const Status& status) {
  proto::Header h = ReplyHeader(request);
  h.set_op(proto::OP_ERROR);
  h.set_status_code(static_cast<int>(status.code()));
  h.set_error(status.message());
  return h;
}

Status StatusFromHeader(const proto::Header& header) {
  if (header.op() != proto::OP_ERROR) return Status::OK();
  int code = header.status_code();
  if (code <= 0 || code > static_cast<int>(StatusCode::kPermissionDenied)) code = static_cast<int>(StatusCode::kInternal);
  return Status(static_cast<StatusCode>(code), header.error());
}

}  // namespace osprey
