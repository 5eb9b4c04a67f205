#include "kiri/train/run_config.h"

namespace kiri::train {

ShardLayout resolve_sharding(const ParallelConfig& p) {
  ShardLayout out{p.zero_stage, p.shard_group_size};
  KIRI_CHECK_KIND(kConfig, p.zero_stage >= 0 && p.zero_stage <= 3,
                  "parallel.zero_stage must be 0, 1, 2 or 3, got ", p.zero_stage);
  if (!p.sharding_strategy.empty()) {
    const std::string& s = p.sharding_strategy;
    int stage = -1;
    if (s == "NO_SHARD") stage = 0;
    if (s == "SHARD_GRAD_OP") stage = 2;
    if (s == "FULL_SHARD" || s == "HYBRID_SHARD") stage = 3;
    KIRI_CHECK_KIND(kConfig, stage >= 0,
                    "parallel.sharding_strategy must be NO_SHARD, "
                    "SHARD_GRAD_OP, FULL_SHARD or HYBRID_SHARD, got '",
                    s, "'");
    KIRI_CHECK_KIND(kConfig, p.zero_stage == 0 || p.zero_stage == stage,
                    "parallel.zero_stage = ", p.zero_stage,
                    " contradicts parallel.sharding_strategy = ", s, " (ZeRO stage ", stage,
                    "); set one of them");
    out.stage = stage;
    if (s == "HYBRID_SHARD") {
      KIRI_CHECK_KIND(
          kConfig,
          p.shard_group_size > 1 && p.shard_group_size < p.dp && p.dp % p.shard_group_size == 0,
          "HYBRID_SHARD needs parallel.shard_group_size dividing parallel.dp = ", p.dp,
          " and between 2 and dp - 1 (shard within a group, replicate across "
          "groups), got ",
          p.shard_group_size);
    } else {
      KIRI_CHECK_KIND(kConfig, p.shard_group_size == 0 || p.shard_group_size == p.dp,
                      "parallel.shard_group_size = ", p.shard_group_size, " is for HYBRID_SHARD; ",
                      s, " shards over the whole dp group");
    }
  }
  if (out.group_size != 0)
    KIRI_CHECK_KIND(kConfig, out.stage >= 1 && p.dp % out.group_size == 0,
                    "parallel.shard_group_size = ", out.group_size,
                    " needs a ZeRO stage >= 1 and must divide parallel.dp = ", p.dp);
  return out;
}

}  // namespace kiri::train
