// TableConfig: the typed form of one `tables[]` entry of a job config -- what a table's servers
// need (type, sizes, row initializer, optimizer, consistency, codecs) and what the coordinator
// puts in the shard map. Choices compared at run time are enums parsed at load time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/codec/codec_config.h"
#include "common/config/consistency_config.h"
#include "common/config/optimizer_config.h"
#include "common/status.h"

namespace osprey::config {

class YamlFields;

enum class TableType { kSparse, kDense };
// uniform: in [-scale, scale]; normal: stddev scale; zeros.
enum class InitType { kUniform, kNormal, kZeros };

// The config names ("sparse", "dense"; "uniform", "normal", "zeros").
const char* TableTypeName(TableType type);
const char* InitTypeName(InitType type);

// How a sparse row is initialized on first pull: a pure function of (seed, table, key).
struct InitConfig {
  InitType type = InitType::kUniform;
  float scale = 0.01f;
  uint64_t seed = 7;
};

// Feature admission of a sparse table (server/admission/): a key gets a row only once its pushes
// were seen min_count times, counted in a count-min sketch of sketch_depth rows of sketch_width
// counters (conservative update). min_count 0 or 1: every key is admitted (the default).
struct AdmissionConfig {
  int min_count = 0;
  int sketch_width = 1 << 20;
  int sketch_depth = 4;
  bool enabled() const { return min_count > 1; }
};

// Eviction of a sparse table's rows (server/admission/eviction.h): rows not updated for ttl_steps
// table versions or ttl_seconds are deleted, and past max_rows the least-recently-updated are.
// 0 turns each rule off (the default: no eviction).
struct EvictionConfig {
  uint64_t ttl_steps = 0;
  double ttl_seconds = 0;
  uint64_t max_rows = 0;
  bool enabled() const { return ttl_steps > 0 || ttl_seconds > 0 || max_rows > 0; }
};

struct TableConfig {
  std::string name;
  TableType type = TableType::kSparse;
  int dim = 16;                 // sparse: floats per row
  uint64_t size = 0;            // dense: floats; 0 = the model's dense parameter count
  uint64_t chunk_floats = 1 << 19;  // dense: placement chunk (2 MiB of fp32)
  InitConfig init;
  OptimizerConfig optimizer;
  ConsistencyConfig consistency;  // merge-then-apply mode and staleness policies
  codec::CodecConfig codec;       // compression of this table's pushes (default: none)
  std::string pull_codec = "none";  // sparse: wire type of pulled rows: none (fp32) | fp16 | bf16
  AdmissionConfig admission;        // sparse only
  EvictionConfig eviction;          // sparse only
};

// Reads one `tables[]` mapping into *t (a table without a name is refused).
void ParseTable(YamlFields& f, TableConfig* t);

// Cross-field checks of tables[i] (`file` prefixes the errors, which name the key to change):
// ValidateTableName: its name is not used by an earlier table. ValidateTableCodecs: its codec is
// valid (codec::ValidateCodecConfig), only a sparse table has a pull_codec other than none, and a
// sparse table's push codec is none, fp16 or bf16 without error feedback, momentum, clipping or
// schedule. Errors: InvalidArgument.
Status ValidateTableName(const std::string& file, const std::vector<TableConfig>& tables, size_t i);
Status ValidateTableCodecs(const std::string& file, const TableConfig& table, size_t i);

}  // namespace osprey::config
