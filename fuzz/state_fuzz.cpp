// libFuzzer target: a checkpoint's state.json, kiri::ckpt::parse_checkpoint_state, then
// what a resume does with what it accepted: the loss scaler's state set on a scaler, and
// the stored config read back through the schema (config_from_json) and validated.
#include <cstdint>

#include "fuzz_util.h"
#include "kiri/ckpt/checkpoint_state.h"
#include "kiri/config/config_schema.h"
#include "kiri/optim/loss_scaler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiri::fuzz::refuse_by_name([&] {
    const kiri::ckpt::CheckpointState state = kiri::ckpt::parse_checkpoint_state(
        kiri::fuzz::as_text(data, size), "fuzz/step_00000001/state.json");
    if (state.step < 0 || state.optimizer_step < 0) __builtin_trap();  // must have been refused
    if (state.loss_scaler) {
      kiri::optim::DynamicLossScaler scaler;
      const kiri::ckpt::LossScalerState& ls = *state.loss_scaler;
      scaler.set_state({ls.scale, ls.clean_steps, ls.skipped_steps});
    }
    if (state.config.is_object()) kiri::validate(kiri::config_from_json(state.config));
  });
  return 0;
}
