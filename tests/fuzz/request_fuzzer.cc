// libFuzzer target over a server's request path: every input is cut into a request's three
// frames (fuzz_harness.h) and sent to a live, activated Server over the in-process transport --
// frame limits, header parse, op / table / epoch checks, keys-frame validation and ownership,
// codec meta and payload validation (DecodePushValues), pull casts, then the store and the
// optimizer for what passes. A crash, an ASan/UBSan report, a lost or a doubled reply fails the
// run.
#include <spdlog/spdlog.h>

#include <memory>

#include "tests/fuzz/fuzz_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::unique_ptr<osprey::fuzz::FuzzServer> target;
  static uint64_t runs = 0;
  // A fresh server now and then, so the rows that random keys create stay bounded.
  if (runs++ % 20000 == 0) {
    spdlog::set_level(spdlog::level::err);
    target.reset();
    target = std::make_unique<osprey::fuzz::FuzzServer>();
  }
  (void)target->Run(osprey::fuzz::SplitFrames(data, size));
  return 0;
}
