#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "util/error.h"

namespace kvsieve {

void SamplerParams::validate() const {
    require(std::isfinite(temp) && temp >= 0, "--temp must be ≥ 0, got ", temp);
    require(top_p > 0 && top_p <= 1, "--top-p must be in (0, 1], got ", top_p);
    require(min_p >= 0 && min_p <= 1, "--min-p must be in [0, 1], got ", min_p);
    for (const auto& [id, bias] : logit_bias) {
        require(id >= 0, "logit_bias: token id ", id, " is negative");
        require(std::isfinite(bias), "logit_bias: the bias of token ", id, " is not finite");
    }
    require(std::isfinite(presence_penalty), "presence_penalty is not finite");
    require(std::isfinite(frequency_penalty), "frequency_penalty is not finite");
}

int32_t argmax(const float* logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; ++i)
        if (logits[i] > logits[best]) best = i;
    return best;
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) { p_.validate(); }

std::string Sampler::state() const {
    std::ostringstream o;
    o << rng_;
    return o.str();
}

void Sampler::set_state(const std::string& s) {
    std::istringstream in(s);
    std::mt19937_64 r;
    in >> r;
    require(static_cast<bool>(in), "the saved sampler state is not a generator state");
    rng_ = r;
}

int32_t Sampler::sample(const float* logits, int n_vocab) {
    const bool penalised = p_.presence_penalty != 0 || p_.frequency_penalty != 0;
    if (!p_.logit_bias.empty() || penalised) {
        biased_.assign(logits, logits + n_vocab);
        for (const auto& [id, bias] : p_.logit_bias) {
            require(id < n_vocab, "logit_bias: token id ", id, " is outside the vocabulary of ", n_vocab);
            biased_[id] += bias;
        }
        if (penalised) {
            counts_.resize(static_cast<size_t>(n_vocab), 0);
            for (int i = 0; i < n_vocab; ++i)
                if (counts_[i] > 0) biased_[i] -= counts_[i] * p_.frequency_penalty + p_.presence_penalty;
        }
        logits = biased_.data();
    }
    const int32_t id = draw(logits, n_vocab);
    if (penalised) ++counts_[id];
    return id;
}

int32_t Sampler::draw(const float* logits, int n_vocab) {
    if (p_.temp <= 0) return argmax(logits, n_vocab);
    if ((p_.top_k <= 0 || p_.top_k >= n_vocab) && p_.top_p >= 1 && p_.min_p <= 0) {
        // Nothing is cut (OpenAI's defaults): draw from softmax(logits / temp) over the vocabulary in id order,
        // without sorting it.
        const float m = logits[argmax(logits, n_vocab)];
        wts_.resize(n_vocab);
        double total = 0;
        for (int i = 0; i < n_vocab; ++i) total += (wts_[i] = std::exp((double(logits[i]) - m) / p_.temp));
        const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_) * total;
        double cum = 0;
        for (int i = 0; i < n_vocab; ++i)
            if ((cum += wts_[i]) > u && wts_[i] > 0) return i;
        return argmax(logits, n_vocab);  // u rounded up to the total
    }
    cand_.resize(n_vocab);
    for (int i = 0; i < n_vocab; ++i) cand_[i] = {logits[i], i};
    auto by_logit = [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    size_t n = cand_.size();
    if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
        std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
        n = p_.top_k;
    } else {
        std::sort(cand_.begin(), cand_.end(), by_logit);
    }
    // Softmax at temperature 1 for top-p / min-p (as llama.cpp's chain does before temperature).
    std::vector<double> prob(n);
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += (prob[i] = std::exp(double(cand_[i].first) - cand_[0].first));
    for (auto& q : prob) q /= sum;
    if (p_.top_p < 1) {
        double cum = 0;
        size_t keep = n;
        for (size_t i = 0; i < n; ++i) {
            cum += prob[i];
            if (cum >= p_.top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (p_.min_p > 0) {
        size_t keep = 1;
        while (keep < n && prob[keep] >= p_.min_p * prob[0]) ++keep;
        n = keep;
    }
    std::vector<double> w(n);
    for (size_t i = 0; i < n; ++i) w[i] = std::exp((double(cand_[i].first) - cand_[0].first) / p_.temp);
    std::discrete_distribution<size_t> dist(w.begin(), w.end());
    return cand_[dist(rng_)].second;
}

}  // namespace kvsieve
