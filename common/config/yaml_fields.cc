#include "common/config/yaml_fields.h"

#include <cmath>
#include <limits>
#include <sstream>

namespace osprey::config {

YamlFields::YamlFields(const YAML::Node& node, std::string path, std::string file)
    : node_(node), path_(std::move(path)), file_(std::move(file)) {
  if (node_ && !node_.IsNull() && !node_.IsMap()) {
    status_ = InvalidArgument(file_ + ": " + (path_.empty() ? "<root>" : path_) +
                              ": expected a mapping of key: value");
  }
}

std::string YamlFields::PathOf(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

void YamlFields::Fail(const std::string& key, const std::string& problem) {
  if (status_.ok()) status_ = InvalidArgument(file_ + ": " + PathOf(key) + ": " + problem);
}

YAML::Node YamlFields::Lookup(const char* key) const {
  // Iterates instead of operator[]: yaml-cpp's operator[] on a non-const node inserts the key.
  if (node_.IsDefined() && node_.IsMap()) {
    for (const auto& kv : node_) {
      if (kv.first.IsScalar() && kv.first.Scalar() == key) return kv.second;
    }
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

bool YamlFields::Has(const char* key) const {
  YAML::Node n = Lookup(key);
  return n.IsDefined() && !n.IsNull();
}

bool YamlFields::Scalar(const char* key, YAML::Node* out) {
  known_.emplace_back(key);
  if (!status_.ok() || !Has(key)) return false;
  YAML::Node n = Lookup(key);
  if (!n.IsScalar()) {
    Fail(key, "expected a single value, got a " + std::string(n.IsMap() ? "mapping" : "list"));
    return false;
  }
  *out = n;
  return true;
}

template <typename T>
bool YamlFields::ParseScalar(const char* key, T* value, const char* type_name) {
  YAML::Node n;
  if (!Scalar(key, &n)) return false;
  try {
    *value = n.as<T>();
  } catch (const YAML::Exception&) {
    Fail(key, std::string("expected ") + type_name + ", got '" + n.Scalar() + "'");
    return false;
  }
  return true;
}

void YamlFields::Get(const char* key, bool* out) { ParseScalar(key, out, "true or false"); }

void YamlFields::Get(const char* key, std::string* out) { ParseScalar(key, out, "a string"); }

void YamlFields::Get(const char* key, std::string* out, const std::vector<std::string>& allowed) {
  std::string v;
  if (!ParseScalar(key, &v, "a string")) return;
  for (const auto& a : allowed) {
    if (a == v) {
      *out = v;
      return;
    }
  }
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  Fail(key, "'" + v + "' is not one of: " + list);
}

void YamlFields::Get(const char* key, int64_t* out, int64_t lo, int64_t hi) {
  int64_t v;
  if (!ParseScalar(key, &v, "an integer")) return;
  if (v < lo || v > hi) {
    Fail(key, "value " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "]");
    return;
  }
  *out = v;
}

void YamlFields::Get(const char* key, int* out, int64_t lo, int64_t hi) {
  int64_t v = *out;
  Get(key, &v, lo, hi);
  *out = static_cast<int>(v);
}

void YamlFields::Get(const char* key, uint64_t* out, uint64_t lo, uint64_t hi) {
  YAML::Node n;
  if (!Scalar(key, &n)) return;
  if (!n.Scalar().empty() && n.Scalar()[0] == '-') {
    Fail(key, "expected a non-negative integer, got '" + n.Scalar() + "'");
    return;
  }
  uint64_t v;
  try {
    v = n.as<uint64_t>();
  } catch (const YAML::Exception&) {
    Fail(key, "expected a non-negative integer, got '" + n.Scalar() + "'");
    return;
  }
  if (v < lo || v > hi) {
    Fail(key, "value " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "]");
    return;
  }
  *out = v;
}

void YamlFields::Get(const char* key, double* out, double lo, double hi, bool lo_open) {
  double v;
  if (!ParseScalar(key, &v, "a number")) return;
  if (!std::isfinite(v)) {
    Fail(key, "expected a finite number, got '" + Lookup(key).Scalar() + "'");
    return;
  }
  if ((lo_open ? v <= lo : v < lo) || v > hi) {
    std::ostringstream os;
    os << "value " << v << " is out of range " << (lo_open ? "(" : "[") << lo << ", " << hi << "]";
    Fail(key, os.str());
    return;
  }
  *out = v;
}

void YamlFields::Get(const char* key, float* out, double lo, double hi, bool lo_open) {
  double v = *out;
  Get(key, &v, lo, hi, lo_open);
  *out = static_cast<float>(v);
}

void YamlFields::GetList(const char* key, std::vector<uint64_t>* out, uint64_t lo, uint64_t hi) {
  known_.emplace_back(key);
  if (!status_.ok() || !Has(key)) return;
  YAML::Node n = Lookup(key);
  if (!n.IsSequence()) {
    Fail(key, "expected a list like [1, 2, 3]");
    return;
  }
  std::vector<uint64_t> v;
  for (size_t i = 0; i < n.size(); ++i) {
    std::string item = key + ("[" + std::to_string(i) + "]");
    uint64_t x = 0;
    try {
      if (!n[i].IsScalar() || (!n[i].Scalar().empty() && n[i].Scalar()[0] == '-')) throw YAML::Exception(YAML::Mark(), "");
      x = n[i].as<uint64_t>();
    } catch (const YAML::Exception&) {
      Fail(item, "expected a non-negative integer");
      return;
    }
    if (x < lo || x > hi) {
      Fail(item, "value " + std::to_string(x) + " is out of range [" + std::to_string(lo) +
                     ", " + std::to_string(hi) + "]");
      return;
    }
    v.push_back(x);
  }
  *out = std::move(v);
}

void YamlFields::GetList(const char* key, std::vector<int>* out, int64_t lo, int64_t hi) {
  std::vector<uint64_t> v;
  bool had = Has(key);
  GetList(key, &v, static_cast<uint64_t>(std::max<int64_t>(lo, 0)), static_cast<uint64_t>(hi));
  if (!had || !status_.ok()) return;
  out->assign(v.begin(), v.end());
}

void YamlFields::GetList(const char* key, std::vector<std::string>* out) {
  known_.emplace_back(key);
  if (!status_.ok() || !Has(key)) return;
  YAML::Node n = Lookup(key);
  if (!n.IsSequence()) {
    Fail(key, "expected a list like [python3, train.py]");
    return;
  }
  std::vector<std::string> v;
  for (size_t i = 0; i < n.size(); ++i) {
    if (!n[i].IsScalar()) {
      Fail(key + ("[" + std::to_string(i) + "]"), "expected a string");
      return;
    }
    v.push_back(n[i].Scalar());
  }
  *out = std::move(v);
}

void YamlFields::Section(const char* key, const std::function<void(YamlFields&)>& parse) {
  known_.emplace_back(key);
  if (!status_.ok() || !Has(key)) return;
  YamlFields sub(Lookup(key), PathOf(key), file_);
  if (sub.ok()) parse(sub);
  Status s = sub.Finish();
  if (status_.ok() && !s.ok()) status_ = s;
}

void YamlFields::SectionList(const char* key,
                             const std::function<void(YamlFields&, size_t)>& parse) {
  known_.emplace_back(key);
  if (!status_.ok() || !Has(key)) return;
  YAML::Node n = Lookup(key);
  if (!n.IsSequence()) {
    Fail(key, "expected a list of mappings");
    return;
  }
  for (size_t i = 0; i < n.size() && status_.ok(); ++i) {
    YamlFields sub(n[i], PathOf(key) + "[" + std::to_string(i) + "]", file_);
    if (sub.ok()) parse(sub, i);
    Status s = sub.Finish();
    if (!s.ok()) status_ = s;
  }
}

Status YamlFields::Finish() {
  if (!status_.ok() || !node_ || !node_.IsMap()) return status_;
  for (const auto& kv : node_) {
    std::string k = kv.first.as<std::string>();
    bool found = false;
    for (const auto& known : known_) found = found || known == k;
    if (!found) {
      std::string list;
      for (const auto& known : known_) list += (list.empty() ? "" : ", ") + known;
      Fail(k, "unknown key (known keys here: " + list + ")");
      break;
    }
  }
  return status_;
}

Status ApplyOverride(YAML::Node* root, const std::string& assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    return InvalidArgument("--set '" + assignment + "': expected key.path=value");
  }
  std::string path = assignment.substr(0, eq);
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    return InvalidArgument("--set '" + assignment + "': value is not valid YAML: " + e.msg);
  }
  std::vector<std::string> segs;
  std::stringstream ss(path);
  for (std::string s; std::getline(ss, s, '.');) {
    if (s.empty()) return InvalidArgument("--set '" + assignment + "': empty path segment");
    segs.push_back(s);
  }
  YAML::Node cur = *root;
  for (size_t i = 0; i < segs.size(); ++i) {
    const std::string& seg = segs[i];
    bool last = i + 1 == segs.size();
    if (cur.IsSequence()) {
      YAML::Node next;
      bool found = false;
      char* end = nullptr;
      unsigned long idx = std::strtoul(seg.c_str(), &end, 10);
      if (end && *end == '\0' && idx < cur.size()) {
        next = cur[idx];
        found = true;
      } else {
        for (size_t j = 0; j < cur.size() && !found; ++j) {
          YAML::Node el = cur[j];
          if (el.IsMap() && el["name"].IsDefined() && el["name"].IsScalar() &&
              el["name"].Scalar() == seg) {
            next = el;
            found = true;
          }
        }
      }
      if (!found) {
        return InvalidArgument("--set '" + assignment + "': no element '" + seg + "' in list " +
                               path.substr(0, path.find(seg) - (i ? 1 : 0)));
      }
      if (last) return InvalidArgument("--set '" + assignment + "': cannot replace a list element");
      cur.reset(next);
      continue;
    }
    if (!cur.IsMap() && !cur.IsNull()) {
      return InvalidArgument("--set '" + assignment + "': '" + seg + "' is below a plain value");
    }
    if (last) {
      cur[seg] = value;
    } else {
      if (!cur[seg] || cur[seg].IsNull()) cur[seg] = YAML::Node(YAML::NodeType::Map);
      YAML::Node next = cur[seg];
      cur.reset(next);
    }
  }
  return Status::OK();
}

}  // namespace osprey::config
