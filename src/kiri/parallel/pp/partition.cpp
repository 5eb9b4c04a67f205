#include "kiri/parallel/pp/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kiri/base/error.h"

namespace kiri::parallel::pp {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string list_str(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Cost of stage s out of n holding k blocks.
double cost_of(int s, int n, int k, const LayerCosts& c) {
  return k * c.block + (s == 0 ? c.embedding : 0.0) + (s == n - 1 ? c.head : 0.0);
}

// Builds the StageLayers of a list of block counts (already validated).
std::vector<StageLayers> from_counts(const std::vector<int>& counts) {
  std::vector<StageLayers> parts(counts.size());
  int first = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    parts[s] = {first, first + counts[s], s == 0, s + 1 == counts.size()};
    first += counts[s];
  }
  return parts;
}

// Smallest achievable maximum stage cost. best[j] = the minimum over cuts of the last
// stages (s..n-1) holding j blocks; computed from the last stage backwards.
double min_max_cost(int n_layer, int n, const LayerCosts& c) {
  std::vector<double> next(n_layer + 1, kInf), cur(n_layer + 1);
  next[0] = 0.0;  // no stages left, no blocks left
  for (int s = n - 1; s >= 0; --s) {
    std::fill(cur.begin(), cur.end(), kInf);
    for (int j = 1; j <= n_layer; ++j)
      for (int k = 1; k <= j; ++k)
        cur[j] = std::min(cur[j], std::max(cost_of(s, n, k, c), next[j - k]));
    next.swap(cur);
  }
  return next[n_layer];
}

// Among cuts whose stages all cost <= limit, the one with the least sum of squared stage
// costs (the most even). sq[s][j]: best sum for stages s..n-1 holding j blocks.
std::vector<int> most_even_cut(int n_layer, int n, double limit, const LayerCosts& c) {
  std::vector<std::vector<double>> sq(n + 1, std::vector<double>(n_layer + 1, kInf));
  sq[n][0] = 0.0;
  for (int s = n - 1; s >= 0; --s)
    for (int j = 1; j <= n_layer; ++j)
      for (int k = 1; k <= j; ++k) {
        const double x = cost_of(s, n, k, c);
        if (x <= limit) sq[s][j] = std::min(sq[s][j], x * x + sq[s + 1][j - k]);
      }
  // Walk forwards taking the fewest blocks that still reach the optimum; the relative
  // tolerance absorbs the order in which the squares were summed.
  std::vector<int> counts;
  for (int s = 0, j = n_layer; s < n; ++s) {
    for (int k = 1; k <= j; ++k) {
      const double x = cost_of(s, n, k, c);
      const double total = x * x + sq[s + 1][j - k];
      if (x <= limit && total <= sq[s][j] * (1 + 1e-12)) {
        counts.push_back(k);
        j -= k;
        break;
      }
    }
  }
  KIRI_CHECK_KIND(kInternal, static_cast<int>(counts.size()) == n,
                  "pipeline partition lost its way: ", list_str(counts));
  return counts;
}

}  // namespace

std::vector<StageLayers> partition_layers(int n_layer, int stages, const LayerCosts& costs) {
  KIRI_CHECK_KIND(kConfig, stages >= 1, "parallel.pp = ", stages, " must be >= 1");
  KIRI_CHECK_KIND(kConfig, stages <= n_layer, "parallel.pp = ", stages,
                  " exceeds model.n_layer = ", n_layer, ": every stage needs a layer");
  KIRI_CHECK(costs.block > 0 && costs.embedding >= 0 && costs.head >= 0, "layer costs block ",
             costs.block, ", embedding ", costs.embedding, ", head ", costs.head,
             " (block must be > 0, the others >= 0)");
  const double best = min_max_cost(n_layer, stages, costs);
  // The optimum is one of the cost_of values, recomputed bit-identically in the second
  // pass; the slack only guards against a compiler fusing the arithmetic differently.
  return from_counts(most_even_cut(n_layer, stages, best * (1 + 1e-12), costs));
}

std::vector<StageLayers> partition_explicit(int n_layer, const std::vector<int>& blocks_per_stage) {
  KIRI_CHECK_KIND(kConfig, !blocks_per_stage.empty(),
                  "explicit pipeline stage sizes are empty: give one block count per stage");
  int sum = 0;
  for (size_t s = 0; s < blocks_per_stage.size(); ++s) {
    KIRI_CHECK_KIND(kConfig, blocks_per_stage[s] >= 1, "explicit pipeline stage sizes ",
                    list_str(blocks_per_stage), ": stage ", s, " has ", blocks_per_stage[s],
                    " blocks, every stage needs >= 1");
    sum += blocks_per_stage[s];
  }
  KIRI_CHECK_KIND(kConfig, sum == n_layer, "explicit pipeline stage sizes ",
                  list_str(blocks_per_stage), " sum to ", sum, " but model.n_layer = ", n_layer);
  return from_counts(blocks_per_stage);
}

std::vector<StageLayers> partition_chunks(int n_layer, int stages, int virtual_stages,
                                          const LayerCosts& costs) {
  KIRI_CHECK_KIND(kConfig, stages >= 1 && virtual_stages >= 1, "parallel.pp = ", stages,
                  " and parallel.virtual_stages = ", virtual_stages, " must be >= 1");
  KIRI_CHECK_KIND(kConfig, stages * virtual_stages <= n_layer,
                  "parallel.pp x parallel.virtual_stages = ", stages, " x ", virtual_stages, " = ",
                  stages * virtual_stages, " chunks exceed model.n_layer = ", n_layer,
                  ": every chunk needs a layer");
  // Chunk order is model order, so this is a plain partition into stages * v pieces.
  return partition_layers(n_layer, stages * virtual_stages, costs);
}

std::vector<double> stage_costs(const std::vector<StageLayers>& parts, const LayerCosts& costs) {
  std::vector<double> out;
  for (const StageLayers& p : parts)
    out.push_back(p.blocks() * costs.block + (p.has_embedding ? costs.embedding : 0.0) +
                  (p.has_head ? costs.head : 0.0));
  return out;
}

LayerCosts gpt_layer_costs(int n_embd, int n_head, int vocab, int seq) {
  KIRI_CHECK_KIND(kConfig, n_embd >= 1 && n_head >= 1 && vocab >= 1 && seq >= 1,
                  "gpt_layer_costs: n_embd ", n_embd, ", n_head ", n_head, ", vocab ", vocab,
                  ", seq ", seq, " must all be >= 1");
  KIRI_CHECK_KIND(kConfig, n_embd % n_head == 0, "model.n_head = ", n_head,
                  " must divide model.n_embd = ", n_embd);
  const double c = n_embd, t = seq, v = vocab;
  constexpr double kTrain = 3.0;  // backward costs about twice the forward
  return {kTrain * (24 * c * c + 4 * t * c), kTrain * c, kTrain * 2 * v * c};
}

LayerCosts llama_layer_costs(int hidden, int n_head, int n_kv_head, int intermediate, int vocab,
                             int seq) {
  KIRI_CHECK_KIND(
      kConfig,
      hidden >= 1 && n_head >= 1 && n_kv_head >= 1 && intermediate >= 1 && vocab >= 1 && seq >= 1,
      "llama_layer_costs: hidden ", hidden, ", n_head ", n_head, ", n_kv_head ", n_kv_head,
      ", intermediate ", intermediate, ", vocab ", vocab, ", seq ", seq, " must all be >= 1");
  KIRI_CHECK_KIND(kConfig, hidden % n_head == 0, "model.n_head = ", n_head,
                  " must divide model.n_embd = ", hidden);
  const double c = hidden, t = seq, v = vocab, kv = double(hidden / n_head) * n_kv_head;
  const double i = intermediate;
  constexpr double kTrain = 3.0;  // backward costs about twice the forward
  // Per token: q and o (2 x 2c^2), k and v (2 x 2c kv), gate, up and down (3 x 2c i),
  // attention's two products (4 t c); the head 2 v c (tied or not); the lookup c.
  return {kTrain * (4 * c * c + 4 * c * kv + 6 * c * i + 4 * t * c), kTrain * c,
          kTrain * 2 * v * c};
}

std::string describe(const std::vector<StageLayers>& parts) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) {
    s += str(i ? " | " : "", "[", parts[i].first_block, ", ", parts[i].end_block, ")",
             parts[i].has_embedding ? " +emb" : "", parts[i].has_head ? " +head" : "");
  }
  return s;
}

}  // namespace kiri::parallel::pp
