// Checkpoints by streaming (checkpoint_stream.h): the files a save writes piece by piece
// equal, byte for byte, what the whole-tensor writers write from the gathered model and the
// whole states, on every layout; and a save or a resume of a model whose states are many
// pieces holds a piece and one parameter, not the whole state.
#include <gtest/gtest.h>
#include <omp.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiri/ckpt/checkpoint_manifest.h"
#include "kiri/ckpt/hf/hf_model.h"
#include "kiri/ckpt/safetensors.h"
#include "kiri/comm/local/local.h"
#include "kiri/model/gpt.h"
#include "kiri/train/checkpoint_stream.h"
#include "train_test_util.h"

namespace kiri::train {
namespace {

using namespace kiri::ckpt::hf;  // the HF model folders (ckpt/hf/)

namespace fs = std::filesystem;

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

RunConfig stream_config(int n_layer, int n_embd) {
  RunConfig c = byte_test_config(n_layer, 2, n_embd, 2);
  c.model.vocab_size = 257;
  c.train.steps = 4;
  c.parallel.timeout_s = 60;
  c.checkpoint.piece_size = "4KiB";  // 1024 elements: every state and most weights in pieces
  return c;
}

struct Layout {
  int dp = 1, tp = 1, pp = 1, zero_stage = 0;
  bool bf16 = false;
  int virtual_stages = 1;  // > 1: the interleaved schedule, each stage's chunks apart
};

// Trains `layout` 2 steps on `world`, saves, and compares every file of the checkpoint with
// the whole-tensor writers' (write_hf_weights of gather_model(), save_safetensors of m and v).
void expect_streamed_files_equal_whole(comm::Communicator& world, const Layout& k,
                                       const std::string& root) {
  RunConfig c = stream_config(2 * k.virtual_stages, 32);
  c.parallel.dp = k.dp;
  c.parallel.tp = k.tp;
  c.parallel.pp = k.pp;
  c.parallel.microbatches = k.pp > 1 ? 2 : 1;
  c.parallel.zero_stage = k.zero_stage;
  if (k.virtual_stages > 1) {
    c.parallel.schedule = kiri::PipelineSchedule::kInterleaved;
    c.parallel.virtual_stages = k.virtual_stages;
  }
  c.train.dtype = k.bf16 ? kiri::Precision::kBf16 : kiri::Precision::kFp32;
  c.checkpoint.dir = root + "/ck";
  c.checkpoint.max_shard_size = "20KB";  // several model files and an index
  Trainer t(c, world);
  t.train_step();
  t.train_step();
  const std::string dir = t.save_checkpoint();
  // The optimizer file of this rank, written again from its whole states.
  const parallel::ParallelDims& dims = t.dims();
  const int per_stage = k.zero_stage == 0 ? 1 : k.dp;
  if (dims.dp_index() < per_stage) {
    const int index = (dims.pp_index() * k.tp + dims.tp_index()) * per_stage + dims.dp_index();
    char name[64];
    std::snprintf(name, sizeof name, "optimizer-%05d-of-%05d.safetensors", index,
                  per_stage * k.pp * k.tp);
    const std::string streamed = dir + "/" + name;
    const auto meta = ckpt::SafetensorsFile::map(streamed).metadata();
    const std::string whole = root + "/whole_" + name;
    ckpt::save_safetensors(
        whole, {{"exp_avg", t.optimizer().exp_avg()}, {"exp_avg_sq", t.optimizer().exp_avg_sq()}},
        meta);
    EXPECT_EQ(bytes_of(streamed), bytes_of(whole)) << name;
    EXPECT_GT(t.optimizer().state_numel(), 4 * 1024);  // many pieces
  }
  const auto model = t.gather_model();
  if (world.rank() != 0) return;
  std::vector<ckpt::NamedTensor> ordered;
  model::GPT<float> reference(c.model);
  for (nn::Parameter* p : reference.parameters())
    for (const auto& [name, v] : model)
      if (name == p->name) ordered.push_back({name, v});
  ASSERT_EQ(ordered.size(), reference.parameters().size());
  fs::create_directories(root + "/whole");
  const auto files = write_hf_weights(root + "/whole", ordered, DType::kF32, 20'000,
                                      {{ckpt::kStepMetadataKey, "2"}});  // the step saved
  ASSERT_GT(files.size(), 2u);                                           // shards and their index
  for (const std::string& f : files)
    EXPECT_EQ(bytes_of(dir + "/" + f), bytes_of(root + "/whole/" + f)) << f;
  size_t in_dir = 0;
  for (const auto& e : fs::directory_iterator(dir))
    in_dir += e.path().filename().string().rfind("model", 0) == 0;
  EXPECT_EQ(in_dir, files.size());
}

void run_layout(int ranks, const Layout& k, const std::string& name) {
  omp_set_num_threads(1);
  const std::string root =
      (fs::temp_directory_path() / ("kiri_stream_" + name + "_" + std::to_string(getpid())))
          .string();
  fs::remove_all(root);
  fs::create_directories(root);
  comm::run_local(ranks, [&](comm::Communicator& world) {
    expect_streamed_files_equal_whole(world, k, root);
    world.barrier();
  });
  fs::remove_all(root);
}

TEST(CheckpointStream, OneRankFilesEqualTheWholeTensorWriters) {
  run_layout(1, {}, "one");
  run_layout(1, {.bf16 = true}, "one_bf16");  // masters: the weights come from the states
}

TEST(CheckpointStream, ShardedFilesEqualTheWholeTensorWriters) {
  run_layout(2, {.dp = 2, .zero_stage = 1}, "zero1");
  run_layout(2, {.dp = 2, .zero_stage = 3, .bf16 = true}, "zero3");
}

TEST(CheckpointStream, TensorAndPipelineParallelFilesEqualTheWholeTensorWriters) {
  run_layout(2, {.tp = 2}, "tp");
  run_layout(2, {.pp = 2}, "pp");
  // Stage 0 holds blocks 0 and 2, stage 1 blocks 1 and 3: rank 0 takes turns.
  run_layout(2, {.pp = 2, .virtual_stages = 2}, "pp_interleaved");
  run_layout(4, {.dp = 2, .pp = 2, .zero_stage = 1, .bf16 = true}, "pp_zero1");
}

TEST(CheckpointStream, PieceSizeIsBytesOfAtLeast4KiB) {
  CheckpointConfig c;
  EXPECT_EQ(checkpoint_piece_elements(c), int64_t{16} << 20);  // 64MiB of F32
  c.piece_size = "4KiB";
  EXPECT_EQ(checkpoint_piece_elements(c), 1024);
  c.piece_size = "1KiB";
  try {
    checkpoint_piece_elements(c);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find(
                  "checkpoint.piece_size must be at least 4KiB, got '1KiB' (1024 bytes)"),
              std::string::npos)
        << e.what();
  }
}

// Live bytes above those before the call, at their peak during `fn`.
int64_t peak_during(Allocator& alloc, const std::function<void()>& fn) {
  const int64_t before = alloc.stats().allocated;
  alloc.reset_peaks();
  fn();
  return alloc.stats().peak_allocated - before;
}

TEST(CheckpointStream, SaveAndResumeHoldAPieceAndAParameterNotTheWholeState) {
  omp_set_num_threads(1);
  const std::string root =
      (fs::temp_directory_path() / ("kiri_stream_peak_" + std::to_string(getpid()))).string();
  fs::remove_all(root);
  RunConfig c = stream_config(4, 64);
  c.checkpoint.dir = root;
  c.train.dtype = kiri::Precision::kBf16;  // fp32 masters, m and v: 12 bytes per element
  int64_t largest = 0, numel = 0;
  {
    model::GPT<float> m(c.model);
    for (nn::Parameter* p : m.parameters()) {
      largest = std::max(largest, p->numel());
      numel += p->numel();
    }
  }
  EXPECT_EQ(largest, 257 * 64);  // wte
  const int64_t states = 12 * numel, piece = 4096;
  Trainer t(c);
  t.train_step();
  const int64_t save = peak_during(t.allocator(), [&] { t.save_checkpoint(); });
  // One fp32 parameter (LocalParams' copy), and a piece to check or stream the states.
  EXPECT_LE(save, 4 * largest + piece) << "states " << states;
  EXPECT_LT(save, states / 8);
  Trainer r(c);
  const int64_t load = peak_during(r.allocator(), [&] { r.load_checkpoint(root); });
  EXPECT_LE(load, piece) << "states " << states;
  std::printf(
      "states %lld bytes, largest parameter %lld bytes; peak during save %lld, resume "
      "%lld bytes\n",
      static_cast<long long>(states), static_cast<long long>(4 * largest),
      static_cast<long long>(save), static_cast<long long>(load));
  // The resumed run continues as the original.
  EXPECT_EQ(t.train_step().loss, r.train_step().loss);
  fs::remove_all(root);
}

}  // namespace
}  // namespace kiri::train
