// libFuzzer target: the JSON config reader, kiri::parse_config_text (what load_config
// does with a config file's text: every key applied through the schema), then
// config_to_json, whose output (what `kiri config` prints and checkpoints store) must read
// back to the same configuration, and validate(), the checks a run makes next.
#include <cstdint>

#include "fuzz_util.h"
#include "kiri/config/config_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiri::fuzz::refuse_by_name([&] {
    const kiri::RunConfig cfg =
        kiri::parse_config_text(kiri::fuzz::as_text(data, size), "fuzz.json");
    const nlohmann::json resolved = kiri::config_to_json(cfg);
    if (kiri::config_to_json(kiri::config_from_json(resolved)) != resolved)
      __builtin_trap();   // what `kiri config` prints must load back unchanged
    kiri::validate(cfg);  // the layout rules a run checks next
  });
  return 0;
}
