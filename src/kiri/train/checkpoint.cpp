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
// place only when every file is complete.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "kiri/base/atomic_file.h"
#include "kiri/base/file_read.h"
#include "kiri/base/log.h"
#include "kiri/ckpt/checkpoint_dir.h"
#include "kiri/ckpt/safetensors.h"
#include "kiri/comm/agree.h"
#include "kiri/train/checkpoint_state.h"
#include "kiri/train/hf_model.h"
#include "kiri/train/trainer.h"

namespace kiri::train {

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
  KIRI_CHECK_KIND(kCheckpoint, t.dtype() == DType::kF32, what, " is ", dtype_name(t.dtype()),
                  ", expected F32");
  const float* x = t.data<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i]))
      KIRI_RAISE(kCheckpoint, what, " holds a non-finite value (", x[i], ") at element ", i, " of ",
                 n, ": the run that wrote it diverged, or the file is corrupt");
}

int Trainer::optimizer_writers_per_stage() const {
  return parallel_->zero_stage() == 0                 ? 1
         : parallel_->options().shard_group_size == 0 ? mesh_->shape().dp
                                                      : parallel_->options().shard_group_size;
}

bool Trainer::writes_optimizer_states() const {
  return mesh_->dp_index() < optimizer_writers_per_stage();
}

namespace {
// Receives the parameters of pipeline stage `stage` (but the tied copy of
// wte) from that stage's rank of `pp`, in the order the stage sends them.
void receive_stage(comm::Communicator& pp, int stage, const RunConfig& cfg,
                   const model::PipelineOptions& pipeline, Allocator& alloc,
                   std::vector<std::pair<std::string, Tensor>>& out) {
  const auto chunks =
      model::make_gpt_chunks(cfg.model, pp.size(), stage, pipeline, cfg.train.seq_len);
  int tag = 0;
  for (const auto& c : chunks)
    for (nn::Parameter* p : c->parameters()) {
      if (p->name == "transformer.wte.weight" && !c->part().first) continue;
      Tensor t = Tensor::empty(p->shape, DType::kF32, Category::kBuffers, alloc);
      Tensor flat = t.view({p->numel()});
      pp.recv(flat, stage, tag++);
      out.emplace_back(p->name, t);
    }
}
}  // namespace

namespace {
// The whole parameter from every tensor-parallel rank's part (all_gather over tp).
Tensor assemble_tp(comm::Communicator& tp, const nn::Parameter& p, const Tensor& part,
                   Allocator& alloc) {
  const int64_t n = p.numel();
  Tensor all = Tensor::empty({int64_t{tp.size()} * n}, DType::kF32, Category::kBuffers, alloc);
  tp.all_gather(part.view({n}), all);
  Tensor full = Tensor::zeros(p.full, DType::kF32, Category::kBuffers, alloc);
  nn::Parameter q = p;
  for (int j = 0; j < tp.size(); ++j) {
    q.tp.index = j;
    for (const nn::ElementRun& r : nn::element_runs(q))
      full.flat_range(r.global, r.length).copy_from(all.flat_range(j * n + r.local, r.length));
  }
  return full;
}
}  // namespace

std::vector<std::pair<std::string, Tensor>> Trainer::gather_model() {
  // 1. This rank's parameters in fp32, on dp rank 0 of its stage.
  std::vector<std::pair<nn::Parameter*, Tensor>> local;
  const auto& segs = optimizer_->segments();
  const bool keep = mesh_->dp_index() == 0;
  parallel::ShardedDataParallel* sharded = parallel_->sharded();
  if (!sharded) {  // stage 0: every rank holds every parameter whole
    if (keep)
      for (size_t i = 0; i < segs.size(); ++i)
        local.emplace_back(segs[i].param, optimizer_->weights(i).view(segs[i].param->shape));
  } else {
    const auto& units = sharded->units();
    for (size_t u = 0; u < units.size(); ++u) {
      const parallel::ShardUnit& unit = units[u];
      Tensor shard = Tensor::zeros({unit.shard}, DType::kF32, Category::kBuffers, allocator_);
      for (size_t i = 0; i < segs.size(); ++i) {
        const int64_t at = segs[i].state_offset - unit.shard_offset;
        if (at >= 0 && at < unit.shard)
          shard.flat_range(at, segs[i].numel()).copy_from(optimizer_->weights(i));
      }
      Tensor full = Tensor::empty({unit.padded}, DType::kF32, Category::kBuffers, allocator_);
      sharded->all_gather_unit(static_cast<int>(u), shard, full);
      if (!keep) continue;
      for (size_t k = 0; k < unit.params.size(); ++k) {
        nn::Parameter* p = unit.params[k];
        local.emplace_back(p, full.flat_range(unit.param_offsets[k], p->numel()).view(p->shape));
      }
    }
  }
  if (!keep) return {};
  nn::Parameter* copy = parallel_->tied_copy();
  local.erase(
      std::remove_if(local.begin(), local.end(), [&](const auto& e) { return e.first == copy; }),
      local.end());
  // 2. Tensor-parallel parts become whole parameters on tp rank 0.
  if (mesh_->shape().tp > 1) {
    for (auto& [p, t] : local) t = assemble_tp(mesh_->tp(), *p, t, allocator_);
    if (mesh_->tp_index() != 0) return {};
  }
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [p, t] : local) out.emplace_back(p->name, t);
  if (mesh_->shape().pp == 1) return is_rank0() ? out : decltype(out){};
  // 3. Pipeline stages send theirs to stage 0, in parameter order.
  comm::Communicator& pp = mesh_->pp();
  if (mesh_->pp_index() != 0) {
    int tag = 0;
    for (auto& [name, t] : out) {
      Tensor flat = t.view({t.numel()});
      pp.send(flat, 0, tag++);
    }
    return {};
  }
  for (int s = 1; s < pp.size(); ++s)
    receive_stage(pp, s, cfg_, parallel_->options().pipeline, allocator_, out);
  return out;
}

std::string Trainer::save_checkpoint() {
  const std::string& root = cfg_.checkpoint.dir;
  // A checkpoint of non-finite weights would only spread the divergence to every resume:
  // each rank checks its master weights, and all stop together before anything is written.
  comm::run_agreed(*world_, [&] {
    const auto& segs = optimizer_->segments();
    for (size_t i = 0; i < segs.size(); ++i)
      check_finite(optimizer_->weights(i), str("refusing to save the checkpoint of step ", step_,
                                               ": parameter ", segs[i].param->name));
  });
  const auto model = gather_model();  // collective under sharding
  if (is_rank0()) ckpt::begin_checkpoint(root, step_);
  world_->barrier();
  const std::string tmp = ckpt::temp_dir(root, step_);
  // One optimizer file per shard of each pipeline stage.
  const int per_stage = optimizer_writers_per_stage();
  const int writers = per_stage * mesh_->shape().pp * mesh_->shape().tp;
  if (writes_optimizer_states()) {
    // Segments in the whole parameters' coordinates, so that any layout
    // (another tp, dp or pp) can find its elements.
    json segs = json::array();
    for (const auto& s : optimizer_->segments())
      // One copy of everything: the first stage's tied embedding, tp rank 0's
      // replicated parameters.
      if (s.param != parallel_->tied_copy() && (s.param->tp.dim >= 0 || mesh_->tp_index() == 0))
        for (const GlobalPiece& g : global_pieces(s))
          segs.push_back({s.param->name, g.global, g.length, g.state});
    const int index =
        (mesh_->pp_index() * mesh_->shape().tp + mesh_->tp_index()) * per_stage + mesh_->dp_index();
    ckpt::save_safetensors(
        tmp + "/" + optimizer_file_name(index, writers),
        {{"exp_avg", optimizer_->exp_avg()}, {"exp_avg_sq", optimizer_->exp_avg_sq()}},
        {{"optimizer", "adamw"},
         {"step", std::to_string(optimizer_->step_count())},
         {"segments", segs.dump()}});
  }
  world_->barrier();  // every shard is on disk before rank 0 commits
  if (!is_rank0()) {
    world_->barrier();
    return root + "/" + ckpt::step_dir_name(step_);
  }
  // In the whole model's parameter order (stages arrive in pipeline order).
  std::vector<ckpt::NamedTensor> tensors;
  const model::GPT<float> whole(cfg_.model);
  for (nn::Parameter* p : const_cast<model::GPT<float>&>(whole).parameters())
    for (const auto& [name, t] : model)
      if (name == p->name) tensors.push_back({name, t});
  KIRI_CHECK(tensors.size() == model.size(), "gathered ", model.size(),
             " parameters, the model has ", tensors.size());
  write_hf_folder(
      tmp, cfg_.model, *tokenizer_, cfg_.data.tokenizer, tensors, DType::kF32,
      parse_max_shard_size(cfg_.checkpoint.max_shard_size, "checkpoint.max_shard_size"));
  json files = json::array();
  for (int i = 0; i < writers; ++i) files.push_back(optimizer_file_name(i, writers));
  json state = {{"format_version", kCheckpointFormatVersion},
                {"step", step_},
                {"optimizer_step", optimizer_->step_count()},
                {"optimizer_files", files},
                {"layout",
                 {{"dp", mesh_->shape().dp},
                  {"tp", mesh_->shape().tp},
                  {"pp", mesh_->shape().pp},
                  {"zero_stage", parallel_->zero_stage()},
                  {"shard_group_size", parallel_->options().shard_group_size},
                  {"dtype", dtype_name(compute_dtype())}}},
                {"data", {{"position", data_position_}, {"seed", cfg_.train.seed}}},
                // kiri's random numbers are counter-based: every draw is a function of
                // (seed, stream, index), so the seed and the data position are the whole state.
                {"rng", {{"seed", cfg_.train.seed}, {"kind", "counter"}}},
                {"config", config_json_.empty() ? json() : json::parse(config_json_)}};
  if (scaler_) {
    const auto s = scaler_->state();
    state["loss_scaler"] = {
        {"scale", s.scale}, {"clean_steps", s.clean_steps}, {"skipped_steps", s.skipped_steps}};
  }
  write_file_atomic(tmp + "/state.json", state.dump(2) + "\n");
  const std::string done = ckpt::commit_checkpoint(root, step_, cfg_.checkpoint.keep_last);
  world_->barrier();
  return done;
}

// Into the master weights only: load_checkpoint writes them back once every rank has read.
// Each rank reads the tensors it holds (a shard file only when one of them lies in it).
void Trainer::load_model(const std::string& dir) {
  HfWeights file = HfWeights::open(dir);
  {
    std::vector<std::string> names;
    const model::GPT<float> whole(cfg_.model);
    for (nn::Parameter* p : const_cast<model::GPT<float>&>(whole).parameters())
      names.push_back(p->name);
    file.check_names(names);
  }
  const auto& segs = optimizer_->segments();
  for (size_t i = 0; i < segs.size(); ++i) {
    nn::Parameter* p = segs[i].param;
    Tensor w = optimizer_->weights(i);
    if (p->tp.dim < 0 && segs[i].begin == 0 && segs[i].numel() == p->numel()) {
      Tensor whole = w.view(p->shape);
      file.read(p->name, whole);
      check_finite(whole, file.path_of(p->name) + ": tensor " + p->name);
      continue;
    }
    // A piece of the whole parameter (the file holds it whole): read it, take ours.
    Tensor whole = Tensor::empty(p->full, DType::kF32, Category::kBuffers, allocator_);
    file.read(p->name, whole);
    check_finite(whole, file.path_of(p->name) + ": tensor " + p->name);
    for (const GlobalPiece& g : global_pieces(segs[i]))
      w.flat_range(g.state - segs[i].state_offset, g.length)
          .copy_from(whole.flat_range(g.global, g.length));
  }
}

void Trainer::load_optimizer_states(const std::string& dir, const std::vector<std::string>& files) {
  const auto& mine = optimizer_->segments();
  std::vector<int64_t> covered(mine.size(), 0), needed(mine.size(), 0);
  std::vector<std::vector<GlobalPiece>> pieces;
  for (size_t i = 0; i < mine.size(); ++i) {
    pieces.push_back(global_pieces(mine[i]));
    for (const GlobalPiece& g : pieces.back()) needed[i] += g.length;
  }
  for (const std::string& name : files) {
    const std::string path = dir + "/" + name;
    KIRI_CHECK_KIND(kCheckpoint, std::filesystem::exists(path), dir, "/state.json lists ", name,
                    " but the file is missing");
    ckpt::SafetensorsFile file = ckpt::SafetensorsFile::open(path);
    const auto meta = file.metadata().find("segments");
    KIRI_CHECK_KIND(kCheckpoint, meta != file.metadata().end(), path,
                    " has no 'segments' metadata");
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
    const Tensor m = file.get("exp_avg"), v = file.get("exp_avg_sq");
    KIRI_CHECK_KIND(kCheckpoint, segs.is_array() && m.numel() == v.numel(), path,
                    ": 'segments' must be a list and exp_avg and exp_avg_sq the same size");
    check_finite(m, path + ": tensor exp_avg");
    check_finite(v, path + ": tensor exp_avg_sq");
    for (const json& s : segs) {
      const Segment seg = parse_segment(s, m.numel(), path);
      const std::string& pname = seg.name;
      const int64_t begin = seg.begin, count = seg.count, offset = seg.offset;
      for (size_t i = 0; i < mine.size(); ++i) {
        if (mine[i].param->name != pname) continue;
        for (const GlobalPiece& g : pieces[i]) {  // both in the whole parameter's coordinates
          const int64_t lo = std::max(begin, g.global),
                        hi = std::min(begin + count, g.global + g.length);
          if (lo >= hi) continue;
          const int64_t dst = g.state + (lo - g.global), src = offset + (lo - begin);
          optimizer_->exp_avg().flat_range(dst, hi - lo).copy_from(m.flat_range(src, hi - lo));
          optimizer_->exp_avg_sq().flat_range(dst, hi - lo).copy_from(v.flat_range(src, hi - lo));
          covered[i] += hi - lo;
        }
      }
    }
  }
  for (size_t i = 0; i < mine.size(); ++i)
    KIRI_CHECK_KIND(kCheckpoint, covered[i] == needed[i], dir, ": the optimizer files hold ",
                    covered[i], " of the ", needed[i], " elements of ", mine[i].param->name,
                    " from element ", mine[i].begin, " that this rank needs");
}

void Trainer::load_checkpoint(const std::string& path) {
  // Every rank reads its part, then all agree: a bad file on one rank stops every rank here
  // with that rank's error, instead of the others waiting in their first collective until
  // parallel.timeout_s while it exits.
  comm::run_agreed(*world_, [&] { read_checkpoint(path); });
  optimizer_->write_back();
  parallel_->synchronize_parameters();
}

void Trainer::read_checkpoint(const std::string& path) {
  const std::string dir = ckpt::resolve_checkpoint(path);
  const CheckpointState state = read_checkpoint_state(dir);
  step_ = state.step;
  data_position_ = state.data_position;
  optimizer_->set_step_count(state.optimizer_step);
  if (scaler_ && state.loss_scaler) scaler_->set_state(*state.loss_scaler);
  load_model(dir);
  load_optimizer_states(dir, state.optimizer_files);
}

void Trainer::init_from(const std::string& path) {
  const std::string dir = resolve_model_folder(path);
  comm::run_agreed(*world_, [&] { load_model(dir); });
  optimizer_->write_back();
  parallel_->synchronize_parameters();
  if (is_rank0()) log::info("initialized the weights from ", dir, " (a fresh optimizer, step 0)");
}

}  // namespace kiri::train
