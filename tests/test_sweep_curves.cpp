// sweep_curves: which cells of a sweep directory share a plot curve, and what the curves are called.
#include <gtest/gtest.h>

#include "eval/sweep_curves.h"

namespace kvsieve {
namespace {

using Cells = std::vector<std::string>;

TEST(SweepCurves, OneCurvePerPresetAndSettingsOverTheSweptValue) {
    // Ratios of knorm, of streaming_llm and of streaming_llm with 2 sinks, interleaved as a directory listing may
    // give them: three curves, in the order of their first cell; the two of one name are told apart by their specs
    // without the swept ratio.
    const auto c =
        sweep_curves({"full", "knorm:ratio=0.5", "streaming_llm:ratio=0.5", "streaming_llm:sinks=2,ratio=0.5",
                      "knorm:ratio=0.75", "streaming_llm:ratio=0.75", "streaming_llm:sinks=2,ratio=0.75"});
    ASSERT_EQ(c.size(), 3u);
    EXPECT_EQ(c[0].title, "knorm");
    EXPECT_EQ(c[0].cells, (Cells{"knorm:ratio=0.5", "knorm:ratio=0.75"}));
    EXPECT_EQ(c[1].title, "streaming_llm");
    EXPECT_EQ(c[1].cells, (Cells{"streaming_llm:ratio=0.5", "streaming_llm:ratio=0.75"}));
    EXPECT_EQ(c[2].title, "streaming_llm:sinks=2");
    EXPECT_EQ(c[2].cells, (Cells{"streaming_llm:sinks=2,ratio=0.5", "streaming_llm:sinks=2,ratio=0.75"}));
}

TEST(SweepCurves, CheckpointsAreSettingsAndTwoSweptKeysSplitTheCurve) {
    // Two KVzap checkpoints: the linear one at two τ is one curve, the MLP one at one τ a curve of its own cell.
    // Budgets that differ in window and sinks at once are not one sweep: each cell is its own curve.
    const auto c = sweep_curves({"kvzap:model=m/linear,tau=-3,sinks=4", "kvzap:model=m/linear,tau=-4,sinks=4",
                                 "kvzap:model=m/mlp,tau=-4,sinks=4", "wgkv:model=m/w",
                                 "streaming_llm:window=380,sinks=4", "streaming_llm:window=764,sinks=2"});
    ASSERT_EQ(c.size(), 5u);
    EXPECT_EQ(c[0].title, "kvzap:model=m/linear,sinks=4");
    EXPECT_EQ(c[0].cells.size(), 2u);
    EXPECT_EQ(c[1].title, "kvzap:model=m/mlp,tau=-4,sinks=4");
    EXPECT_EQ(c[2].title, "wgkv");
    EXPECT_EQ(c[3].title, "streaming_llm:window=380,sinks=4");
    EXPECT_EQ(c[4].title, "streaming_llm:window=764,sinks=2");
    EXPECT_EQ(c[4].cells, (Cells{"streaming_llm:window=764,sinks=2"}));
}

TEST(SweepCurves, CompositeSpecsFullWithSettingsAndQuotes) {
    // A preset with a read-time selection swept over its ratio is one curve named by its preset; the full cache with
    // a window is a curve titled by its spec (the reference point is not); quotes leave the titles.
    const auto c = sweep_curves({"full", "full:sinks=4,window=16", "knorm:ratio=0.5,window=8+quest:read_budget=16",
                                 "knorm:ratio=0.75,window=8+quest:read_budget=16"});
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].title, "full:sinks=4,window=16");
    EXPECT_EQ(c[1].title, "knorm");
    EXPECT_EQ(c[1].cells.size(), 2u);
    const auto quoted = sweep_curves({"h2o:note='a',budget=1", "h2o:budget=2,sinks=1"});
    ASSERT_EQ(quoted.size(), 2u);
    EXPECT_EQ(quoted[0].title, "h2o:note=a,budget=1");
    EXPECT_TRUE(sweep_curves({"full"}).empty());
    const auto two = sweep_curves({"knorm:ratio=0.5,window=8+quest:read_budget=16",
                                   "knorm:ratio=0.5,window=8+quest:read_budget=32", "knorm:ratio=0.5"});
    ASSERT_EQ(two.size(), 2u);
    EXPECT_EQ(two[0].title, "knorm:ratio=0.5,window=8+quest");  // swept over the selection's read budget
    EXPECT_EQ(two[1].title, "knorm:ratio=0.5");
}

}  // namespace
}  // namespace kvsieve
