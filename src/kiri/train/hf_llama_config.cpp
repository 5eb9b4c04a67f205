#include "kiri/train/hf_llama_config.h"

#include "kiri/base/file_read.h"

namespace kiri::train {

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

// rope_scaling: null, {"rope_type": "default"} (none), or Llama 3's; "type" is its older name.
model::RopeScaling rope_scaling(const json& c, const std::string& path) {
  model::RopeScaling r;
  if (!c.contains("rope_scaling") || c["rope_scaling"].is_null()) return r;
  const json& s = c["rope_scaling"];
  KIRI_CHECK_KIND(kCheckpoint, s.is_object(), path, ": 'rope_scaling' must be null or an object, ",
                  "got ", quote_bounded(s.dump(), 80));
  const char* key = s.contains("rope_type") ? "rope_type" : "type";
  const json type = s.contains(key) ? s[key] : json("default");
  if (type == "default") return r;
  if (type != "llama3")
    refuse(path, std::string("rope_scaling.") + key, type,
           "kiri's rotary embedding scales as Llama 3 does (\"llama3\") or not at all "
           "(\"default\"); it has no linear, dynamic, yarn or longrope scaling");
  r.type = model::RopeScaling::Type::kLlama3;
  r.factor = number(s, path, "rope_scaling.", "factor", 0, true);
  r.low_freq_factor = number(s, path, "rope_scaling.", "low_freq_factor", 0, true);
  r.high_freq_factor = number(s, path, "rope_scaling.", "high_freq_factor", 0, true);
  r.original_max_position_embeddings =
      shape_int(s, path, "original_max_position_embeddings", 1, kMaxDim);
  return r;
}

// What kiri's Llama cannot be: biases, another activation, heads of another width, another
// architecture.
void refuse_unsupported(const json& c, const std::string& path, const model::GPTConfig& m) {
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

bool is_llama_config(const json& c) {
  if (c.contains("model_type")) return c["model_type"] == "llama";
  if (!c.contains("architectures") || !c["architectures"].is_array()) return false;
  for (const json& a : c["architectures"])
    if (a == "LlamaForCausalLM") return true;
  return false;
}

HfConfig read_llama_config(const json& c, const std::string& path) {
  HfConfig out;
  model::GPTConfig& m = out.model;
  m.arch = model::Arch::kLlama;
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
  m.rope_theta = number(c, path, "", "rope_theta", 10000.0);
  m.rope_scaling = rope_scaling(c, path);
  m.tie_word_embeddings = flag(c, path, "tie_word_embeddings", false);  // LlamaConfig's default
  refuse_unsupported(c, path, m);
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

}  // namespace kiri::train
