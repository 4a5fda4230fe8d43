// YamlFields: typed, validated reading of one YAML mapping, with errors that name the file, the
// key path and the problem ("configs/local.yaml: tables[0].optimizer.lr: must be > 0, got -1").
//
// Usage, one per mapping:
//   YamlFields f(node, "cluster", ctx);
//   f.Get("servers", &c.num_servers, 1, 4096);
//   f.Get("transport", &c.transport, {"tcp", "ipc"});
//   OSPREY_RETURN_IF_ERROR(f.Finish());   // also rejects keys nobody asked for
// The first error is kept; later calls are no-ops once an error occurred. Not thread-safe.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace osprey::config {

class YamlFields {
 public:
  // `path` is the key path of `node` ("" for the document root); `file` prefixes every error.
  YamlFields(const YAML::Node& node, std::string path, std::string file);

  void Get(const char* key, bool* out);
  void Get(const char* key, std::string* out);
  // One of `allowed`.
  void Get(const char* key, std::string* out, const std::vector<std::string>& allowed);
  // One of the names in `names`, stored as its enum value; the error lists the names in order
  // ("'x' is not one of: bsp, ssp, async"). An absent key leaves *out as it is.
  template <typename E>
  void GetEnum(const char* key, E* out, const std::vector<std::pair<std::string, E>>& names) {
    std::vector<std::string> allowed;
    std::string value;
    for (const auto& n : names) {
      allowed.push_back(n.first);
      if (n.second == *out) value = n.first;
    }
    Get(key, &value, allowed);
    for (const auto& n : names) {
      if (n.first == value) *out = n.second;
    }
  }
  void Get(const char* key, int* out, int64_t lo, int64_t hi);
  void Get(const char* key, int64_t* out, int64_t lo, int64_t hi);
  void Get(const char* key, uint64_t* out, uint64_t lo, uint64_t hi);
  // Range [lo, hi]; `lo_open` makes it (lo, hi]. NaN and Inf are refused.
  void Get(const char* key, float* out, double lo, double hi, bool lo_open = false);
  void Get(const char* key, double* out, double lo, double hi, bool lo_open = false);
  void GetList(const char* key, std::vector<int>* out, int64_t lo, int64_t hi);
  void GetList(const char* key, std::vector<uint64_t>* out, uint64_t lo, uint64_t hi);
  void GetList(const char* key, std::vector<std::string>* out);  // a list of strings
  // A nested mapping: calls parse(sub_fields) when present (absent: nothing happens).
  void Section(const char* key, const std::function<void(YamlFields&)>& parse);
  // A sequence of mappings.
  void SectionList(const char* key, const std::function<void(YamlFields&, size_t)>& parse);

  // Records a validation error at `key` (for cross-field checks).
  void Fail(const std::string& key, const std::string& problem);
  bool Has(const char* key) const;
  bool ok() const { return status_.ok(); }
  const std::string& file() const { return file_; }
  std::string PathOf(const std::string& key) const;

  // Rejects unknown keys (listing the known ones) and returns the first error.
  Status Finish();

 private:
  // The value of `key` in this mapping, or an undefined node.
  YAML::Node Lookup(const char* key) const;
  // Marks `key` as known; when present and a scalar, sets *out and returns true.
  bool Scalar(const char* key, YAML::Node* out);
  template <typename T>
  bool ParseScalar(const char* key, T* value, const char* type_name);

  YAML::Node node_;
  std::string path_;
  std::string file_;
  std::vector<std::string> known_;
  Status status_;
};

// Applies "a.b.c=value" overrides to a loaded document. Path segments address mapping keys;
// on a sequence a segment is an index or the `name:` of an element. The value is parsed as YAML
// ("0.1", "[64, 16]", "adam"). Errors name the override and what could not be resolved.
Status ApplyOverride(YAML::Node* root, const std::string& assignment);

}  // namespace osprey::config
