#include "kiri/ckpt/hf/llama_adapter.h"

#include <cmath>
#include <utility>

#include "kiri/base/file_read.h"
#include "kiri/ckpt/hf/hf_config.h"

namespace kiri::ckpt::hf {

using nlohmann::json;

namespace {

constexpr int64_t kMaxDim = int64_t{1} << 20;

[[noreturn]] void refuse(const std::string& path, const std::string& key, const json& value,
                         const std::string& why) {
  KIRI_RAISE(kCheckpoint, path, ": ", key, " = ", quote_bounded(value.dump(), 80),
             " is not supported: ", why);
}

// A required integer key in [lo, hi] (LlamaConfig's shape keys).
int shape_int(const json& c, const std::string& path, const std::string& key, int64_t lo,
              int64_t hi) {
  KIRI_CHECK_KIND(kCheckpoint, c.contains(key), path, " has no '", key,
                  "': not the config.json of a Llama");
  const json& v = c[key];
  KIRI_CHECK_KIND(kCheckpoint,
                  v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi, path,
                  ": '", key, "' must be an integer in [", lo, ", ", hi, "], got ",
                  quote_bounded(v.dump(), 80));
  return static_cast<int>(v.get<int64_t>());
}

// obj[key] as a number; `fallback` when absent or null (LlamaConfig's default), `required`:
// then missing is an error. `where` names obj for messages ("rope_scaling.").
double number(const json& obj, const std::string& path, const std::string& where,
              const std::string& key, double fallback, bool required = false) {
  const bool absent = !obj.contains(key) || obj[key].is_null();
  KIRI_CHECK_KIND(kCheckpoint, !(absent && required), path, " has no '", where, key, "'");
  if (absent) return fallback;
  KIRI_CHECK_KIND(kCheckpoint, obj[key].is_number(), path, ": '", where, key,
                  "' must be a number, got ", quote_bounded(obj[key].dump(), 80));
  return obj[key].get<double>();
}

bool flag(const json& c, const std::string& path, const std::string& key, bool fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  KIRI_CHECK_KIND(kCheckpoint, c[key].is_boolean(), path, ": '", key,
                  "' must be true or false, got ", quote_bounded(c[key].dump(), 80));
  return c[key].get<bool>();
}

// The rotary embedding's settings in their two spellings: transformers 4's top-level
// rope_theta + rope_scaling, and transformers 5's rope_parameters (rope_type, rope_theta and
// the type's keys). Each type is mapped or refused by name; a folder whose two spellings
// disagree would be one model in transformers 4 and another in 5, and is refused.
struct Rope {
  double theta = 10000.0;  // LlamaConfig's default
  kiri::RopeScaling scaling;
};

// One rope dict (`where`: "rope_parameters." or "rope_scaling.") as kiri's rope; `theta`
// when the dict has no rope_theta of its own.
Rope rope_from(const json& s, const std::string& path, const std::string& where, double theta,
               int max_positions) {
  Rope r;
  r.theta = number(s, path, where, "rope_theta", theta);
  KIRI_CHECK_KIND(kCheckpoint, r.theta > 0 && std::isfinite(r.theta), path, ": '", where,
                  "rope_theta' must be a positive number, got ", r.theta);
  // "type" is rope_type's older name; transformers 5 reads it when rope_type is absent.
  const std::string type_key = s.contains("rope_type") ? "rope_type" : "type";
  const json type = s.contains(type_key) ? s[type_key] : json("default");
  if (type != "default" && type != "llama3")
    refuse(path, where + type_key, type,
           "kiri's rotary embedding scales as Llama 3 does (\"llama3\") or not at all "
           "(\"default\"); it has no linear, dynamic, yarn or longrope scaling");
  const bool llama3 = type == "llama3";
  for (const auto& [key, value] : s.items()) {
    const bool known =
        key == "rope_type" || key == "type" || key == "rope_theta" ||
        (llama3 && (key == "factor" || key == "low_freq_factor" || key == "high_freq_factor" ||
                    key == "original_max_position_embeddings"));
    if (key == "partial_rotary_factor" && value == json(1.0)) continue;
    if (!known)
      refuse(path, where + key, value,
             str("kiri's ", type.get<std::string>(),
                 " rotary embedding has no such setting (it rotates every dimension of each "
                 "head)"));
  }
  if (!llama3) return r;
  r.scaling.type = kiri::RopeScaling::Type::kLlama3;
  r.scaling.factor = number(s, path, where, "factor", 0, true);
  r.scaling.low_freq_factor = number(s, path, where, "low_freq_factor", 0, true);
  r.scaling.high_freq_factor = number(s, path, where, "high_freq_factor", 0, true);
  // transformers 5 takes max_position_embeddings when the dict has none.
  r.scaling.original_max_position_embeddings =
      s.contains("original_max_position_embeddings")
          ? shape_int(s, path, "original_max_position_embeddings", 1, kMaxDim)
          : max_positions;
  return r;
}

bool same_rope(const Rope& a, const Rope& b) {
  const kiri::RopeScaling &x = a.scaling, &y = b.scaling;
  return a.theta == b.theta && x.type == y.type &&
         (x.type == kiri::RopeScaling::Type::kNone ||
          (x.factor == y.factor && x.low_freq_factor == y.low_freq_factor &&
           x.high_freq_factor == y.high_freq_factor &&
           x.original_max_position_embeddings == y.original_max_position_embeddings));
}

Rope read_rope(const json& c, const std::string& path, int max_positions) {
  const double theta = number(c, path, "", "rope_theta", 10000.0);
  const auto dict = [&](const char* key) -> const json* {
    if (!c.contains(key) || c[key].is_null()) return nullptr;
    KIRI_CHECK_KIND(kCheckpoint, c[key].is_object(), path, ": '", key,
                    "' must be null or an object, got ", quote_bounded(c[key].dump(), 80));
    return &c[key];
  };
  const json* scaling = dict("rope_scaling");
  const json* params = dict("rope_parameters");
  Rope r;
  r.theta = theta;
  if (scaling) r = rope_from(*scaling, path, "rope_scaling.", theta, max_positions);
  if (!params) return r;
  const bool old_spelling = scaling || (c.contains("rope_theta") && !c["rope_theta"].is_null());
  const Rope p = rope_from(*params, path, "rope_parameters.", theta, max_positions);
  // transformers 4 reads rope_theta + rope_scaling; 5 reads rope_scaling when it is not null
  // and rope_parameters otherwise: both spellings must give one model.
  if (old_spelling && !same_rope(r, p))
    KIRI_RAISE(kCheckpoint, path, ": rope_parameters = ", quote_bounded(params->dump(), 200),
               " contradicts rope_theta = ", theta,
               " and rope_scaling = ", quote_bounded(scaling ? scaling->dump() : "null", 200),
               " (transformers 4 reads those, transformers 5 rope_parameters when rope_scaling "
               "is null): make them agree");
  return p;
}

// What kiri's Llama cannot be: biases, another activation, heads of another width, another
// architecture.
void refuse_unsupported(const json& c, const std::string& path, const kiri::GPTConfig& m) {
  if (c.contains("architectures") && c["architectures"].is_array()) {
    bool known = c["architectures"].empty();
    for (const json& a : c["architectures"]) known = known || a == "LlamaForCausalLM";
    if (!known) refuse(path, "architectures", c["architectures"], "kiri reads LlamaForCausalLM");
  }
  if (c.contains("hidden_act") && c["hidden_act"] != "silu" && c["hidden_act"] != "swish")
    refuse(path, "hidden_act", c["hidden_act"], "kiri's SwiGLU MLP gates with SiLU (\"silu\")");
  if (flag(c, path, "attention_bias", false))
    refuse(path, "attention_bias", true, "kiri's q/k/v/o projections have no bias");
  if (flag(c, path, "mlp_bias", false))
    refuse(path, "mlp_bias", true, "kiri's gate/up/down projections have no bias");
  if (c.contains("head_dim") && !c["head_dim"].is_null() &&
      c["head_dim"] != json(int64_t{m.n_embd / m.n_head}))
    refuse(path, "head_dim", c["head_dim"],
           str("kiri's heads are hidden_size / num_attention_heads = ", m.n_embd, " / ", m.n_head,
               " = ", m.n_embd / m.n_head, " wide"));
}

}  // namespace

std::optional<std::string> LlamaAdapter::from_hf(const std::string& name) {
  // The rotary frequencies older transformers saved with a Llama: a buffer, computed from
  // config.json.
  const std::string tail = ".rotary_emb.inv_freq";
  if (name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0)
    return std::nullopt;
  return name;
}

bool LlamaAdapter::is_config(const json& c) {
  if (c.contains("model_type")) return c["model_type"] == "llama";
  if (!c.contains("architectures") || !c["architectures"].is_array()) return false;
  for (const json& a : c["architectures"])
    if (a == "LlamaForCausalLM") return true;
  return false;
}

HfConfig LlamaAdapter::from_hf_config(const json& c, const std::string& path) {
  HfConfig out;
  kiri::GPTConfig& m = out.model;
  m.arch = kiri::Arch::kLlama;
  m.n_layer = shape_int(c, path, "num_hidden_layers", 1, kMaxDim);
  m.n_head = shape_int(c, path, "num_attention_heads", 1, kMaxDim);
  m.n_embd = shape_int(c, path, "hidden_size", 1, kMaxDim);
  m.intermediate_size = shape_int(c, path, "intermediate_size", 1, int64_t{1} << 24);
  m.vocab_size = shape_int(c, path, "vocab_size", 2, int64_t{1} << 30);
  m.block_size = shape_int(c, path, "max_position_embeddings", 1, kMaxDim);
  m.num_key_value_heads = c.contains("num_key_value_heads") && !c["num_key_value_heads"].is_null()
                              ? shape_int(c, path, "num_key_value_heads", 1, kMaxDim)
                              : m.n_head;  // LlamaConfig: multi-head attention
  m.rms_norm_eps = number(c, path, "", "rms_norm_eps", 1e-6);
  const Rope rope = read_rope(c, path, m.block_size);
  m.rope_theta = rope.theta;
  m.rope_scaling = rope.scaling;
  m.tie_word_embeddings = flag(c, path, "tie_word_embeddings", false);  // LlamaConfig's default
  refuse_unsupported(c, path, m);
  static constexpr const char* kRead[] = {"hidden_size",
                                          "intermediate_size",
                                          "num_hidden_layers",
                                          "num_attention_heads",
                                          "num_key_value_heads",
                                          "vocab_size",
                                          "max_position_embeddings",
                                          "rms_norm_eps",
                                          "rope_theta",
                                          "rope_scaling",
                                          "rope_parameters",
                                          "tie_word_embeddings",
                                          "hidden_act",
                                          "attention_bias",
                                          "mlp_bias",
                                          "head_dim",
                                          "attention_dropout",
                                          "pretraining_tp"};
  check_config_keys(c, path, kRead);
  try {
    m.validate();
  } catch (const Error& e) {
    KIRI_RAISE(kCheckpoint, path, ": ", e.what());
  }
  const double dropout = number(c, path, "", "attention_dropout", 0);
  if (dropout != 0)
    out.notes.push_back(
        str(path, ": attention_dropout = ", dropout, " ignored: kiri trains without dropout"));
  const double tp = number(c, path, "", "pretraining_tp", 1);
  if (tp != 1)
    out.notes.push_back(str(path, ": pretraining_tp = ", tp,
                            ": the same function (transformers computes the projections in ", tp,
                            " slices), which kiri computes whole"));
  return out;
}

// LlamaConfig's keys for kiri's llama (no biases, SiLU, no dropout). The rotary embedding in
// both spellings, which say the same: transformers 4 reads rope_theta + rope_scaling, 5 reads
// rope_scaling when it is not null and rope_parameters otherwise, and writes rope_parameters.
json LlamaAdapter::to_hf_config(const kiri::GPTConfig& m, DType dtype) {
  json scaling = nullptr;
  json params = {{"rope_type", "default"}, {"rope_theta", m.rope_theta}};
  if (m.rope_scaling.type == kiri::RopeScaling::Type::kLlama3) {
    scaling = {
        {"rope_type", "llama3"},
        {"factor", m.rope_scaling.factor},
        {"low_freq_factor", m.rope_scaling.low_freq_factor},
        {"high_freq_factor", m.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", m.rope_scaling.original_max_position_embeddings}};
    params = scaling;
    params["rope_theta"] = m.rope_theta;
  }
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", m.n_embd},
          {"intermediate_size", m.mlp_width()},
          {"num_hidden_layers", m.n_layer},
          {"num_attention_heads", m.n_head},
          {"num_key_value_heads", m.kv_heads()},
          {"head_dim", m.head_dim()},
          {"max_position_embeddings", m.block_size},
          {"vocab_size", m.vocab_size},
          {"rms_norm_eps", m.rms_norm_eps},
          {"rope_theta", m.rope_theta},
          {"rope_scaling", scaling},
          {"rope_parameters", params},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"attention_dropout", 0.0},
          {"initializer_range", 0.02},
          {"pretraining_tp", 1},
          {"tie_word_embeddings", m.tie_word_embeddings},
          {"use_cache", true},
          // transformers 4's name, which 5 reads too when there is no "dtype"; 5's own name
          // would outlive a transformers 4 load and save in another dtype as a stale key.
          {"torch_dtype", torch_dtype_name(dtype)}};
}

}  // namespace kiri::ckpt::hf
