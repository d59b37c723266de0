#include "train/loop.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "util/error.h"
#include "util/progress.h"

namespace kvsieve::train {

namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

std::string fmt(const char* f, double v) {
    char b[64];
    std::snprintf(b, sizeof b, f, v);
    return b;
}
}  // namespace

TrainLoop::TrainLoop(torch::nn::Module& module, std::vector<ParamGroup> groups, LoopOptions o)
    : module_(module), groups_(std::move(groups)), o_(std::move(o)) {
    require(o_.steps > 0, "steps must be > 0");
    require(o_.grad_accum > 0, "grad_accum must be > 0");
    require(!o_.out_dir.empty(), "no output directory");
    std::filesystem::create_directories(o_.out_dir);
    opt_ = make_adamw(groups_, o_.beta1, o_.beta2);
    const bool have = std::filesystem::exists(checkpoint_path());
    if (o_.resume) {
        require(have, "cannot resume: ", checkpoint_path(), " does not exist");
        load_checkpoint();
    } else {
        require(!have, o_.out_dir,
                " already holds a checkpoint; pass --resume to continue it or choose another output");
        std::ofstream(o_.out_dir + "/log.jsonl", std::ios::trunc);
    }
}

void TrainLoop::log(const nlohmann::json& j) const {
    std::ofstream f(o_.out_dir + "/log.jsonl", std::ios::app);
    f << j.dump() << "\n";
}

void TrainLoop::save_checkpoint(int64_t step) const {
    torch::serialize::OutputArchive a;
    torch::serialize::OutputArchive m, op;
    module_.save(m);
    opt_->save(op);
    a.write("model", m);
    a.write("optimizer", op);
    a.write("step", torch::tensor(step, torch::kInt64));
    a.write("tokens_seen", torch::tensor(tokens_seen_, torch::kInt64));
    a.write("elapsed_s", torch::tensor(elapsed_now_, torch::kFloat64));
    const std::string tmp = checkpoint_path() + ".tmp";
    a.save_to(tmp);
    std::filesystem::rename(tmp, checkpoint_path());
}

void TrainLoop::load_checkpoint() {
    torch::serialize::InputArchive a, m, op;
    a.load_from(checkpoint_path());
    a.read("model", m);
    a.read("optimizer", op);
    module_.load(m);
    opt_->load(op);
    torch::Tensor s, t;
    a.read("step", s);
    a.read("tokens_seen", t);
    start_step_ = s.item<int64_t>();
    tokens_seen_ = t.item<int64_t>();
    torch::Tensor e;
    if (a.try_read("elapsed_s", e)) elapsed_before_ = e.item<double>();
    if (o_.keep_log) return;
    // Drop log lines past the checkpoint, so the resumed curve continues the saved one without duplicates.
    std::ifstream in(o_.out_dir + "/log.jsonl");
    std::vector<std::string> keep;
    for (std::string line; std::getline(in, line);) {
        try {
            if (nlohmann::json::parse(line).value("step", int64_t(0)) <= start_step_) keep.push_back(line);
        } catch (const std::exception&) {}
    }
    in.close();
    std::ofstream out(o_.out_dir + "/log.jsonl", std::ios::trunc);
    for (const auto& l : keep) out << l << "\n";
}

bool TrainLoop::run_and_export(const MicroStep& micro, const EvalFn& eval, const ExportFn& save_to,
                               const std::string& checkpoint_copy, const std::string& output) {
    const int64_t reached = run(micro, eval, [&](int64_t) { save_to(checkpoint_copy, false); });
    if (reached < o_.steps) return false;
    save_to(output, true);
    if (o_.progress) std::fprintf(stderr, "wrote %s\n", output.c_str());
    return true;
}

namespace {
/// What the loop sums between two log lines: loss, gradient norm, data time, tokens and each micro-step metric.
struct LogInterval {
    double loss = 0, gnorm = 0, data_s = 0;
    std::map<std::string, std::pair<double, int64_t>> metrics;  // name → (sum, count)
    int64_t steps = 0, tokens = 0;
    std::chrono::steady_clock::time_point since;

    void add_micro(const MicroResult& r) {
        tokens += r.tokens;
        data_s += r.data_seconds;
        for (const auto& [k, v] : r.metrics) {
            metrics[k].first += v;
            ++metrics[k].second;
        }
    }
    /// The log line of the interval ending at `now` (means over its steps), and a new interval from there.
    nlohmann::json take_line(int64_t step, double lr_factor, int64_t tokens_seen, double elapsed,
                             std::chrono::steady_clock::time_point now) {
        const double dt = std::chrono::duration<double>(now - since).count();
        nlohmann::json line = {{"step", step},
                               {"loss", loss / steps},
                               {"lr_factor", lr_factor},
                               {"grad_norm", gnorm / steps},
                               {"tokens_per_s", tokens / std::max(dt, 1e-9)},
                               {"data_s", data_s},
                               {"tokens_seen", tokens_seen},
                               {"elapsed_s", elapsed}};
        for (const auto& [k, sc] : metrics) line[k] = sc.first / static_cast<double>(sc.second);
        *this = LogInterval{};
        since = now;
        return line;
    }
};
}  // namespace

int64_t TrainLoop::run(const MicroStep& micro, const EvalFn& eval, const SaveFn& save) {
    g_stop = false;
    auto prev_int = std::signal(SIGINT, on_signal);
    auto prev_term = std::signal(SIGTERM, on_signal);
    const auto t0 = std::chrono::steady_clock::now();
    Progress bar("train", o_.steps - start_step_, o_.progress);
    LogInterval interval;
    interval.since = t0;
    int64_t run_tokens = 0;
    int64_t step = start_step_;
    auto checkpoint = [&](int64_t s) {
        save_checkpoint(s);
        if (save) save(s);
    };
    while (step < o_.steps && !g_stop) {
        module_.train();
        opt_->zero_grad();
        const double f = o_.schedule.factor(step);
        set_learning_rates(*opt_, groups_, f, step);
        double step_loss = 0;
        for (int64_t m = 0; m < o_.grad_accum; ++m) {
            MicroResult r = micro(step, m);
            if (!r.backward_done) (r.loss / static_cast<double>(o_.grad_accum)).backward();
            step_loss += r.loss.item<double>() / static_cast<double>(o_.grad_accum);
            interval.add_micro(r);
            run_tokens += r.tokens;
            tokens_seen_ += r.tokens;
        }
        require(std::isfinite(step_loss), "loss became ", step_loss, " at step ", step, "; lower the learning rate");
        const double gn = clip_gradients(groups_, o_.clip);
        opt_->step();
        ++step;
        interval.loss += step_loss;
        interval.gnorm += gn;
        ++interval.steps;
        const auto now = std::chrono::steady_clock::now();
        const double el = std::chrono::duration<double>(now - t0).count();
        elapsed_now_ = elapsed_before_ + el;
        bar.update(step - start_step_,
                   "loss " + fmt("%.4f", step_loss) + "  " + fmt("%.0f", run_tokens / std::max(el, 1e-9)) + " tok/s");
        if (step % o_.log_every == 0 || step == o_.steps)
            log(interval.take_line(step, f, tokens_seen_, elapsed_now_, now));
        if (eval && ((o_.eval_every > 0 && step % o_.eval_every == 0) || step == o_.steps)) {
            torch::NoGradGuard ng;
            module_.eval();
            nlohmann::json e = eval(step);
            log({{"step", step}, {"eval", e}});
            if (o_.progress)
                std::fprintf(stderr, "\n[step %lld] eval %s\n", static_cast<long long>(step), e.dump().c_str());
        }
        if (step % o_.checkpoint_every == 0 || step == o_.steps) checkpoint(step);
    }
    if (g_stop && step < o_.steps) {
        checkpoint(step);
        if (o_.progress)
            std::fprintf(stderr, "\ninterrupted at step %lld; checkpoint saved to %s (continue with --resume)\n",
                         static_cast<long long>(step), checkpoint_path().c_str());
    }
    bar.finish();
    std::signal(SIGINT, prev_int);
    std::signal(SIGTERM, prev_term);
    return step;
}

}  // namespace kvsieve::train
