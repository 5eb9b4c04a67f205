#include "kiri/model/parallelize.h"

namespace kiri::model {

ParallelGPT::ParallelGPT(GPT<float>& model, nn::ParameterStore& store, parallel::Mesh& mesh,
                         const ParallelOptions& options, Allocator& allocator)
    : model_(model), mesh_(mesh) {
  // 1. Data parallelism (replicas over dp): bucketed all-reduce started from
  //    backward's grad-ready hook; the token embedding's gradient travels as
  //    rows (tokens, dx) so that the V x C matrix is reduced early, with the
  //    LM head's part, instead of at the very end of backward.
  if (mesh.shape().dp > 1) {
    ddp_ = std::make_unique<parallel::DistributedDataParallel>(store, mesh.dp(), options.ddp,
                                                               allocator);
    model_.set_defer_token_embedding_grad(true);
    model_.set_grad_ready_hook(
        [this](const std::vector<nn::Parameter*>& ready) { ddp_->on_grads_ready(ready); });
  }
}

std::function<void()> ParallelGPT::poller() {
  if (!ddp_) return {};
  return [this] { mesh_.dp().progress(); };
}

void ParallelGPT::synchronize_parameters() {
  if (ddp_) ddp_->broadcast_parameters();
}

void ParallelGPT::begin_micro_batch(bool last) {
  last_ = last;
  if (ddp_) ddp_->set_sync(last);
}

void ParallelGPT::end_micro_batch() {
  if (!ddp_) return;
  if (!last_) {
    // Accumulating: this micro-batch's token-embedding rows stay local.
    model_.add_token_embedding_grad(model_.deferred_tokens(), model_.deferred_dx());
  } else {
    ddp_->finalize_grads({{&model_.wte(), model_.deferred_tokens(), model_.deferred_dx()}});
  }
  model_.clear_deferred();
}

}  // namespace kiri::model
