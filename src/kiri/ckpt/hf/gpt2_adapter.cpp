#include "kiri/ckpt/hf/gpt2_adapter.h"

#include <cmath>

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"     // quote_bounded
#include "kiri/ckpt/hf/hf_config.h"  // check_config_keys

namespace kiri::ckpt::hf {

using nlohmann::json;

namespace {

// config.json's integer `key` in [lo, hi]; `alt`, when given, is read if `key` is absent.
int config_int(const json& c, const std::string& path, const std::string& key, int64_t lo,
               int64_t hi, const char* alt = nullptr) {
  const std::string k = c.contains(key) || !alt ? key : std::string(alt);
  KIRI_CHECK_KIND(kCheckpoint, c.contains(k), path, " has no '", key,
                  "': not the config.json of a GPT-2");
  const json& v = c[k];
  KIRI_CHECK_KIND(
      kCheckpoint, v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi, path,
      ": '", k, "' must be an integer in [", lo, ", ", hi, "], got ", quote_bounded(v.dump(), 80));
  return static_cast<int>(v.get<int64_t>());
}

// Before any other key: a folder of another architecture (a Llama's is read apart).
void refuse_model_type(const json& c, const std::string& path) {
  if (c.contains("model_type") && c["model_type"] != "gpt2")
    KIRI_RAISE(kCheckpoint, path, ": model_type = ", quote_bounded(c["model_type"].dump(), 80),
               " is not supported: kiri reads GPT-2 (model_type \"gpt2\") and Llama (\"llama\") "
               "folders");
}

// Refuses config.json values that kiri's GPT-2 cannot honour (the key, its value and why).
void refuse_unsupported(const json& c, const std::string& path, const kiri::GPTConfig& m) {
  const auto refuse = [&](const std::string& key, const std::string& why) {
    KIRI_RAISE(kCheckpoint, path, ": ", key, " = ", quote_bounded(c[key].dump(), 80),
               " is not supported: ", why);
  };
  if (c.contains("layer_norm_epsilon") &&
      !(c["layer_norm_epsilon"].is_number() &&
        std::fabs(c["layer_norm_epsilon"].get<double>() - 1e-5) <= 1e-12))
    refuse("layer_norm_epsilon", "kiri's LayerNorm uses eps 1e-05");
  if (c.contains("activation_function") && c["activation_function"] != "gelu_new" &&
      c["activation_function"] != "gelu_pytorch_tanh")
    refuse("activation_function", "kiri's MLP uses GELU's tanh form (\"gelu_new\")");
  if (c.contains("n_inner") && !c["n_inner"].is_null() && c["n_inner"] != int64_t{4} * m.n_embd)
    refuse("n_inner", str("kiri's MLP is 4 x n_embd = ", 4 * int64_t{m.n_embd}, " wide"));
  if (c.contains("scale_attn_weights") && c["scale_attn_weights"] != true)
    refuse("scale_attn_weights", "kiri scales attention by 1/sqrt(head size)");
  if (c.contains("scale_attn_by_inverse_layer_idx") &&
      c["scale_attn_by_inverse_layer_idx"] != false)
    refuse("scale_attn_by_inverse_layer_idx", "kiri does not scale attention by layer");
  if (c.contains("tie_word_embeddings") && c["tie_word_embeddings"] != true)
    refuse("tie_word_embeddings", "kiri ties the LM head to the token embedding");
  if (c.contains("add_cross_attention") && c["add_cross_attention"] != false)
    refuse("add_cross_attention", "kiri's GPT-2 is a decoder without cross-attention");
  if (c.contains("architectures") && c["architectures"].is_array()) {
    bool known = c["architectures"].empty();
    for (const json& a : c["architectures"])
      known = known || a == "GPT2LMHeadModel" || a == "GPT2Model";
    if (!known) refuse("architectures", "kiri reads GPT2LMHeadModel (or GPT2Model) weights");
  }
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::optional<std::string> Gpt2Adapter::from_hf(const std::string& name) {
  if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")) return std::nullopt;
  if (name == "lm_head.weight" || name.rfind("transformer.", 0) == 0) return name;
  return "transformer." + name;
}

json Gpt2Adapter::to_hf_config(const kiri::GPTConfig& m, DType dtype) {
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"n_layer", m.n_layer},
          {"n_head", m.n_head},
          {"n_embd", m.n_embd},
          {"n_positions", m.block_size},
          {"n_ctx", m.block_size},
          {"n_inner", nullptr},
          {"vocab_size", m.vocab_size},
          {"layer_norm_epsilon", 1e-5},
          {"activation_function", "gelu_new"},
          // kiri trains without dropout: fine-tuning in transformers then matches it.
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"initializer_range", 0.02},
          {"scale_attn_weights", true},
          {"scale_attn_by_inverse_layer_idx", false},
          {"reorder_and_upcast_attn", false},
          {"tie_word_embeddings", true},
          {"use_cache", true},
          // Both versions' name (llama_adapter.cpp says why).
          {"torch_dtype", torch_dtype_name(dtype)}};
}

HfConfig Gpt2Adapter::from_hf_config(const json& c, const std::string& path) {
  constexpr int64_t kMax = int64_t{1} << 20;
  HfConfig out;
  refuse_model_type(c, path);
  out.model.n_layer = config_int(c, path, "n_layer", 1, kMax);
  out.model.n_head = config_int(c, path, "n_head", 1, kMax);
  out.model.n_embd = config_int(c, path, "n_embd", 1, kMax);
  out.model.vocab_size = config_int(c, path, "vocab_size", 1, int64_t{1} << 30);
  out.model.block_size = config_int(c, path, "n_positions", 1, kMax, "n_ctx");
  refuse_unsupported(c, path, out.model);
  // summary_*: GPT2DoubleHeadsModel's classifier, which the LM does not have;
  // reorder_and_upcast_attn: the same attention computed in fp32, as kiri's is.
  static constexpr const char* kRead[] = {"n_layer",
                                          "n_head",
                                          "n_embd",
                                          "vocab_size",
                                          "n_positions",
                                          "n_ctx",
                                          "n_inner",
                                          "activation_function",
                                          "layer_norm_epsilon",
                                          "resid_pdrop",
                                          "embd_pdrop",
                                          "attn_pdrop",
                                          "scale_attn_weights",
                                          "scale_attn_by_inverse_layer_idx",
                                          "reorder_and_upcast_attn",
                                          "tie_word_embeddings",
                                          "summary_type",
                                          "summary_use_proj",
                                          "summary_activation",
                                          "summary_proj_to_labels",
                                          "summary_first_dropout"};
  check_config_keys(c, path, kRead);
  try {
    out.model.validate();
  } catch (const Error& e) {
    KIRI_RAISE(kCheckpoint, path, ": ", e.what());
  }
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"})
    if (c.contains(key) && c[key].is_number() && c[key].get<double>() != 0)
      out.notes.push_back(str(path, ": ", key, " = ", c[key].get<double>(),
                              " ignored: kiri trains without dropout"));
  if (c.contains("reorder_and_upcast_attn") && c["reorder_and_upcast_attn"] == true)
    out.notes.push_back(str(path,
                            ": reorder_and_upcast_attn = true: the same attention, which "
                            "kiri computes in fp32"));
  return out;
}

}  // namespace kiri::ckpt::hf
