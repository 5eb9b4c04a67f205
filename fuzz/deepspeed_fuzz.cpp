// libFuzzer target: `--deepspeed ds_config.json`, the DeepSpeed mapping. The bytes are the
// file's text, read as load_deepspeed reads it (parse_config_json, "DeepSpeed config"), then
// mapped by apply_deepspeed onto kiri's defaults for 1 to 8 processes (the last byte picks
// how many), with and without an explicit kiri key to agree or contradict, and the result
// validated as a run would (kiri::validate).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_util.h"
#include "kiri/config/config_file.h"
#include "kiri/config/config_schema.h"
#include "kiri/config/deepspeed_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int world = size == 0 ? 1 : 1 + data[size - 1] % 8;
  kiri::fuzz::refuse_by_name([&] {
    const nlohmann::json ds = kiri::parse_config_json(kiri::fuzz::as_text(data, size),
                                                      "fuzz/ds.json", "DeepSpeed config");
    const kiri::RunConfig defaults;
    std::vector<std::pair<std::string, nlohmann::json>> given;
    if (world % 2 == 0) given = {{"train.micro_batch", 4}, {"train.lr", 1e-3}};
    const kiri::DeepSpeedConfig out =
        kiri::apply_deepspeed(ds, "fuzz/ds.json", defaults, given, world);
    for (const std::string& note : out.notes)
      if (note.empty()) __builtin_trap();  // a note names its key and why
    // What the mapping set must read back through the schema, as a resume applies it.
    const nlohmann::json resolved = kiri::config_to_json(out.config);
    if (kiri::config_to_json(kiri::config_from_json(resolved)) != resolved) __builtin_trap();
    kiri::validate(out.config);
  });
  return 0;
}
