#pragma once
// `kvsieve train kvpop`: KVpop's scorer trained on the frozen model's future attention (Hauzenberger et al., KVpop
// §3, App. B–D; docs/design.md §5.5), the scorer-only mode (the language model stays frozen). Per batch, a no-grad
// pass of the model gives every layer's queries, keys, values and per-query log-sum-exp; per layer and KV head:
//   target   y_t = log(ε + m_t), m_t the mean attention key t receives from the queries beyond its window, max over
//            the GQA group (eqs. 2–3; train/kvpop_target.h, transposed pass);
//   teacher  the running top-k of the static priorities y_t − ⌊t/n⌋ log γ_T (eq. 5 with a fixed teacher decay γ_T)
//            and, at each step where the newcomer competes, its label and boundary entry (eq. 6; train/kvpop_pairs.h);
//   loss     ω · softplus(−ℓ · (ê_new − ê_bnd) / τ) (eq. 7), ℓ = ±1 the teacher's label, ê = r̂ + ⌊(q − t)/n⌋ log γ_h
//            the student's effective scores at the step q (learned decay), ω = min(margin, margin_cap) the teacher's
//            priority margin (App. B.4), with keep and drop decisions weighted to equal total weight (App. B.5),
//            over `queries` decisions sampled per row and head.
// The student is the mLSTM read delayed (or immediately) or the MLP (train/kvpop_predictor.h). Each layer's loss is
// back-propagated on its own (the scorers of different layers share nothing), so one layer's [T, T] readout is held
// at a time. Evaluation on held-out windows: pair accuracy (the student orders newcomer and boundary as the teacher),
// the loss, and the teacher top-k retention recall at the end of each window (Fig. 7) per layer and head, beside the
// recall of keeping the most recent k (StreamingLLM's choice).
//
// Modes (kvpop.mode):
//   scorer          the above; the language model stays frozen.
//   distill         full distillation: a copy of the model is fine-tuned to the frozen dense teacher under the
//                   attention mask of the scorer's own evictions (train/kvpop_mask.h: the running top-k of its static
//                   priorities, App. C), with loss KL(teacher ‖ student) over the teacher's top-K tokens + rest
//                   (train/distill.h) + boundary_weight · the pair loss; the scorer reads the student's keys and
//                   values (detached: the boundary loss trains the scorer alone). Two parameter groups, each with its
//                   schedule: the model at base_lr, constant; the scorer at optim.lr with the loop's warmup + cosine.
//   streaming_plus  StreamingLLM+: the same fine-tuning under StreamingLLM's fixed mask at the same budget (the s
//                   sinks and the w + k most recent), KL only — the baseline that isolates what the learned eviction
//                   adds over fine-tuning to a budget (same data and steps as `distill` given the same config).
// Target (kvpop.target): "dense" takes each query's log-sum-exp over every key it sees in the dense teacher (exact,
// eqs. 2–3); "sparse" takes it from the attention under the eviction mask (the frozen model's in scorer mode, the
// student's in distill mode): p_{d→t} = exp(s_dt − lse_d) then measures key t against the keys the compressed cache
// holds at step d (for a key the cache no longer holds it is not a softmax weight and can exceed 1, so m_t is not
// bounded by 1; the ranking the target serves is unaffected) — our reading of the sparse-LSE approximation (eqs.
// 8–9), whose exact form we could not consult; in this mode the scorer also reads the masked forward's keys and
// values (those the engine will see).
// This header does not include libtorch.
#include <cstdint>
#include <string>

namespace kvsieve::train {

/// The "kvpop" section of the config (docs/training.md).
struct KvpopOptions {
    std::string kind = "mlstm";     ///< "mlstm" (KVpop) or "mlp" (KVpop_mlp)
    int64_t window = 256;           ///< protected window w
    int64_t sinks = 4;              ///< sinks s
    int64_t budget = 256;           ///< k: long-range entries kept per head in the teacher's decisions
    bool delayed = true;            ///< mLSTM read at window exit (eqs. 41–42); false: at write (Fig. 5's ablation)
    int64_t decay_every = 1;        ///< n of ⌊(q − t)/n⌋
    double teacher_gamma = 0.9999;  ///< γ_T of the teacher's ranking (1: no decay)
    double eps = 1e-6;              ///< ε of log(ε + m)
    double margin_cap = 2.0;        ///< ω = min(|p_new − p_bnd|, margin_cap)
    double temperature = 1.0;       ///< τ of eq. 7
    int64_t queries = 512;          ///< decisions sampled per row and head per step (0: all)
    double softcap = 10;            ///< c of the mLSTM readout
    double forget_bias = 3;         ///< initial forget-gate bias
    int64_t hidden = 0, feature = 0, value = 0;  ///< widths (0: defaults of train/kvpop_predictor.h)
    int64_t target_block = 128;                  ///< key block of the transposed pass
    std::string mode = "scorer";                 ///< "scorer", "distill" or "streaming_plus" (above)
    std::string target = "dense";                ///< "dense" or "sparse" log-sum-exp of the target (above)
    int64_t kl_top = 256;                        ///< K of the teacher's top-K distribution (distill, streaming_plus)
    double boundary_weight = 1.0;                ///< weight of the pair loss beside the KL (distill)
    double base_lr = 8e-5;                       ///< the model's learning rate, constant (distill, streaming_plus)
};

/// Reads the config, validates every key and path before training, trains the scorer of the frozen model "init"
/// and writes it (predict/kvpop_scorer.h layout) with its config.json to <out>/scorer at each checkpoint and to
/// "output" (default <out>/scorer) at the end. distill and streaming_plus also write the fine-tuned model there as
/// model.gguf (F32; streaming_plus writes only it and config.json). resume: continue from <out>/checkpoint.pt. Returns false when SIGINT
/// or SIGTERM stopped the run (a checkpoint is saved). Throws Error naming the first problem.
bool run_kvpop(const std::string& config_path, bool resume, bool progress);

}  // namespace kvsieve::train
