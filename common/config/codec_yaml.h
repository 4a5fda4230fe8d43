// YAML form of a table's `codec` mapping (gradient compression of pushes).
#pragma once

#include "common/codec/codec_config.h"

namespace osprey::config {

class YamlFields;

// Reads `codec` keys into `c`; validation of values happens in codec::ValidateCodecConfig, whose
// errors LoadJobConfig reports with the table's key path.
void ParseCodec(YamlFields& f, codec::CodecConfig* c);

}  // namespace osprey::config
