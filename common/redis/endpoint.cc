// Endpoint parsing and printing, and Reply::DebugString.
#include <cerrno>
#include <cstdlib>

#include "common/redis/redis_client.h"

namespace osprey::redis {

std::string Endpoint::ToString() const { return host + ":" + std::to_string(port); }

namespace {

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return s.substr(b, e - b);
}

StatusOr<Endpoint> ParseOne(const std::string& entry, size_t index, const std::string& list) {
  const std::string where = "redis endpoint #" + std::to_string(index + 1) + " '" + entry +
                            "' in '" + list + "'";
  if (entry.empty()) return InvalidArgument(where + ": empty entry");
  Endpoint ep;
  const size_t colon = entry.rfind(':');
  if (colon == std::string::npos) {
    ep.host = entry;
    return ep;
  }
  ep.host = entry.substr(0, colon);
  const std::string port = entry.substr(colon + 1);
  if (ep.host.empty()) return InvalidArgument(where + ": no host before ':'");
  if (ep.host.find(':') != std::string::npos) {
    return InvalidArgument(where + ": more than one ':' (IPv6 literals are not supported)");
  }
  if (port.empty()) return InvalidArgument(where + ": no port after ':'");
  char* end = nullptr;
  errno = 0;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || p < 1 || p > 65535) {
    return InvalidArgument(where + ": port '" + port + "' is not a number in 1..65535");
  }
  ep.port = static_cast<int>(p);
  return ep;
}

}  // namespace

StatusOr<std::vector<Endpoint>> ParseEndpoints(const std::string& list) {
  std::vector<Endpoint> out;
  if (Trim(list).empty()) return InvalidArgument("redis endpoints: empty list (want host:port,...)");
  size_t start = 0;
  for (size_t index = 0;; ++index) {
    const size_t comma = list.find(',', start);
    const std::string entry =
        Trim(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    OSPREY_ASSIGN_OR_RETURN(Endpoint ep, ParseOne(entry, index, list));
    out.push_back(std::move(ep));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string Reply::DebugString() const {
  constexpr size_t kMaxShown = 64;
  auto shown = [&] { return str.size() > kMaxShown ? str.substr(0, kMaxShown) + "..." : str; };
  switch (type) {
    case Type::kString: return "\"" + shown() + "\"";
    case Type::kStatus: return shown();
    case Type::kError: return "(error) " + shown();
    case Type::kInteger: return "(integer) " + std::to_string(integer);
    case Type::kNil: return "(nil)";
    case Type::kArray: {
      std::string s = "[";
      for (size_t i = 0; i < elements.size(); ++i) s += (i ? ", " : "") + elements[i].DebugString();
      return s + "]";
    }
  }
  return "?";
}

}  // namespace osprey::redis
