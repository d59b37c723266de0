#include <gtest/gtest.h>

#include "kernels/parallel.h"

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    kvsieve::set_num_threads(2);
    return RUN_ALL_TESTS();
}
