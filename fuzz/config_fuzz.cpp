// libFuzzer target: the JSON config reader (kiri::cli::load_config over a file holding the
// input, every key applied through the schema), then config_to_json, whose output (what
// `kiri config` prints and checkpoints store) must read back to the same configuration, and
// validate(), the checks a run makes next.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "fuzz_util.h"
#include "kiri/cli/config_schema.h"

namespace {

// One file per fuzzing process, in memory (/dev/shm) so the disk sees no traffic.
const std::string& scratch_path() {
  static const std::string path =
      "/dev/shm/kiri_fuzz_config_" + std::to_string(::getpid()) + ".json";
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream out(scratch_path(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) __builtin_trap();  // the harness itself failed, not kiri
  }
  kiri::fuzz::refuse_by_name([&] {
    const kiri::train::RunConfig cfg = kiri::cli::load_config(scratch_path(), {});
    const nlohmann::json resolved = kiri::cli::config_to_json(cfg);
    if (kiri::cli::config_to_json(kiri::cli::config_from_json(resolved)) != resolved)
      __builtin_trap();        // what `kiri config` prints must load back unchanged
    kiri::cli::validate(cfg);  // the layout rules a run checks next
  });
  return 0;
}
