// Trainer checkpoints, the same under every ZeRO stage and dtype:
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
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "kiri/base/atomic_file.h"
#include "kiri/base/file_read.h"
#include "kiri/base/log.h"
#include "kiri/base/timer.h"
#include "kiri/ckpt/checkpoint_async.h"
#include "kiri/ckpt/checkpoint_dir.h"
#include "kiri/ckpt/checkpoint_manifest.h"
#include "kiri/ckpt/checkpoint_state.h"
#include "kiri/ckpt/hf/hf_model.h"
#include "kiri/ckpt/safetensors.h"
#include "kiri/comm/agree.h"
#include "kiri/train/checkpoint_stream.h"
#include "kiri/train/faults.h"
#include "kiri/train/fingerprint.h"
#include "kiri/train/trainer.h"

namespace kiri::train {

namespace hf = ckpt::hf;
using nlohmann::json;

namespace {

// A segment's elements as runs of the whole parameter: `length` elements
// from `global` whose optimizer state starts at `state`.
struct GlobalPiece {
  int64_t global, length, state;
};
std::vector<GlobalPiece> global_pieces(const nn::ParameterSegment& s) {
  std::vector<GlobalPiece> out;
  for (const nn::ElementRun& r : nn::element_runs(*s.param)) {
    const int64_t lo = std::max(r.local, s.begin);
    const int64_t hi = std::min(r.local + r.length, s.begin + s.numel());
    if (lo < hi)
      out.push_back({r.global + (lo - r.local), hi - lo, s.state_offset + (lo - s.begin)});
  }
  return out;
}

// One entry of an optimizer file's 'segments': [parameter, first element, count, offset in
// the flat state], checked so that no sum below can overflow int64 and every range lies
// inside the file's `states` elements.
struct Segment {
  std::string name;
  int64_t begin, count, offset;
};
Segment parse_segment(const json& s, int64_t states, const std::string& path) {
  const auto bad = [&](const char* why) {
    KIRI_RAISE(kCheckpoint, path, ": segment ", quote_bounded(s.dump(), 120), " ", why);
  };
  if (!s.is_array() || s.size() != 4 || !s[0].is_string())
    bad("is not [name, begin, count, offset]");
  for (int i = 1; i < 4; ++i)
    if (!s[i].is_number_integer() ||
        (s[i].is_number_unsigned() && s[i].get<uint64_t>() > uint64_t(INT64_MAX)))
      bad("holds a number that is not an int64");
  const Segment g{s[0].get<std::string>(), s[1].get<int64_t>(), s[2].get<int64_t>(),
                  s[3].get<int64_t>()};
  if (g.begin < 0 || g.count < 0 || g.offset < 0) bad("holds a negative number");
  if (g.begin > INT64_MAX - g.count) bad("ends past the largest int64 (begin + count overflows)");
  if (g.offset > states || g.count > states - g.offset)
    bad(str("lies outside its states of ", states, " elements").c_str());
  return g;
}

std::string optimizer_file_name(int index, int count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "optimizer-%05d-of-%05d.safetensors", index, count);
  return buf;
}
}  // namespace

void check_finite(const Tensor& t, const std::string& what) {
  check_finite_piece(t, what, 0, t.numel());
}

int Trainer::optimizer_writers_per_stage() const {
  return parallel_->zero_stage() == 0                 ? 1
         : parallel_->options().shard_group_size == 0 ? dims_->shape().dp
                                                      : parallel_->options().shard_group_size;
}

bool Trainer::writes_optimizer_states() const {
  return dims_->dp_index() < optimizer_writers_per_stage();
}

std::vector<std::pair<std::string, Tensor>> Trainer::gather_model() {
  finish_update();
  ModelStream stream(cfg_, *optimizer_, *parallel_, *dims_, allocator_);
  if (!is_rank0()) {
    stream.run();
    return {};
  }
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t k = 0; k < stream.specs().size(); ++k) {
    const Tensor& t = stream.next(k);
    Tensor copy = Tensor::empty(t.shape(), DType::kF32, Category::kBuffers, allocator_);
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

std::string Trainer::checkpoint_state_text(int writers) const {
  json files = json::array();
  for (int i = 0; i < writers; ++i) files.push_back(optimizer_file_name(i, writers));
  json state = {{"format_version", ckpt::kCheckpointFormatVersion},
                {"step", step_},
                {"optimizer_step", optimizer_->step_count()},
                {"optimizer_files", files},
                {"layout",
                 {{"dp", dims_->shape().dp},
                  {"tp", dims_->shape().tp},
                  {"pp", dims_->shape().pp},
                  {"zero_stage", parallel_->zero_stage()},
                  {"shard_group_size", parallel_->options().shard_group_size},
                  {"dtype", dtype_name(compute_dtype())}}},
                {"global_batch", global_batch(cfg_)},
                {"data", {{"position", data_position_}, {"seed", cfg_.train.seed}}},
                // kiri's random numbers are counter-based: every draw is a function of
                // (seed, stream, index), so the seed and the data position are the whole state.
                {"rng", {{"seed", cfg_.train.seed}, {"kind", "counter"}}},
                {"config", config_json_.empty() ? json() : json::parse(config_json_)},
                {"fingerprints", fingerprints_}};
  if (scaler_) {
    const auto s = scaler_->state();
    state["loss_scaler"] = {
        {"scale", s.scale}, {"clean_steps", s.clean_steps}, {"skipped_steps", s.skipped_steps}};
  }
  return state.dump(2) + "\n";
}

std::string Trainer::save_checkpoint() {
  const std::string& root = cfg_.checkpoint.dir;
  const int64_t piece = checkpoint_piece_elements(cfg_.checkpoint);
  Timer timer;
  if (async_) async_->wait();  // a save waits for the previous one (and raises its failure)
  last_save_wait_s_ = timer.seconds();
  finish_update();  // a deferred update (offload) first: the checkpoint holds its result
  if (cfg_.checkpoint.async) return stage_checkpoint(timer);
  // A checkpoint of non-finite weights would only spread the divergence to every resume:
  // each rank checks its master weights, and all stop together before anything is written.
  comm::run_agreed(*world_, [&] { check_weights_finite(*optimizer_, step_, piece, allocator_); });
  if (is_rank0()) ckpt::begin_checkpoint(root, step_);
  world_->barrier();
  const std::string tmp = ckpt::temp_dir(root, step_);
  // One optimizer file per shard of each pipeline stage.
  const int writers = optimizer_writers();
  if (writes_optimizer_states())
    write_optimizer_file(tmp + "/" + optimizer_file_name(optimizer_file_index(), writers),
                         *optimizer_, *parallel_, dims_->tp_index(), step_, data_position_, piece,
                         allocator_);
  // The model, one parameter at a time into rank 0's files (collective under sharding).
  ModelStream model(cfg_, *optimizer_, *parallel_, *dims_, allocator_);
  if (!is_rank0()) {
    model.run();
    world_->barrier();  // every shard is on disk before rank 0 commits
    world_->barrier();
    return root + "/" + ckpt::step_dir_name(step_);
  }
  write_model_folder(tmp, cfg_, *tokenizer_, model, step_);
  world_->barrier();  // every shard is on disk before rank 0 commits
  ckpt::write_checkpoint_state(tmp, checkpoint_state_text(writers));
  const std::string done = ckpt::commit_checkpoint(root, step_, cfg_.checkpoint.keep_last);
  last_save_s_ = timer.seconds();
  world_->barrier();
  return done;
}

int Trainer::optimizer_writers() const {
  return optimizer_writers_per_stage() * dims_->shape().pp * dims_->shape().tp;
}

int Trainer::optimizer_file_index() const {
  return (dims_->pp_index() * dims_->shape().tp + dims_->tp_index()) *
             optimizer_writers_per_stage() +
         dims_->dp_index();
}

// checkpoint.async: copies what this rank writes into the staging buffers (rank 0 gathers
// the model, a collective), checks the staged model (every parameter passes through rank 0),
// then hands the files to the background writer.
std::string Trainer::stage_checkpoint(const Timer& timer) {
  const std::string& root = cfg_.checkpoint.dir;
  if (!async_) reserve_async_staging();
  ckpt::AsyncSaveJob job;
  job.root = root;
  job.step = step_;
  job.tmp = ckpt::temp_dir(root, step_);
  job.rank = world_->rank();
  job.timeout_s = cfg_.parallel.timeout_s;
  job.keep_last = cfg_.checkpoint.keep_last;
  job.slow_ms = slow_save_ms_for(world_->rank());
  if (writes_optimizer_states()) {
    const int64_t n = optimizer_->state_numel();
    Tensor& states = async_->states_staging(n);
    for (const auto& [k, s] :
         {std::pair{0, optim::State::kExpAvg}, std::pair{1, optim::State::kExpAvgSq}})
      for_each_piece(n, checkpoint_piece_elements(cfg_.checkpoint), [&](int64_t b, int64_t len) {
        Tensor part = states.flat_range(k * n + b, len);
        optimizer_->read_state(s, b, part);
      });
    job.optimizer_file = optimizer_file_name(optimizer_file_index(), optimizer_writers());
    job.optimizer_metadata =
        optimizer_metadata(*optimizer_, *parallel_, dims_->tp_index(), step_, data_position_);
    job.state_numel = n;
  }
  const std::exception_ptr bad = stage_model(job);
  // As a synchronous save's check: a non-finite weight stops every rank before any file.
  comm::run_agreed(*world_, [&] {
    if (bad) std::rethrow_exception(bad);
  });
  if (is_rank0()) {
    ckpt::begin_checkpoint(root, step_);
    job.state_json = checkpoint_state_text(optimizer_writers());
  }
  world_->barrier();
  last_save_s_ = timer.seconds();
  job.stall_s = last_save_s_;
  job.waited_s = last_save_wait_s_;
  async_->start(std::move(job));
  return root + "/" + ckpt::step_dir_name(step_);
}

// Rank 0: the whole fp32 model into the staging buffer in the model's order, each parameter
// checked as it lands; the first non-finite one's error is returned (raised once the ranks
// agree), the stream finished regardless. The other ranks take their part in the stream.
std::exception_ptr Trainer::stage_model(ckpt::AsyncSaveJob& job) {
  ModelStream model(cfg_, *optimizer_, *parallel_, *dims_, allocator_);
  // Plain data parallelism (stage 0, one stage, no tp): rank 0 holds every parameter whole and
  // the stream moves nothing between ranks, so the weights go straight into the staging.
  const bool whole = !parallel_->sharded() && dims_->shape().tp == 1 && dims_->shape().pp == 1;
  if (!is_rank0()) {
    if (!whole) model.run();
    return nullptr;
  }
  const int64_t piece = checkpoint_piece_elements(cfg_.checkpoint);
  int64_t total = 0;
  for (const ckpt::TensorSpec& s : model.specs()) total += s.shape.numel();
  Tensor& staged = async_->model_staging(total);
  std::map<std::string, size_t> segment;
  for (size_t i = 0; i < optimizer_->segments().size(); ++i)
    segment[optimizer_->segments()[i].param->name] = i;
  std::exception_ptr bad;
  int64_t at = 0;
  for (size_t k = 0; k < model.specs().size(); ++k) {
    const std::string& name = model.specs()[k].name;
    const int64_t n = model.specs()[k].shape.numel();
    if (!whole) staged.flat_range(at, n).copy_from(model.next(k).view({n}));
    for_each_piece(n, piece, [&](int64_t b, int64_t len) {
      Tensor part = staged.flat_range(at + b, len);
      if (whole) optimizer_->read_weights(segment.at(name), b, part);
      try {
        if (!bad)
          check_finite_piece(
              part, str("refusing to save the checkpoint of step ", step_, ": parameter ", name), b,
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
      hf::parse_max_shard_size(cfg_.checkpoint.max_shard_size, "checkpoint.max_shard_size");
  job.model = cfg_.model;
  job.tokenizer_name = cfg_.data.tokenizer;
  job.tokenizer = tokenizer_.get();
  for (int i = 0; i < optimizer_writers(); ++i)
    job.optimizer_files.push_back(optimizer_file_name(i, optimizer_writers()));
  return bad;
}

void Trainer::reserve_async_staging() {
  async_ = std::make_unique<ckpt::AsyncCheckpointWriter>(allocator_);
  // Touched now (zeroed): the pages are faulted in at start, not in the first save's stall.
  if (writes_optimizer_states()) async_->states_staging(optimizer_->state_numel()).zero_();
  if (!is_rank0()) return;
  int64_t total = 0;
  model::GPT<float> whole(cfg_.model);
  for (nn::Parameter* p : whole.parameters()) total += p->shape.numel();
  async_->model_staging(total).zero_();
}

void Trainer::wait_for_checkpoint() {
  if (async_) async_->wait();
}

// Into the master weights only: load_checkpoint writes them back once every rank has read.
// Each rank reads the elements it holds, in pieces (a shard file only when one of them lies
// in it), and drops each tensor's pages once read.
void Trainer::load_model(const std::string& dir) {
  hf::HfWeights file = hf::HfWeights::open(dir);
  {
    std::vector<std::string> names;
    const model::GPT<float> whole(cfg_.model);
    for (nn::Parameter* p : const_cast<model::GPT<float>&>(whole).parameters())
      names.push_back(p->name);
    file.check_names(names);
  }
  const int64_t piece = checkpoint_piece_elements(cfg_.checkpoint);
  Tensor buf = Tensor::empty({piece}, DType::kF32, Category::kBuffers, allocator_);
  const auto& segs = optimizer_->segments();
  for (size_t i = 0; i < segs.size(); ++i) {
    nn::Parameter* p = segs[i].param;
    file.check_shape(p->name, p->full.rank() ? p->full : p->shape);
    const std::string what = file.path_of(p->name) + ": tensor " + p->name;
    for (const GlobalPiece& g : global_pieces(segs[i]))  // runs of the whole parameter
      for_each_piece(g.length, piece, [&](int64_t b, int64_t n) {
        Tensor part = buf.flat_range(0, n);
        file.read_range(p->name, g.global + b, part);
        check_finite_piece(part, what, g.global + b, p->full_numel());
        optimizer_->write_weights(i, g.state - segs[i].state_offset + b, part);
      });
    file.release(p->name);
  }
}

namespace {
// An optimizer file's 'segments' metadata, parsed (each entry checked by parse_segment).
json read_segments(const ckpt::SafetensorsFile& file, const std::string& path) {
  const auto meta = file.metadata().find("segments");
  KIRI_CHECK_KIND(kCheckpoint, meta != file.metadata().end(), path, " has no 'segments' metadata");
  // A list of 4-element lists: anything deeper is refused before it is parsed.
  KIRI_CHECK_KIND(kCheckpoint, json_nesting_depth(meta->second, 3) <= 2, path,
                  ": 'segments' metadata nests deeper than a list of lists");
  json segs;
  try {
    segs = json::parse(meta->second);
  } catch (const std::exception& e) {
    KIRI_RAISE(kCheckpoint, path,
               " has no valid 'segments' metadata: ", quote_bounded(e.what(), 300));
  }
  const ckpt::TensorInfo &m = file.info("exp_avg"), &v = file.info("exp_avg_sq");
  KIRI_CHECK_KIND(kCheckpoint,
                  segs.is_array() && m.dtype == DType::kF32 && v.dtype == DType::kF32 &&
                      m.shape.rank() == 1 && m.shape == v.shape,
                  path,
                  ": 'segments' must be a list and exp_avg and exp_avg_sq flat F32 tensors of one "
                  "size (found ",
                  dtype_name(m.dtype), " ", m.shape.str(), " and ", dtype_name(v.dtype), " ",
                  v.shape.str(), ")");
  return segs;
}

// AdamW's second moment is a running mean of squared gradients: a negative one is damage,
// and would otherwise be blamed steps later on a divergence.
void check_nonnegative(const Tensor& part, const std::string& path, int64_t first, int64_t total) {
  const float* x = part.data<float>();
  for (int64_t i = 0; i < part.numel(); ++i)
    if (x[i] < 0)
      KIRI_RAISE(kCheckpoint, path, ": tensor exp_avg_sq holds a negative value (", x[i],
                 ") at element ", first + i, " of ", total,
                 ": a second moment is a mean of squares, so the file is damaged");
}

// An optimizer file's own record of the step, optimizer step and data position (kiri's since
// the checksums; an older file has only "step") against state.json's: a state.json edited,
// or a file of another checkpoint, is named rather than believed.
void check_optimizer_metadata(const ckpt::SafetensorsFile& file,
                              const ckpt::CheckpointState& state) {
  const auto check = [&](const char* key, const std::string& want, const char* field) {
    const auto it = file.metadata().find(key);
    if (it == file.metadata().end()) return;
    KIRI_CHECK_KIND(kCheckpoint, it->second == want, file.path(), " records ", key, " = ",
                    quote_bounded(it->second, 40), ", but state.json says ", field, " = ", want,
                    ": state.json was edited, or the file is another checkpoint's");
  };
  check("step", std::to_string(state.optimizer_step), "optimizer_step");
  check(ckpt::kStepMetadataKey, std::to_string(state.step), "step");
  check(ckpt::kDataPositionMetadataKey, std::to_string(state.data_position), "data.position");
}

// Elements [src, src + n) of the file's m and v into [dst, dst + n) of the optimizer's, in
// pieces through buf, each piece checked.
void copy_states(const ckpt::SafetensorsFile& file, int64_t src, int64_t dst, int64_t n,
                 optim::AdamW& opt, Tensor& buf) {
  const int64_t total = file.info("exp_avg").shape.numel();
  for (const auto& [name, state] : {std::pair{"exp_avg", optim::State::kExpAvg},
                                    std::pair{"exp_avg_sq", optim::State::kExpAvgSq}})
    for_each_piece(n, buf.numel(), [&](int64_t b, int64_t len) {
      Tensor part = buf.flat_range(0, len);
      file.read_range(name, src + b, part);
      check_finite_piece(part, file.path() + ": tensor " + name, src + b, total);
      if (state == optim::State::kExpAvgSq) check_nonnegative(part, file.path(), src + b, total);
      opt.write_state(state, dst + b, part);
    });
}
}  // namespace

void Trainer::load_optimizer_states(const std::string& dir, const std::vector<std::string>& files) {
  // Parsed again, not verified again: read_checkpoint has checked the files of its manifest.
  const std::string where = dir + "/state.json";
  const ckpt::CheckpointState state = ckpt::parse_checkpoint_state(
      read_small_file(where, ckpt::kMaxStateBytes, ErrorKind::kCheckpoint, "checkpoint state"),
      where);
  const auto& mine = optimizer_->segments();
  std::vector<int64_t> covered(mine.size(), 0), needed(mine.size(), 0);
  std::vector<std::vector<GlobalPiece>> pieces;
  for (size_t i = 0; i < mine.size(); ++i) {
    pieces.push_back(global_pieces(mine[i]));
    for (const GlobalPiece& g : pieces.back()) needed[i] += g.length;
  }
  Tensor buf = Tensor::empty({checkpoint_piece_elements(cfg_.checkpoint)}, DType::kF32,
                             Category::kBuffers, allocator_);
  for (const std::string& name : files) {
    const std::string path = dir + "/" + name;
    KIRI_CHECK_KIND(kCheckpoint, std::filesystem::exists(path), dir, "/state.json lists ", name,
                    " but the file is missing");
    // Mapped: only the pieces this rank needs are read, and dropped again after use.
    const ckpt::SafetensorsFile file = ckpt::SafetensorsFile::map(path);
    check_optimizer_metadata(file, state);
    const json segs = read_segments(file, path);
    const int64_t states = file.info("exp_avg").shape.numel();
    for (const json& s : segs) {
      const Segment seg = parse_segment(s, states, path);
      for (size_t i = 0; i < mine.size(); ++i) {
        if (mine[i].param->name != seg.name) continue;
        for (const GlobalPiece& g : pieces[i]) {  // both in the whole parameter's coordinates
          const int64_t lo = std::max(seg.begin, g.global),
                        hi = std::min(seg.begin + seg.count, g.global + g.length);
          if (lo >= hi) continue;
          copy_states(file, seg.offset + (lo - seg.begin), g.state + (lo - g.global), hi - lo,
                      *optimizer_, buf);
          covered[i] += hi - lo;
        }
      }
    }
    file.release("exp_avg");
    file.release("exp_avg_sq");
  }
  for (size_t i = 0; i < mine.size(); ++i)
    KIRI_CHECK_KIND(kCheckpoint, covered[i] == needed[i], dir, ": the optimizer files hold ",
                    covered[i], " of the ", needed[i], " elements of ", mine[i].param->name,
                    " from element ", mine[i].begin, " that this rank needs");
}

void Trainer::load_checkpoint(const std::string& path) {
  wait_for_checkpoint();  // a save in flight would commit over what is resumed
  finish_update();        // a step's update still running would write over what is loaded
  // Every rank reads its part, then all agree: a bad file on one rank stops every rank here
  // with that rank's error, instead of the others waiting in their first collective until
  // parallel.timeout_s while it exits.
  comm::run_agreed(*world_, [&] { read_checkpoint(path); });
  optimizer_->write_back();
  parallel_->synchronize_parameters();
}

void Trainer::read_checkpoint(const std::string& path) {
  const std::string dir = ckpt::resolve_checkpoint(path);
  const ckpt::CheckpointState state = ckpt::read_checkpoint_state(dir);
  if (is_rank0())  // rank 0 holds the fingerprints; run_agreed stops every rank on a change
    if (const std::string note = check_fingerprints(
            state.fingerprints, fingerprints_.at("tokenizer"), fingerprints_.at("data"), dir,
            cfg_.data.tokenizer, accept_data_change_);
        !note.empty())
      log::info(note);
  step_ = state.step;
  data_position_ = state.data_position;
  optimizer_->set_step_count(state.optimizer_step);
  if (scaler_ && state.loss_scaler)
    scaler_->set_state({state.loss_scaler->scale, state.loss_scaler->clean_steps,
                        state.loss_scaler->skipped_steps});
  load_model(dir);
  load_optimizer_states(dir, state.optimizer_files);
}

void Trainer::init_from(const std::string& path) {
  finish_update();
  const std::string dir = ckpt::resolve_model_folder(path);
  comm::run_agreed(*world_, [&] { load_model(dir); });
  optimizer_->write_back();
  parallel_->synchronize_parameters();
  if (is_rank0()) log::info("initialized the weights from ", dir, " (a fresh optimizer, step 0)");
}

}  // namespace kiri::train
