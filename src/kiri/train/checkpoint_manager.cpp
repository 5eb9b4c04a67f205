// CheckpointManager's saves (its loads: checkpoint_load.cpp), the same under every ZeRO stage
// and dtype:
//  - model.safetensors (or model-0000k-of-0000n.safetensors and its index
//    above checkpoint.max_shard_size): the whole model in fp32 with Hugging
//    Face GPT-2 names (the master weights; gathered to rank 0 under
//    sharding), with config.json and the tokenizer files, so a checkpoint
//    loads on any layout and in transformers (hf_model.h);
//  - optimizer-RRRRR-of-NNNNN.safetensors: AdamW's m and v as one flat
//    tensor each per shard, written by the ranks of one replica (stage 0:
//    rank 0 alone), with the segments they hold in the metadata
//    ([parameter, first element, count, offset in the flat state]), so a
//    run can reload them on the same layout or re-cut them for another;
//  - state.json: config, step, data position, layout, loss scaler.
// Everything goes into a temporary step directory that rank 0 renames into
// place only when every file is complete. Every file is streamed
// (checkpoint_stream.h): the states and weights move in pieces through
// AdamW's ranged API, from and into whichever tier holds them.
#include "kiri/train/checkpoint_manager.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>

#include <nlohmann/json.hpp>

#include "kiri/base/atomic_file.h"
#include "kiri/base/timer.h"
#include "kiri/ckpt/checkpoint_async.h"
#include "kiri/ckpt/checkpoint_dir.h"
#include "kiri/ckpt/checkpoint_manifest.h"
#include "kiri/ckpt/checkpoint_state.h"
#include "kiri/ckpt/hf/hf_model.h"
#include "kiri/ckpt/safetensors.h"
#include "kiri/comm/agree.h"
#include "kiri/model/gpt.h"
#include "kiri/train/checkpoint_stream.h"
#include "kiri/train/faults.h"

namespace kiri::train {

namespace hf = ckpt::hf;
using nlohmann::json;

namespace {

std::string optimizer_file_name(int index, int count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "optimizer-%05d-of-%05d.safetensors", index, count);
  return buf;
}
}  // namespace

CheckpointManager::CheckpointManager(CheckpointParts parts, json fingerprints)
    : p_(parts), fingerprints_(std::move(fingerprints)) {
  if (p_.cfg.checkpoint.async && !p_.cfg.checkpoint.dir.empty()) reserve_async_staging();
}

int CheckpointManager::optimizer_writers_per_stage() const {
  return p_.parallel.zero_stage() == 0                 ? 1
         : p_.parallel.options().shard_group_size == 0 ? p_.dims.shape().dp
                                                       : p_.parallel.options().shard_group_size;
}

bool CheckpointManager::writes_optimizer_states() const {
  return p_.dims.dp_index() < optimizer_writers_per_stage();
}

std::vector<std::pair<std::string, Tensor>> CheckpointManager::gather_model() {
  p_.parallel.finish_update();
  ModelStream stream(p_.cfg, p_.optimizer, p_.parallel, p_.dims, p_.allocator);
  if (!is_rank0()) {
    stream.run();
    return {};
  }
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t k = 0; k < stream.specs().size(); ++k) {
    const Tensor& t = stream.next(k);
    Tensor copy = Tensor::empty(t.shape(), DType::kF32, Category::kBuffers, p_.allocator);
    copy.copy_from(t);
    out.emplace_back(stream.specs()[k].name, copy);
  }
  stream.finish();
  return out;
}

namespace {
// An optimizer file's metadata: the optimizer, its step and the segments this rank holds,
// in the whole parameters' coordinates so that any layout (another tp, dp or pp) can find
// its elements; the training step and data position, which a resume checks state.json's
// against.
std::map<std::string, std::string> optimizer_metadata(optim::AdamW& opt,
                                                      model::ParallelGPT& parallel, int tp_index,
                                                      int64_t step, uint64_t data_position) {
  json segs = json::array();
  for (const auto& s : opt.segments())
    // One copy of everything: the first stage's tied embedding, tp rank 0's
    // replicated parameters.
    if (s.param != parallel.tied_copy() && (s.param->tp.dim >= 0 || tp_index == 0))
      for (const GlobalPiece& g : global_pieces(s))
        segs.push_back({s.param->name, g.global, g.length, g.state});
  return {{"optimizer", "adamw"},
          {"step", std::to_string(opt.step_count())},
          {ckpt::kStepMetadataKey, std::to_string(step)},
          {ckpt::kDataPositionMetadataKey, std::to_string(data_position)},
          {"segments", segs.dump()}};
}

// This rank's m and v, each appended in pieces, with the segments it holds.
void write_optimizer_file(const std::string& path, optim::AdamW& opt, model::ParallelGPT& parallel,
                          int tp_index, int64_t step, uint64_t data_position, int64_t piece,
                          Allocator& alloc) {
  const int64_t n = opt.state_numel();
  const std::vector<ckpt::TensorSpec> specs = {{"exp_avg", DType::kF32, Shape({n})},
                                               {"exp_avg_sq", DType::kF32, Shape({n})}};
  Tensor buf = Tensor::empty({std::min(piece, std::max<int64_t>(n, 1))}, DType::kF32,
                             Category::kBuffers, alloc);
  ckpt::save_safetensors_streaming(
      path, specs, optimizer_metadata(opt, parallel, tp_index, step, data_position),
      [&](size_t k, const ckpt::AppendBytes& append) {
        const optim::State s = k == 0 ? optim::State::kExpAvg : optim::State::kExpAvgSq;
        for_each_piece(n, piece, [&](int64_t b, int64_t len) {
          Tensor part = buf.flat_range(0, len);
          opt.read_state(s, b, part);
          append(part.raw(), part.nbytes());
        });
      },
      ckpt::Checksums::kXxh3);
}

// write_hf_folder's files in fp32, the weights streamed (rank 0).
void write_model_folder(const std::string& dir, const RunConfig& cfg,
                        const data::Tokenizer& tokenizer, ModelStream& model, int64_t step) {
  hf::write_hf_weights_streaming(
      dir, model.specs(),
      hf::parse_max_shard_size(cfg.checkpoint.max_shard_size, "checkpoint.max_shard_size"),
      [&](size_t k, const ckpt::AppendBytes& append) {
        const Tensor& t = model.next(k);
        append(t.raw(), t.nbytes());
      },
      {{ckpt::kStepMetadataKey, std::to_string(step)}});
  model.finish();
  hf::write_hf_tokenizer(dir, tokenizer, cfg.model.block_size);
  write_file_atomic(dir + "/config.json",
                    hf::hf_config_json(cfg.model, tokenizer.eot_token(), DType::kF32,
                                       cfg.data.tokenizer, hf::hf_bos_token(tokenizer))
                            .dump(2) +
                        "\n");
}

// This rank's fp32 weights, in pieces.
void check_weights_finite(optim::AdamW& opt, int64_t step, int64_t piece, Allocator& alloc) {
  const auto& segs = opt.segments();
  Tensor buf = Tensor::empty({piece}, DType::kF32, Category::kBuffers, alloc);
  for (size_t i = 0; i < segs.size(); ++i)
    for_each_piece(segs[i].numel(), piece, [&](int64_t b, int64_t n) {
      Tensor part = buf.flat_range(0, n);
      opt.read_weights(i, b, part);
      check_finite_piece(part,
                         str("refusing to save the checkpoint of step ", step, ": parameter ",
                             segs[i].param->name),
                         b, segs[i].numel());
    });
}
}  // namespace

std::string CheckpointManager::checkpoint_state_text(int writers, int64_t step,
                                                     uint64_t data_position) const {
  const RunConfig& cfg = p_.cfg;
  const parallel::ParallelDims& dims = p_.dims;
  json files = json::array();
  for (int i = 0; i < writers; ++i) files.push_back(optimizer_file_name(i, writers));
  json state = {{"format_version", ckpt::kCheckpointFormatVersion},
                {"step", step},
                {"optimizer_step", p_.optimizer.step_count()},
                {"optimizer_files", files},
                {"layout",
                 {{"dp", dims.shape().dp},
                  {"tp", dims.shape().tp},
                  {"pp", dims.shape().pp},
                  {"zero_stage", p_.parallel.zero_stage()},
                  {"shard_group_size", p_.parallel.options().shard_group_size},
                  {"dtype", dtype_name(model::dtype_of(cfg.train.dtype))}}},
                {"global_batch", global_batch(cfg)},
                {"data", {{"position", data_position}, {"seed", cfg.train.seed}}},
                // kiri's random numbers are counter-based: every draw is a function of
                // (seed, stream, index), so the seed and the data position are the whole state.
                {"rng", {{"seed", cfg.train.seed}, {"kind", "counter"}}},
                {"config", p_.config_json.empty() ? json() : json::parse(p_.config_json)},
                {"fingerprints", fingerprints_}};
  if (scaler_) {
    const auto s = scaler_->state();
    state["loss_scaler"] = {
        {"scale", s.scale}, {"clean_steps", s.clean_steps}, {"skipped_steps", s.skipped_steps}};
  }
  return state.dump(2) + "\n";
}

std::string CheckpointManager::save(int64_t step, uint64_t data_position) {
  const std::string& root = p_.cfg.checkpoint.dir;
  const int64_t piece = checkpoint_piece_elements(p_.cfg.checkpoint);
  comm::Communicator& world = p_.world;
  Timer timer;
  if (async_) async_->wait();  // a save waits for the previous one (and raises its failure)
  last_save_wait_s_ = timer.seconds();
  // A deferred update (offload) first: the checkpoint holds its result.
  p_.parallel.finish_update();
  if (p_.cfg.checkpoint.async) return stage_checkpoint(timer, step, data_position);
  // A checkpoint of non-finite weights would only spread the divergence to every resume:
  // each rank checks its master weights, and all stop together before anything is written.
  comm::run_agreed(world, [&] { check_weights_finite(p_.optimizer, step, piece, p_.allocator); });
  if (is_rank0()) ckpt::begin_checkpoint(root, step);
  world.barrier();
  const std::string tmp = ckpt::temp_dir(root, step);
  // One optimizer file per shard of each pipeline stage.
  const int writers = optimizer_writers();
  if (writes_optimizer_states())
    write_optimizer_file(tmp + "/" + optimizer_file_name(optimizer_file_index(), writers),
                         p_.optimizer, p_.parallel, p_.dims.tp_index(), step, data_position, piece,
                         p_.allocator);
  // The model, one parameter at a time into rank 0's files (collective under sharding).
  ModelStream model(p_.cfg, p_.optimizer, p_.parallel, p_.dims, p_.allocator);
  if (!is_rank0()) {
    model.run();
    world.barrier();  // every shard is on disk before rank 0 commits
    world.barrier();
    return root + "/" + ckpt::step_dir_name(step);
  }
  write_model_folder(tmp, p_.cfg, p_.tokenizer, model, step);
  world.barrier();  // every shard is on disk before rank 0 commits
  ckpt::write_checkpoint_state(tmp, checkpoint_state_text(writers, step, data_position));
  const std::string done = ckpt::commit_checkpoint(root, step, p_.cfg.checkpoint.keep_last);
  last_save_s_ = timer.seconds();
  world.barrier();
  return done;
}

int CheckpointManager::optimizer_writers() const {
  return optimizer_writers_per_stage() * p_.dims.shape().pp * p_.dims.shape().tp;
}

int CheckpointManager::optimizer_file_index() const {
  return (p_.dims.pp_index() * p_.dims.shape().tp + p_.dims.tp_index()) *
             optimizer_writers_per_stage() +
         p_.dims.dp_index();
}

// checkpoint.async: copies what this rank writes into the staging buffers (rank 0 gathers
// the model, a collective), checks the staged model (every parameter passes through rank 0),
// then hands the files to the background writer.
std::string CheckpointManager::stage_checkpoint(const Timer& timer, int64_t step,
                                                uint64_t data_position) {
  const std::string& root = p_.cfg.checkpoint.dir;
  optim::AdamW& opt = p_.optimizer;
  if (!async_) reserve_async_staging();
  ckpt::AsyncSaveJob job;
  job.root = root;
  job.step = step;
  job.tmp = ckpt::temp_dir(root, step);
  job.rank = p_.world.rank();
  job.timeout_s = p_.cfg.parallel.timeout_s;
  job.keep_last = p_.cfg.checkpoint.keep_last;
  job.slow_ms = slow_save_ms_for(p_.world.rank());
  if (writes_optimizer_states()) {
    const int64_t n = opt.state_numel();
    Tensor& states = async_->states_staging(n);
    for (const auto& [k, s] :
         {std::pair{0, optim::State::kExpAvg}, std::pair{1, optim::State::kExpAvgSq}})
      for_each_piece(n, checkpoint_piece_elements(p_.cfg.checkpoint), [&](int64_t b, int64_t len) {
        Tensor part = states.flat_range(k * n + b, len);
        opt.read_state(s, b, part);
      });
    job.optimizer_file = optimizer_file_name(optimizer_file_index(), optimizer_writers());
    job.optimizer_metadata =
        optimizer_metadata(opt, p_.parallel, p_.dims.tp_index(), step, data_position);
    job.state_numel = n;
  }
  const std::exception_ptr bad = stage_model(job, step);
  // As a synchronous save's check: a non-finite weight stops every rank before any file.
  comm::run_agreed(p_.world, [&] {
    if (bad) std::rethrow_exception(bad);
  });
  if (is_rank0()) {
    ckpt::begin_checkpoint(root, step);
    job.state_json = checkpoint_state_text(optimizer_writers(), step, data_position);
  }
  p_.world.barrier();
  last_save_s_ = timer.seconds();
  job.stall_s = last_save_s_;
  job.waited_s = last_save_wait_s_;
  async_->start(std::move(job));
  return root + "/" + ckpt::step_dir_name(step);
}

// Rank 0: the whole fp32 model into the staging buffer in the model's order, each parameter
// checked as it lands; the first non-finite one's error is returned (raised once the ranks
// agree), the stream finished regardless. The other ranks take their part in the stream.
std::exception_ptr CheckpointManager::stage_model(ckpt::AsyncSaveJob& job, int64_t step) {
  optim::AdamW& opt = p_.optimizer;
  ModelStream model(p_.cfg, opt, p_.parallel, p_.dims, p_.allocator);
  // Plain data parallelism (stage 0, one stage, no tp): rank 0 holds every parameter whole and
  // the stream moves nothing between ranks, so the weights go straight into the staging.
  const bool whole = !p_.parallel.sharded() && p_.dims.shape().tp == 1 && p_.dims.shape().pp == 1;
  if (!is_rank0()) {
    if (!whole) model.run();
    return nullptr;
  }
  const int64_t piece = checkpoint_piece_elements(p_.cfg.checkpoint);
  int64_t total = 0;
  for (const ckpt::TensorSpec& s : model.specs()) total += s.shape.numel();
  Tensor& staged = async_->model_staging(total);
  std::map<std::string, size_t> segment;
  for (size_t i = 0; i < opt.segments().size(); ++i) segment[opt.segments()[i].param->name] = i;
  std::exception_ptr bad;
  int64_t at = 0;
  for (size_t k = 0; k < model.specs().size(); ++k) {
    const std::string& name = model.specs()[k].name;
    const int64_t n = model.specs()[k].shape.numel();
    if (!whole) staged.flat_range(at, n).copy_from(model.next(k).view({n}));
    for_each_piece(n, piece, [&](int64_t b, int64_t len) {
      Tensor part = staged.flat_range(at + b, len);
      if (whole) opt.read_weights(segment.at(name), b, part);
      try {
        if (!bad)
          check_finite_piece(
              part, str("refusing to save the checkpoint of step ", step, ": parameter ", name), b,
              n);
      } catch (const Error&) {
        bad = std::current_exception();
      }
    });
    at += n;
  }
  if (!whole) model.finish();
  job.writes_model = true;
  job.model_specs = model.specs();
  job.max_shard_bytes =
      hf::parse_max_shard_size(p_.cfg.checkpoint.max_shard_size, "checkpoint.max_shard_size");
  job.model = p_.cfg.model;
  job.tokenizer_name = p_.cfg.data.tokenizer;
  job.tokenizer = &p_.tokenizer;
  for (int i = 0; i < optimizer_writers(); ++i)
    job.optimizer_files.push_back(optimizer_file_name(i, optimizer_writers()));
  return bad;
}

void CheckpointManager::reserve_async_staging() {
  async_ = std::make_unique<ckpt::AsyncCheckpointWriter>(p_.allocator);
  // Touched now (zeroed): the pages are faulted in at start, not in the first save's stall.
  if (writes_optimizer_states()) async_->states_staging(p_.optimizer.state_numel()).zero_();
  if (!is_rank0()) return;
  int64_t total = 0;
  model::GPT<float> whole(p_.cfg.model);
  for (nn::Parameter* p : whole.parameters()) total += p->shape.numel();
  async_->model_staging(total).zero_();
}

void CheckpointManager::wait() {
  if (async_) async_->wait();
}

void CheckpointManager::rethrow_failure() {
  if (async_) async_->rethrow_failure();
}

}  // namespace kiri::train
