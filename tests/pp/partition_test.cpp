#include "kiri/parallel/pp/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "kiri/base/error.h"

namespace kiri::parallel::pp {
namespace {

void expect_config_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    FAIL() << "accepted; expected: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Stages are contiguous, cover [0, n_layer), each has >= 1 block, embedding first, head last.
void expect_well_formed(const std::vector<StageLayers>& parts, int n_layer) {
  int next = 0;
  for (size_t s = 0; s < parts.size(); ++s) {
    EXPECT_EQ(parts[s].first_block, next) << describe(parts);
    EXPECT_GE(parts[s].blocks(), 1) << describe(parts);
    EXPECT_EQ(parts[s].has_embedding, s == 0);
    EXPECT_EQ(parts[s].has_head, s + 1 == parts.size());
    next = parts[s].end_block;
  }
  EXPECT_EQ(next, n_layer);
}

double max_cost(const std::vector<StageLayers>& parts, const LayerCosts& c) {
  const std::vector<double> costs = stage_costs(parts, c);
  return *std::max_element(costs.begin(), costs.end());
}

// The optimum over every way to cut n blocks into s stages (compositions), by brute force.
double brute_force_best(int n, int s, const LayerCosts& c, std::vector<int>& counts, int left) {
  if (static_cast<int>(counts.size()) == s - 1) {
    counts.push_back(left);
    const double best = max_cost(partition_explicit(n, counts), c);
    counts.pop_back();
    return best;
  }
  double best = 1e300;
  for (int k = 1; k <= left - (s - 1 - static_cast<int>(counts.size())); ++k) {
    counts.push_back(k);
    best = std::min(best, brute_force_best(n, s, c, counts, left - k));
    counts.pop_back();
  }
  return best;
}

TEST(PpPartition, UniformCostsSplitEvenly) {
  const auto parts = partition_layers(12, 4, {1.0, 0.0, 0.0});
  expect_well_formed(parts, 12);
  for (const StageLayers& s : parts) EXPECT_EQ(s.blocks(), 3) << describe(parts);
  EXPECT_EQ(describe(parts), "[0, 3) +emb | [3, 6) | [6, 9) | [9, 12) +head");
}

// A head worth three blocks: the last stage gets 1 block (cost 4) and the others share 11.
TEST(PpPartition, HeavyHeadMovesBlocksOffTheLastStage) {
  const LayerCosts c{1.0, 0.0, 3.0};
  const auto parts = partition_layers(12, 4, c);
  expect_well_formed(parts, 12);
  EXPECT_EQ(parts.back().blocks(), 1) << describe(parts);
  EXPECT_DOUBLE_EQ(max_cost(parts, c), 4.0);
  // The naive 3/3/3/3 split would make the last stage cost 6.
  EXPECT_DOUBLE_EQ(max_cost(partition_explicit(12, {3, 3, 3, 3}), c), 6.0);
}

// GPT-2 small (C 768, V 50257, T 1024): the head costs ~3.5 blocks.
TEST(PpPartition, Gpt2SmallFromFlops) {
  const LayerCosts c = gpt_layer_costs(768, 12, 50257, 1024);
  EXPECT_DOUBLE_EQ(c.block, 3.0 * (24.0 * 768 * 768 + 4.0 * 1024 * 768));
  EXPECT_DOUBLE_EQ(c.head, 3.0 * 2.0 * 50257 * 768);
  EXPECT_LT(c.embedding, 1e-3 * c.block);
  const auto parts = partition_layers(12, 4, c);
  expect_well_formed(parts, 12);
  EXPECT_LT(parts.back().blocks(), parts.front().blocks()) << describe(parts);
  std::vector<int> counts;
  EXPECT_DOUBLE_EQ(max_cost(parts, c), brute_force_best(12, 4, c, counts, 12));
  expect_config_error([] { gpt_layer_costs(768, 7, 50257, 1024); },
                      "model.n_head = 7 must divide model.n_embd = 768");
}

// Llama 3 8B (C 4096, 32 query and 8 key/value heads, I 14336, V 128256, T 8192): grouped
// keys and values cost a quarter of q's; the 3-matrix MLP 6 C I.
TEST(PpPartition, Llama3_8BFromFlops) {
  const LayerCosts c = llama_layer_costs(4096, 32, 8, 14336, 128256, 8192);
  const double C = 4096, kv = 1024;
  EXPECT_DOUBLE_EQ(c.block, 3.0 * (4 * C * C + 4 * C * kv + 6 * C * 14336.0 + 4 * 8192.0 * C));
  EXPECT_DOUBLE_EQ(c.head, 3.0 * 2.0 * 128256 * C);
  EXPECT_LT(llama_layer_costs(4096, 32, 8, 14336, 128256, 8192).block,
            llama_layer_costs(4096, 32, 32, 14336, 128256, 8192).block);
  const auto parts = partition_layers(32, 4, c);
  expect_well_formed(parts, 32);
  std::vector<int> counts;
  EXPECT_DOUBLE_EQ(max_cost(parts, c), brute_force_best(32, 4, c, counts, 32));
  expect_config_error([] { llama_layer_costs(4096, 30, 8, 14336, 128256, 8192); },
                      "model.n_head = 30 must divide model.n_embd = 4096");
}

// The dynamic programme reaches the brute-force optimum on a grid of shapes and costs.
TEST(PpPartition, MatchesBruteForce) {
  for (int n = 1; n <= 9; ++n)
    for (int s = 1; s <= n && s <= 5; ++s)
      for (const LayerCosts& c : {LayerCosts{1, 0, 0}, LayerCosts{1, 0.5, 2.5},
                                  LayerCosts{0.3, 1.7, 0.1}, LayerCosts{2, 5, 7}}) {
        const auto parts = partition_layers(n, s, c);
        ASSERT_EQ(static_cast<int>(parts.size()), s);
        expect_well_formed(parts, n);
        std::vector<int> counts;
        EXPECT_DOUBLE_EQ(max_cost(parts, c), brute_force_best(n, s, c, counts, n))
            << n << " blocks on " << s << " stages: " << describe(parts);
      }
}

TEST(PpPartition, ChunksAreModelOrderAndMapRoundRobin) {
  const auto chunks = partition_chunks(16, 4, 2, {1.0, 0.0, 0.0});
  ASSERT_EQ(chunks.size(), 8u);
  expect_well_formed(chunks, 16);
  for (const StageLayers& c : chunks) EXPECT_EQ(c.blocks(), 2);
  EXPECT_EQ(chunk_rank(5, 4), 1);
  EXPECT_EQ(chunk_local_index(5, 4), 1);
  EXPECT_EQ(chunk_rank(3, 4), 3);
  EXPECT_EQ(chunk_local_index(3, 4), 0);
  expect_config_error([] { partition_chunks(6, 4, 2, {}); },
                      "parallel.pp x parallel.virtual_stages = 4 x 2 = 8 chunks exceed "
                      "model.n_layer = 6");
}

TEST(PpPartition, ExplicitListIsValidated) {
  const auto parts = partition_explicit(12, {5, 4, 3});
  expect_well_formed(parts, 12);
  EXPECT_EQ(describe(parts), "[0, 5) +emb | [5, 9) | [9, 12) +head");
  expect_config_error(
      [] {
        partition_explicit(12, {5, 4, 4});
      },
      "explicit pipeline stage sizes [5, 4, 4] sum to 13 but model.n_layer = 12");
  expect_config_error(
      [] {
        partition_explicit(12, {6, 6, 0});
      },
      "stage 2 has 0 blocks, every stage needs >= 1");
  expect_config_error([] { partition_explicit(12, {}); },
                      "explicit pipeline stage sizes are empty");
}

TEST(PpPartition, TooManyStagesIsAConfigError) {
  expect_config_error([] { partition_layers(4, 8, {}); },
                      "parallel.pp = 8 exceeds model.n_layer = 4: every stage needs a layer");
  expect_config_error([] { partition_layers(4, 0, {}); }, "parallel.pp = 0 must be >= 1");
}

}  // namespace
}  // namespace kiri::parallel::pp
