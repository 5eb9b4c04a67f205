#pragma once
// Pipeline parallelism, part 1: which transformer blocks live on which stage.
//
// The model is a chain: embedding -> block 0 .. block L-1 -> final LayerNorm + LM head.
// Stage 0 always holds the embedding and the last stage the final LayerNorm and the
// head, so only the blocks are cut. The slowest stage sets the pace of the whole
// pipeline (every micro-batch passes through it), so the cut minimises the maximum stage
// cost, not the spread of block counts: with GPT-2's 50257-token head the last stage
// costs several blocks' worth and should get fewer blocks (Megatron's uneven
// first/last-stage splits, torchtitan's manual split points, derived here from FLOPs).
//
// With interleaving (virtual stages v), the model is cut into stages * v chunks in model
// order and chunk c runs on rank c % stages as that rank's local chunk c / stages; the
// embedding is on chunk 0 (rank 0) and the head on the last chunk (rank stages - 1).
//
// All functions are pure; bad numbers raise kConfig naming them.
#include <string>
#include <vector>

namespace kiri::parallel::pp {

// Relative compute costs (any unit, e.g. FLOPs per token of forward + backward).
struct LayerCosts {
  double block = 1.0;      // one transformer block
  double embedding = 0.0;  // token + position embedding, on stage 0
  double head = 0.0;       // final LayerNorm + LM head (+ loss), on the last stage
};

// Blocks [first_block, end_block) of one stage (or one interleaved chunk).
struct StageLayers {
  int first_block = 0, end_block = 0;
  bool has_embedding = false, has_head = false;
  int blocks() const { return end_block - first_block; }
  bool operator==(const StageLayers&) const = default;
};

// Cuts n_layer blocks into `stages` contiguous stages, each with >= 1 block, minimising
// the maximum stage cost; among the cuts that reach it, the one with the smallest sum of
// squared stage costs (the most even), ties going to fewer blocks on earlier stages.
// Exact dynamic programme, O(stages * n_layer^2).
std::vector<StageLayers> partition_layers(int n_layer, int stages, const LayerCosts& costs);

// A user-given split, e.g. {5, 6, 6, 5}: each entry >= 1 and the sum == n_layer.
std::vector<StageLayers> partition_explicit(int n_layer, const std::vector<int>& blocks_per_stage);

// Interleaved: stages * v chunks in model order (chunk c on rank c % stages), balanced like
// partition_layers. Requires n_layer >= stages * v.
std::vector<StageLayers> partition_chunks(int n_layer, int stages, int virtual_stages,
                                          const LayerCosts& costs);

// The rank and local chunk index (Action::chunk) of model-order chunk c.
inline int chunk_rank(int chunk, int stages) {
  return chunk % stages;
}
inline int chunk_local_index(int chunk, int stages) {
  return chunk / stages;
}

// Cost of each stage under `costs` (what partition_layers balances).
std::vector<double> stage_costs(const std::vector<StageLayers>& parts, const LayerCosts& costs);

// Training FLOPs per token (forward x 3 for forward + backward) of GPT-2's pieces:
//   block     24 C^2 (QKV 6C^2, projection 2C^2, MLP 16C^2) + 4 T C (QK^T and AV over T keys)
//   head      2 V C (the logits GEMM; the final LayerNorm's ~C is noise)
//   embedding C (a row lookup and an add: negligible, kept so it is not exactly 0)
// n_head does not change the FLOPs; it is validated (n_embd % n_head == 0) so that a
// caller passing the wrong model's numbers hears about it.
LayerCosts gpt_layer_costs(int n_embd, int n_head, int vocab, int seq);
// The same for Llama's pieces (hidden C, n_kv_head key/value heads of C / n_head, MLP
// width I): block 4 C^2 (q, o) + 4 C kv (k, v; kv = n_kv_head C / n_head) + 6 C I (gate,
// up, down) + 4 T C; head 2 V C (tied or not); embedding C.
LayerCosts llama_layer_costs(int hidden, int n_head, int n_kv_head, int intermediate, int vocab,
                             int seq);

// "[0, 4) +emb | [4, 8) | [8, 11) +head": for logs and error messages.
std::string describe(const std::vector<StageLayers>& parts);

}  // namespace kiri::parallel::pp
