#include "common/config/table_config.h"

#include <limits>

#include "common/codec/codec.h"
#include "common/config/codec_yaml.h"
#include "common/config/yaml_fields.h"

namespace osprey::config {

const char* TableTypeName(TableType type) {
  return type == TableType::kSparse ? "sparse" : type == TableType::kDense ? "dense" : "unknown";
}

const char* InitTypeName(InitType type) {
  switch (type) {
    case InitType::kUniform: return "uniform";
    case InitType::kNormal: return "normal";
    case InitType::kZeros: return "zeros";
  }
  return "unknown";
}

void ParseTable(YamlFields& f, TableConfig* t) {
  f.Get("name", &t->name);
  f.GetEnum("type", &t->type, {{"sparse", TableType::kSparse}, {"dense", TableType::kDense}});
  f.Get("dim", &t->dim, 1, 65536);
  f.Get("size", &t->size, 0, uint64_t{1} << 40);
  f.Get("chunk_floats", &t->chunk_floats, 1, uint64_t{1} << 32);
  f.Section("init", [&](YamlFields& s) {
    s.GetEnum("type", &t->init.type,
              {{"uniform", InitType::kUniform}, {"normal", InitType::kNormal}, {"zeros", InitType::kZeros}});
    s.Get("scale", &t->init.scale, 0, 1e30);
    s.Get("seed", &t->init.seed, 0, std::numeric_limits<uint64_t>::max());
  });
  f.Section("optimizer", [&](YamlFields& s) { ParseOptimizer(s, &t->optimizer); });
  f.Section("consistency", [&](YamlFields& s) { ParseConsistency(s, &t->consistency); });
  f.Section("codec", [&](YamlFields& s) { ParseCodec(s, &t->codec); });
  f.Get("pull_codec", &t->pull_codec, {"none", "fp16", "bf16"});
  f.Section("admission", [&](YamlFields& s) {
    s.Get("min_count", &t->admission.min_count, 0, 1 << 30);
    s.Get("sketch_width", &t->admission.sketch_width, 16, 1 << 28);
    s.Get("sketch_depth", &t->admission.sketch_depth, 1, 16);
  });
  f.Section("eviction", [&](YamlFields& s) {
    s.Get("ttl_steps", &t->eviction.ttl_steps, 0, uint64_t{1} << 62);
    s.Get("ttl_seconds", &t->eviction.ttl_seconds, 0, 1e9);
    s.Get("max_rows", &t->eviction.max_rows, 0, uint64_t{1} << 32);
  });
  if (f.ok() && t->type == TableType::kDense && f.Has("admission")) {
    f.Fail("admission", "table '" + t->name + "' is dense; admission applies to sparse tables only");
  }
  if (f.ok() && t->type == TableType::kDense && f.Has("eviction")) {
    f.Fail("eviction", "table '" + t->name + "' is dense; eviction applies to sparse tables only");
  }
  if (f.ok() && t->name.empty()) f.Fail("name", "every table needs a non-empty name");
}

Status ValidateTableName(const std::string& file, const std::vector<TableConfig>& tables, size_t i) {
  for (size_t j = 0; j < i; ++j) {
    if (tables[i].name == tables[j].name) {
      return InvalidArgument(file + ": tables[" + std::to_string(i) + "].name: '" + tables[i].name +
                             "' is used twice");
    }
  }
  return Status::OK();
}

Status ValidateTableCodecs(const std::string& file, const TableConfig& table, size_t i) {
  Status codec = codec::ValidateCodecConfig(table.codec);
  if (!codec.ok()) {
    return InvalidArgument(file + ": tables[" + std::to_string(i) + "].codec: " + codec.message());
  }
  // A sparse table's pushes are already row-sparse (one deduplicated row per key): its rows go
  // whole, at most cast to 16 bits. Everything else would be silently meaningless there.
  const codec::CodecConfig& c = table.codec;
  if (table.type == TableType::kDense && table.pull_codec != "none") {
    return InvalidArgument(file + ": tables[" + std::to_string(i) + "].pull_codec: table '" + table.name +
                           "' is dense; only sparse tables' rows can be pulled as " + table.pull_codec);
  }
  if (c.adaptive_ratio.async_barrier && table.consistency.mode == ConsistencyMode::kAsync) {
    return InvalidArgument(file + ": tables[" + std::to_string(i) + "].codec.adaptive_ratio.async_barrier: table '" +
                           table.name + "' is async, which has no step barrier to leave (it needs consistency "
                           "bsp or ssp)");
  }
  if (table.type == TableType::kSparse) {
    const std::string where =
        file + ": tables[" + std::to_string(i) + "].codec: table '" + table.name + "' is sparse";
    if (c.type != "none" && c.type != "fp16" && c.type != "bf16") {
      return InvalidArgument(where + ": its gradient rows are sent whole, so the codec must be none, fp16 or bf16 "
                             "(got '" + c.type + "'; top-k, random-k and onebit are for dense tables)");
    }
    if (c.error_feedback || c.dgc_momentum != 0.0f || c.clip_norm != 0.0f || c.schedule.type != "none") {
      return InvalidArgument(where + ": error_feedback, dgc_momentum, clip_norm and schedule apply to dense "
                             "tables only");
    }
  }
  return Status::OK();
}

}  // namespace osprey::config
