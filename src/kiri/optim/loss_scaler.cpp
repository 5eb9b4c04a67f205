#include "kiri/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "kiri/base/error.h"

namespace kiri::optim {

DynamicLossScaler::DynamicLossScaler(const LossScalerOptions& options)
    : options_(options), scale_(options.initial_scale) {
  const LossScalerOptions& o = options_;
  KIRI_CHECK_KIND(kConfig, std::isfinite(o.initial_scale) && o.initial_scale > 0,
                  "loss scaler initial_scale must be positive and finite, got ", o.initial_scale);
  KIRI_CHECK_KIND(kConfig, std::isfinite(o.growth_factor) && o.growth_factor > 1,
                  "loss scaler growth_factor must be > 1, got ", o.growth_factor);
  KIRI_CHECK_KIND(kConfig, o.backoff_factor > 0 && o.backoff_factor < 1,
                  "loss scaler backoff_factor must be in (0, 1), got ", o.backoff_factor);
  KIRI_CHECK_KIND(kConfig, o.growth_interval >= 1, "loss scaler growth_interval must be >= 1, got ",
                  o.growth_interval);
  KIRI_CHECK_KIND(kConfig, std::isfinite(o.min_scale) && o.min_scale > 0,
                  "loss scaler min_scale must be positive and finite, got ", o.min_scale);
  KIRI_CHECK_KIND(kConfig, !o.dynamic || o.min_scale <= o.initial_scale, "loss scaler min_scale ",
                  o.min_scale, " is above initial_scale ", o.initial_scale);
}

bool DynamicLossScaler::update(bool grads_finite) {
  if (!grads_finite) {
    ++skipped_;
    clean_ = 0;
    if (options_.dynamic) scale_ = std::max(scale_ * options_.backoff_factor, options_.min_scale);
    return true;
  }
  ++clean_;
  if (options_.dynamic && clean_ >= options_.growth_interval) {
    const double grown = scale_ * options_.growth_factor;
    if (std::isfinite(grown)) scale_ = grown;
    clean_ = 0;
  }
  return false;
}

void DynamicLossScaler::set_state(const State& s) {
  KIRI_CHECK_KIND(kCheckpoint, std::isfinite(s.scale) && s.scale > 0,
                  "loss scaler state: scale must be positive and finite, got ", s.scale);
  KIRI_CHECK_KIND(kCheckpoint, s.clean_steps >= 0 && s.skipped_steps >= 0,
                  "loss scaler state: negative step counts (clean ", s.clean_steps, ", skipped ",
                  s.skipped_steps, ")");
  scale_ = s.scale;
  clean_ = s.clean_steps;
  skipped_ = s.skipped_steps;
}

}  // namespace kiri::optim
