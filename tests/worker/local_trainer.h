// LocalTrainer: plain SGD on one model in-process, with the sparse table as a hash map. Stands in
// for the parameter server in tests that check that a model and the data can learn.
#pragma once

#include <cmath>
#include <unordered_map>
#include <vector>

#include "worker/data/batch.h"
#include "worker/data/random.h"
#include "worker/models/model.h"

namespace osprey::models::test_util {

class LocalTrainer {
 public:
  // Rows start as N(0, row_init_std^2) per coordinate, derived from the key (like the PS does).
  LocalTrainer(Model* model, uint64_t seed, float dense_lr, float sparse_lr, float row_init_std)
      : model_(model), dim_(model->embedding_dim()), dense_lr_(dense_lr), sparse_lr_(sparse_lr),
        row_init_std_(row_init_std), params_(model->num_dense_params()) {
    model->InitDense(seed, params_.data());
  }

  // One SGD step on `batch`; returns the batch's mean loss.
  float Step(const data::Batch& batch) {
    Gather(batch, /*insert=*/true);
    dense_grad_.resize(params_.size());
    row_grad_.resize(rows_.size());
    probs_.resize(batch.size);
    const float loss = model_->ForwardBackward(params_.data(), rows_.data(), keys_.size(), row_index_.data(), batch,
                                               dense_grad_.data(), row_grad_.data(), probs_.data());
    for (size_t i = 0; i < params_.size(); ++i) params_[i] -= dense_lr_ * dense_grad_[i];
    for (size_t r = 0; r < keys_.size(); ++r) {
      float* row = table_[keys_[r]].data();
      for (int c = 0; c < dim_; ++c) row[c] -= sparse_lr_ * row_grad_[r * dim_ + c];
    }
    return loss;
  }

  // Predictions for `batch`; keys never trained on use their initial rows.
  std::vector<float> Predict(const data::Batch& batch) {
    Gather(batch, /*insert=*/false);
    std::vector<float> probs(batch.size);
    model_->Predict(params_.data(), rows_.data(), keys_.size(), row_index_.data(), batch, probs.data());
    return probs;
  }

  size_t table_size() const { return table_.size(); }

 private:
  void InitRow(uint64_t key, float* row) const {
    data::Rng rng(key);
    for (int c = 0; c < dim_; ++c) row[c] = static_cast<float>(row_init_std_ * rng.NextNormal());
  }

  void Gather(const data::Batch& batch, bool insert) {
    data::DedupeKeys(batch, &keys_, &row_index_);
    rows_.resize(keys_.size() * dim_);
    for (size_t r = 0; r < keys_.size(); ++r) {
      float* dst = rows_.data() + r * dim_;
      auto it = table_.find(keys_[r]);
      if (it != table_.end()) {
        std::copy(it->second.begin(), it->second.end(), dst);
        continue;
      }
      InitRow(keys_[r], dst);
      if (insert) table_.emplace(keys_[r], std::vector<float>(dst, dst + dim_));
    }
  }

  Model* model_;
  int dim_;
  float dense_lr_;
  float sparse_lr_;
  float row_init_std_;
  std::vector<float> params_;
  std::unordered_map<uint64_t, std::vector<float>> table_;
  std::vector<uint64_t> keys_;
  std::vector<int32_t> row_index_;
  std::vector<float> rows_, dense_grad_, row_grad_, probs_;
};

}  // namespace osprey::models::test_util
