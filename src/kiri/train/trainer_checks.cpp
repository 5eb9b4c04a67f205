// The trainer's checks that the ranks agree and that the run makes progress: every rank
// resolved the same config (at start), and the loss has not stayed non-finite.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "kiri/base/hash.h"
#include "kiri/base/units.h"
#include "kiri/comm/agree.h"
#include "kiri/train/offload_io.h"
#include "kiri/train/trainer.h"

namespace kiri::train {

using nlohmann::json;

namespace {
// A value for a message, bounded (a config value is short; a hostile one need not be).
std::string bounded_dump(const json& j) {
  std::string s = j.dump();
  if (s.size() > 80) s = s.substr(0, 80) + "...";
  return s;
}

// "train.lr is 0.002 here and 0.001 on rank 0": the first key where `mine` differs from
// `rank0`'s (both config JSON); "" when they cannot be compared.
std::string first_difference(const std::string& mine, const std::string& rank0) {
  try {
    const json a = json::parse(rank0), b = json::parse(mine);
    const json patch = json::diff(a, b);
    if (patch.empty()) return "";
    const json::json_pointer at(patch.front().at("path").get<std::string>());
    std::string key = at.to_string().substr(1);
    std::replace(key.begin(), key.end(), '/', '.');
    return str(key, " is ", b.contains(at) ? bounded_dump(b.at(at)) : "unset", " here and ",
               a.contains(at) ? bounded_dump(a.at(at)) : "unset", " on rank 0");
  } catch (const json::exception&) {
    return "";
  }
}

}  // namespace

void Trainer::check_same_config() {
  if (world_->size() == 1) return;
  const uint64_t hash = fnv1a64(config_json_);  // the config's fingerprint
  Tensor mine = Tensor::empty({2}, DType::kI32, Category::kBuffers, allocator_);
  std::memcpy(mine.data<int32_t>(), &hash, sizeof hash);
  Tensor all =
      Tensor::empty({2 * int64_t{world_->size()}}, DType::kI32, Category::kBuffers, allocator_);
  world_->all_gather(mine, all);
  std::vector<uint64_t> hashes(static_cast<size_t>(world_->size()));
  std::memcpy(hashes.data(), all.data<int32_t>(), hashes.size() * sizeof(uint64_t));
  std::string differ;
  for (size_t r = 1; r < hashes.size(); ++r)
    if (hashes[r] != hashes[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  if (differ.empty()) return;
  // Rank 0's config, so that the ranks that differ can name the first key.
  Tensor length = Tensor::empty({1}, DType::kI32, Category::kBuffers, allocator_);
  length.data<int32_t>()[0] = static_cast<int32_t>(config_json_.size());
  world_->broadcast(length, 0);
  Tensor text = Tensor::empty({std::max<int64_t>(1, length.data<int32_t>()[0])}, DType::kU8,
                              Category::kBuffers, allocator_);
  if (world_->rank() == 0)
    std::memcpy(text.data<uint8_t>(), config_json_.data(), config_json_.size());
  world_->broadcast(text, 0);
  const std::string rank0(reinterpret_cast<const char*>(text.data<uint8_t>()),
                          static_cast<size_t>(length.data<int32_t>()[0]));
  comm::run_agreed(*world_, [&] {
    if (hash == hashes[0]) return;
    const std::string diff = first_difference(config_json_, rank0);
    KIRI_RAISE(kConfig, "the ranks resolved different configs: rank ", world_->rank(),
               diff.empty() ? std::string(" differs from rank 0") : "'s " + diff,
               " (ranks that differ from rank 0: ", differ,
               "); every rank must run the same command line, config file and --set flags");
  });
}

void Trainer::count_nonfinite(const StepMetrics& m, int64_t& count) const {
  // fp16's dynamic scaler skips overflowed steps and halves the scale: that is progress,
  // until the scale reaches min_loss_scale (or is static) and cannot back off further.
  const bool scaler_can_back_off = scaler_ && cfg_.train.loss_scale == 0 && m.loss_scale &&
                                   *m.loss_scale > cfg_.train.min_loss_scale;
  const bool stuck = !std::isfinite(m.loss) || (m.skipped && !scaler_can_back_off);
  count = stuck ? count + 1 : 0;
  const int64_t limit = cfg_.train.max_nonfinite_steps;
  // The loss is all-reduced and the skip decided over the shard group, so every rank
  // raises at the same step; rank 0 prints it.
  KIRI_CHECK_KIND(kConfig, limit == 0 || count < limit, "the run diverged: ", count,
                  " steps in a row (steps ", step_ - count + 1, "-", step_,
                  ") had a non-finite loss or skipped the update for non-finite gradients",
                  !scaler_                     ? ""
                  : cfg_.train.loss_scale == 0 ? " at the minimum loss scale"
                                               : " at the static loss scale",
                  " (train.max_nonfinite_steps = ", limit,
                  "); stopping without saving these weights: lower train.lr, raise "
                  "train.warmup, or resume from an earlier checkpoint");
}

}  // namespace kiri::train

namespace kiri::train {

void Trainer::check_model_states_fit() const {
  const int64_t limit = allocator_.stats().limit;
  if (limit <= 0) return;
  int64_t local = 0;  // this rank's parameter elements (its pipeline chunks, its tp parts)
  for (const auto& c : chunks_)
    for (nn::Parameter* p : c->parameters()) local += p->numel();
  const Layout& sharding = cfg_.parallel;
  const int64_t n = sharding.stage() == 0 ? 1 : sharding.shard_size();
  const int64_t d = static_cast<int64_t>(dtype_size(compute_dtype()));
  const int64_t shard = local / n;  // rounded down: padding only adds
  const bool opt_off = cfg_.offload.optimizer == OffloadTier::kNvme;
  const bool par_off = cfg_.offload.parameters == OffloadTier::kNvme;
  const int64_t params = par_off ? 0 : d * (sharding.stage() < 3 ? local : shard);
  const int64_t grads =
      offload_gradients(cfg_.offload) ? 0 : d * (sharding.stage() < 2 ? local : shard);
  const int64_t states =
      opt_off ? 0
              : (compute_dtype() == DType::kF32 ? 8 : 12) * (sharding.stage() == 0 ? local : shard);
  if (params + grads + states <= limit) return;
  const Category largest = states >= params && states >= grads ? Category::kOptimizerStates
                           : params >= grads                   ? Category::kParameters
                                                               : Category::kGradients;
  // Worded as the allocator's own message, which tests and users grep for.
  std::string msg =
      str("allocating the model states (at least ", format_bytes(params + grads + states),
          " per rank: parameters ", format_bytes(params), ", gradients ", format_bytes(grads),
          ", optimizer states ", format_bytes(states), ") would exceed the limit of ",
          format_bytes(limit), " (train.mem_limit; the largest category is ",
          category_name(largest), "); nothing was allocated yet");
  if (advisor_) {
    // As the allocator would have seen it: every category in place but the largest, which
    // is the allocation that fails.
    MemoryStats s = allocator_.stats();
    const int64_t need = largest == Category::kOptimizerStates ? states
                         : largest == Category::kParameters    ? params
                                                               : grads;
    s.current[static_cast<int>(Category::kParameters)] = params;
    s.current[static_cast<int>(Category::kGradients)] = grads;
    s.current[static_cast<int>(Category::kOptimizerStates)] = states;
    s.current[static_cast<int>(largest)] = 0;
    s.allocated = params + grads + states - need;
    try {
      msg += "\n" + advisor_(cfg_, world_->size(), s, largest, need);
    } catch (const std::exception& e) {
      msg += str("\n(no planner advice: ", e.what(), ")");
    }
  }
  KIRI_RAISE(kOutOfMemory, msg);
}

}  // namespace kiri::train
