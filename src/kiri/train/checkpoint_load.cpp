// CheckpointManager's loads: a resume (load) reads state.json, the model folder's weights
// and the optimizer files, re-cutting their segments for this run's layout; --init-from
// (init_from) reads the weights alone. The files are checkpoint_manager.cpp's.
#include <algorithm>
#include <exception>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiri/base/file_read.h"
#include "kiri/base/log.h"
#include "kiri/ckpt/checkpoint_dir.h"
#include "kiri/ckpt/checkpoint_manifest.h"
#include "kiri/ckpt/checkpoint_state.h"
#include "kiri/ckpt/hf/hf_model.h"
#include "kiri/ckpt/safetensors.h"
#include "kiri/comm/agree.h"
#include "kiri/model/gpt.h"
#include "kiri/train/checkpoint_manager.h"
#include "kiri/train/checkpoint_stream.h"
#include "kiri/train/fingerprint.h"

namespace kiri::train {

namespace hf = ckpt::hf;
using nlohmann::json;

void check_finite(const Tensor& t, const std::string& what) {
  check_finite_piece(t, what, 0, t.numel());
}

// Into the master weights only: load and init_from write them back once every rank has read.
// Each rank reads the elements it holds, in pieces (a shard file only when one of them lies
// in it), and drops each tensor's pages once read.
void CheckpointManager::load_model(const std::string& dir) {
  hf::HfWeights file = hf::HfWeights::open(dir);
  {
    std::vector<std::string> names;
    const model::GPT<float> whole(p_.cfg.model);
    for (nn::Parameter* p : const_cast<model::GPT<float>&>(whole).parameters())
      names.push_back(p->name);
    file.check_names(names);
  }
  const int64_t piece = checkpoint_piece_elements(p_.cfg.checkpoint);
  Tensor buf = Tensor::empty({piece}, DType::kF32, Category::kBuffers, p_.allocator);
  const auto& segs = p_.optimizer.segments();
  for (size_t i = 0; i < segs.size(); ++i) {
    nn::Parameter* p = segs[i].param;
    file.check_shape(p->name, p->full.rank() ? p->full : p->shape);
    const std::string what = file.path_of(p->name) + ": tensor " + p->name;
    for (const GlobalPiece& g : global_pieces(segs[i]))  // runs of the whole parameter
      for_each_piece(g.length, piece, [&](int64_t b, int64_t n) {
        Tensor part = buf.flat_range(0, n);
        file.read_range(p->name, g.global + b, part);
        check_finite_piece(part, what, g.global + b, p->full_numel());
        p_.optimizer.write_weights(i, g.state - segs[i].state_offset + b, part);
      });
    file.release(p->name);
  }
}

namespace {
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

void CheckpointManager::load_optimizer_states(const std::string& dir,
                                              const std::vector<std::string>& files) {
  // Parsed again, not verified again: read_checkpoint has checked the files of its manifest.
  const std::string where = dir + "/state.json";
  const ckpt::CheckpointState state = ckpt::parse_checkpoint_state(
      read_small_file(where, ckpt::kMaxStateBytes, ErrorKind::kCheckpoint, "checkpoint state"),
      where);
  const auto& mine = p_.optimizer.segments();
  std::vector<int64_t> covered(mine.size(), 0), needed(mine.size(), 0);
  std::vector<std::vector<GlobalPiece>> pieces;
  for (size_t i = 0; i < mine.size(); ++i) {
    pieces.push_back(global_pieces(mine[i]));
    for (const GlobalPiece& g : pieces.back()) needed[i] += g.length;
  }
  Tensor buf = Tensor::empty({checkpoint_piece_elements(p_.cfg.checkpoint)}, DType::kF32,
                             Category::kBuffers, p_.allocator);
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
                      p_.optimizer, buf);
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

void CheckpointManager::load(const std::string& path, int64_t& step, uint64_t& data_position) {
  wait();                       // a save in flight would commit over what is resumed
  p_.parallel.finish_update();  // a step's update still running would write over what is loaded
  // Every rank reads its part, then all agree: a bad file on one rank stops every rank here
  // with that rank's error, instead of the others waiting in their first collective until
  // parallel.timeout_s while it exits.
  comm::run_agreed(p_.world, [&] { read_checkpoint(path, step, data_position); });
  p_.optimizer.write_back();
  p_.parallel.synchronize_parameters();
}

void CheckpointManager::read_checkpoint(const std::string& path, int64_t& step,
                                        uint64_t& data_position) {
  const std::string dir = ckpt::resolve_checkpoint(path);
  const ckpt::CheckpointState state = ckpt::read_checkpoint_state(dir);
  if (is_rank0())  // rank 0 holds the fingerprints; run_agreed stops every rank on a change
    if (const std::string note = check_fingerprints(
            state.fingerprints, fingerprints_.at("tokenizer"), fingerprints_.at("data"), dir,
            p_.cfg.data.tokenizer, accept_data_change_);
        !note.empty())
      log::info(note);
  step = state.step;
  data_position = state.data_position;
  p_.optimizer.set_step_count(state.optimizer_step);
  if (scaler_ && state.loss_scaler)
    scaler_->set_state({state.loss_scaler->scale, state.loss_scaler->clean_steps,
                        state.loss_scaler->skipped_steps});
  load_model(dir);
  load_optimizer_states(dir, state.optimizer_files);
}

void CheckpointManager::init_from(const std::string& path) {
  p_.parallel.finish_update();
  const std::string dir = ckpt::resolve_model_folder(path);
  comm::run_agreed(p_.world, [&] { load_model(dir); });
  p_.optimizer.write_back();
  p_.parallel.synchronize_parameters();
  if (is_rank0()) log::info("initialized the weights from ", dir, " (a fresh optimizer, step 0)");
}

}  // namespace kiri::train
