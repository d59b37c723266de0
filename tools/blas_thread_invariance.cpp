// Whether OpenBLAS's SGEMM and DGEMM give bit-identical results at 1, 2, 4 and 16 threads for the shapes kvsieve
// uses (the prefill's matrix products of SmolLM2-135M, kvsieve-tiny-2k and the tiny test models, and the attention
// statistics), for docs/benchmarks.md ("Results independent of the thread count"; not part of the kvsieve build):
//   g++ -O2 -fopenmp tools/blas_thread_invariance.cpp -I/usr/include/x86_64-linux-gnu/openblas-openmp -lopenblas
//   OPENBLAS_CORETYPE=Haswell ./a.out   # the kernels an AVX2-only CPU loads; unset: the library's own choice
// Prints each product whose outputs at n threads differ from those at 1 thread, then the count.
#include <cblas.h>
#include <omp.h>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename(void);
extern "C" char* openblas_get_config(void);
static void setth(int n) {
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}
int main() {
    std::printf("core %s config %s\n", openblas_get_corename(), openblas_get_config());
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    // (T, N, K): Y[T][N] = X[T][K] · W[N][K]^T  (matmul gemm_panels shapes)
    struct S {
        int T, N, K;
        const char* what;
    };
    std::vector<S> shapes;
    const int Ts[] = {8, 32, 33, 64, 100, 128, 512, 2048};
    const int NK[][2] = {{576, 576}, {192, 576}, {1536, 576}, {576, 1536}, {49152, 576},  // SmolLM2-135M
                         {256, 256}, {64, 256},  {768, 256},  {256, 768},  {2048, 256},   // kvsieve-tiny-2k
                         {64, 64},   {32, 64},   {128, 64},   {64, 128},   {512, 64}};    // tiny test models (approx.)
    for (int T : Ts)
        for (auto& nk : NK) shapes.push_back({T, nk[0], nk[1], "matmul"});
    int bad = 0, total = 0;
    const int threads[] = {1, 2, 4, 16};
    for (const S& s : shapes) {
        if ((long)s.T * s.N > 2048L * 49152 / 4 && s.T > 128) continue;  // keep the run short
        std::vector<float> X((size_t)s.T * s.K), W((size_t)s.N * s.K);
        for (auto& x : X) x = nd(rng);
        for (auto& w : W) w = nd(rng) * 0.05f;
        std::vector<float> ref;
        for (int th : threads) {
            setth(th);
            std::vector<float> Y((size_t)s.T * s.N, 0.0f);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.T, s.N, s.K, 1.0f, X.data(), s.K, W.data(), s.K,
                        0.0f, Y.data(), s.N);
            if (th == 1) {
                ref = Y;
                continue;
            }
            ++total;
            size_t diff = 0;
            for (size_t i = 0; i < Y.size(); ++i) diff += std::memcmp(&Y[i], &ref[i], 4) != 0;
            if (diff) {
                ++bad;
                std::printf("SGEMM T=%d N=%d K=%d threads=%d: %zu of %zu elements differ from 1 thread\n", s.T, s.N,
                            s.K, th, diff, Y.size());
            }
        }
    }
    // Attention-shaped SGEMMs (scores Q·K^T and S·V) and snapkv's DGEMM, from the serial context.
    struct A {
        int M, N, K;
    };
    const A att[] = {{128, 512, 64}, {128, 2048, 64}, {64, 4096, 32}, {32, 200, 64},
                     {128, 64, 512}, {128, 32, 2048}, {31, 1000, 64}, {63, 2048, 32}};
    for (const A& a : att) {
        std::vector<double> Q((size_t)a.M * a.K), K((size_t)a.N * a.K);
        for (auto& x : Q) x = nd(rng);
        for (auto& x : K) x = nd(rng);
        std::vector<double> ref;
        for (int th : threads) {
            setth(th);
            std::vector<double> Sd((size_t)a.M * a.N);
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, a.M, a.N, a.K, 0.125, Q.data(), a.K, K.data(), a.K,
                        0.0, Sd.data(), a.N);
            if (th == 1) {
                ref = Sd;
                continue;
            }
            ++total;
            size_t diff = 0;
            for (size_t i = 0; i < Sd.size(); ++i) diff += std::memcmp(&Sd[i], &ref[i], 8) != 0;
            if (diff) {
                ++bad;
                std::printf("DGEMM M=%d N=%d K=%d threads=%d: %zu differ\n", a.M, a.N, a.K, th, diff);
            }
        }
        std::vector<float> Qf(Q.begin(), Q.end()), Kf(K.begin(), K.end()), reff;
        for (int th : threads) {
            setth(th);
            std::vector<float> Sf((size_t)a.M * a.N);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, a.M, a.N, a.K, 0.125f, Qf.data(), a.K, Kf.data(), a.K,
                        0.0f, Sf.data(), a.N);
            if (th == 1) {
                reff = Sf;
                continue;
            }
            ++total;
            size_t diff = 0;
            for (size_t i = 0; i < Sf.size(); ++i) diff += std::memcmp(&Sf[i], &reff[i], 4) != 0;
            if (diff) {
                ++bad;
                std::printf("SGEMM(attn) M=%d N=%d K=%d threads=%d: %zu differ\n", a.M, a.N, a.K, th, diff);
            }
        }
    }
    std::printf("%d of %d comparisons differ from 1 thread\n", bad, total);
}
