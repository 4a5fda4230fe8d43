// Optimizer::ApplyRows (the batched path of the server's sparse merge-then-apply) must write the
// same bytes as Apply called row by row, for every optimizer, with shared and per-row options,
// clipping and weight decay on, over several steps, including a row that repeats in one batch.
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "server/optim/optimizer.h"

namespace osprey::server {
namespace {

class ApplyRowsTest : public ::testing::TestWithParam<OptimizerType> {};

TEST_P(ApplyRowsTest, BatchedEqualsPerRowBitExactly) {
  OptimizerConfig c;
  c.type = GetParam();
  c.lr = 0.05f;
  c.weight_decay = 0.01f;
  c.clip_value = 0.8f;
  c.clip_norm = 2.0f;
  c.ftrl_l1 = 0.01f;
  auto opt = std::move(Optimizer::Make(c)).value();
  constexpr size_t kDim = 37, kRows = 101, kSteps = 3;  // odd sizes: vector tails, partial batches
  const size_t row_floats = kDim + opt->state_floats(kDim);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> a(kRows * row_floats), b;
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t i = 0; i < kDim; ++i) a[r * row_floats + i] = u(rng);
    opt->InitState(a.data() + r * row_floats + kDim, kDim);
  }
  b = a;
  // Batch order: a permutation with row 7 twice (two steps on it, in order).
  std::vector<size_t> order(kRows);
  for (size_t i = 0; i < kRows; ++i) order[i] = (i * 37) % kRows;
  order.push_back(7);
  std::vector<float> g(order.size() * kDim);
  std::vector<ApplyOptions> per_row(order.size());
  for (size_t i = 0; i < per_row.size(); ++i) {
    per_row[i].lr_scale = 1.0f / static_cast<float>(1 + i % 4);
    per_row[i].momentum_scale = 0.25f * static_cast<float>(i % 5);
  }
  for (size_t step = 0; step < kSteps; ++step) {
    for (float& x : g) x = u(rng);
    const bool use_per_row = step != 1;  // step 1: one shared ApplyOptions for every row
    ApplyOptions shared;
    shared.lr_scale = 0.5f;
    std::vector<float*> rows;
    for (size_t i = 0; i < order.size(); ++i) {
      float* row = a.data() + order[i] * row_floats;
      opt->Apply(row, row + kDim, g.data() + i * kDim, kDim, use_per_row ? per_row[i] : shared);
      rows.push_back(b.data() + order[i] * row_floats);
    }
    opt->ApplyRows(rows.data(), g.data(), rows.size(), kDim, shared,
                   use_per_row ? per_row.data() : nullptr);
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << OptimizerTypeName(c.type) << ": batched rows differ from per-row Apply at step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllOptimizers, ApplyRowsTest,
    ::testing::Values(OptimizerType::kSgd, OptimizerType::kMomentum, OptimizerType::kNesterov,
                      OptimizerType::kAdagrad, OptimizerType::kAdam, OptimizerType::kFtrl),
    [](const auto& info) { return std::string(OptimizerTypeName(info.param)); });

}  // namespace
}  // namespace osprey::server
