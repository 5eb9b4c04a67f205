// config.json as kiri writes it: GPT2Config's or LlamaConfig's keys, in the spellings that
// transformers 4 and 5 both read (docs/checkpoints.md).
#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/ckpt/hf/gpt2_adapter.h"
#include "kiri/ckpt/hf/hf_model.h"
#include "kiri/ckpt/hf/llama_adapter.h"
#include "kiri/data/hf_tokenizer.h"

namespace kiri::ckpt::hf {

using nlohmann::json;

const char* torch_dtype_name(DType d) {
  switch (d) {
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    case DType::kF32:
      return "float32";
    default:
      KIRI_RAISE(kConfig, "a model folder holds F32, BF16 or F16 weights, not ", dtype_name(d));
  }
}

int32_t hf_bos_token(const data::Tokenizer& tokenizer) {
  const auto* hf = dynamic_cast<const data::HfTokenizer*>(&tokenizer);
  return hf && hf->bos_token() >= 0 ? hf->bos_token() : tokenizer.eot_token();
}

json hf_config_json(const kiri::GPTConfig& m, int32_t eot, DType dtype,
                    const std::string& tokenizer, int32_t bos) {
  if (bos < 0) bos = eot;
  json c = m.llama() ? LlamaAdapter::to_hf_config(m, dtype) : Gpt2Adapter::to_hf_config(m, dtype);
  c["kiri"] = {{"format_version", 1}, {"tokenizer", tokenizer}};
  if (bos >= 0) c["bos_token_id"] = bos;
  if (eot >= 0) c["eos_token_id"] = eot;
  return c;
}

}  // namespace kiri::ckpt::hf
