#include <gtest/gtest.h>

#include "kernels/blas_core.h"
#include "kernels/parallel.h"

int main(int argc, char** argv) {
    kvsieve::ensure_blas_core(argv);  // the same OpenBLAS kernels as the kvsieve binary the tests run
    ::testing::InitGoogleTest(&argc, argv);
    kvsieve::set_num_threads(2);
    return RUN_ALL_TESTS();
}
