#include <gtest/gtest.h>

#include <set>

#include "algo/torus_grid.h"
#include "config/config.h"
#include "engine/policy.h"

namespace gfshim {
namespace {

TEST(TorusGrid, ForcedDimsCoverEveryRankOnceInRowsAndColumns) {
  for (int x = 1; x <= 5; ++x) {
    for (int y = 1; y <= 5; ++y) {
      const int size = x * y;
      std::set<std::pair<int, int>> positions;
      for (int r = 0; r < size; ++r) {
        const auto grid = torusGridFromDims(r, size, {x, y});
        ASSERT_TRUE(grid);
        ASSERT_EQ(grid->row.size(), static_cast<size_t>(x));
        ASSERT_EQ(grid->column.size(), static_cast<size_t>(y));
        EXPECT_EQ(grid->row[static_cast<size_t>(grid->rowIndex)], r);
        EXPECT_EQ(grid->column[static_cast<size_t>(grid->columnIndex)], r);
        positions.insert({grid->rowIndex, grid->columnIndex});
        // Column peers share the row position; row peers share the column position.
        for (int peer : grid->column) EXPECT_EQ(peer % x, grid->rowIndex);
        for (int peer : grid->row) EXPECT_EQ(peer / x, grid->columnIndex);
      }
      EXPECT_EQ(positions.size(), static_cast<size_t>(size));
    }
  }
  EXPECT_FALSE(torusGridFromDims(0, 6, {2, 2}));
  EXPECT_FALSE(torusGridFromDims(0, 4, {0, 4}));
}

TEST(TorusGrid, FromNodesOrdersNodesByLowestRank) {
  // Ranks 0,3 on node 7; ranks 1,2 on node 5 (round-robin placement).
  const std::vector<int> nodeOfRank = {7, 5, 5, 7};
  std::string why;
  const auto grid = torusGridFromNodes(2, nodeOfRank, &why);
  ASSERT_TRUE(grid) << why;
  EXPECT_EQ(grid->dims.x, 2);
  EXPECT_EQ(grid->dims.y, 2);
  EXPECT_EQ(grid->row, (std::vector<int>{1, 2}));
  EXPECT_EQ(grid->rowIndex, 1);
  EXPECT_EQ(grid->column, (std::vector<int>{3, 2}));  // node 7 first (it holds rank 0)
  EXPECT_EQ(grid->columnIndex, 1);
}

TEST(TorusGrid, FromNodesRejectsUnevenNodes) {
  std::string why;
  EXPECT_FALSE(torusGridFromNodes(0, {0, 0, 0, 1}, &why));
  EXPECT_NE(why.find("different numbers of ranks (3 and 1)"), std::string::npos) << why;
}

TEST(TorusDimsParameter, ParsesAndRejects) {
  const ParamSpec& spec = paramSpec(Param::TORUS_DIMS);
  ParamValue value;
  std::string why;
  ASSERT_TRUE(parseParamValue(spec, "2x4", &value, &why));
  EXPECT_EQ(value.number, (uint64_t{2} << 32) | 4);
  EXPECT_EQ(value.text, "2x4");
  ASSERT_TRUE(parseParamValue(spec, " 3X2 ", &value, &why));
  EXPECT_EQ(value.text, "3x2");
  for (const char* bad : {"2", "x4", "2x", "0x4", "-2x2", "2x2x2", "axb", "2.5x2"}) {
    EXPECT_FALSE(parseParamValue(spec, bad, &value, &why)) << bad;
    EXPECT_NE(why.find("XxY"), std::string::npos) << why;
  }
  ConfigInputs inputs;
  inputs.environment = {{"GFSHIM_TORUS_DIMS", "2x3"}};
  const Settings settings = settingsFrom(Config::load(inputs));
  EXPECT_EQ(settings.torusX, 2);
  EXPECT_EQ(settings.torusY, 3);
  EXPECT_EQ(settingsFrom(Config::defaults()).torusX, 0);
}

Plan torusPlan() {
  Plan plan;
  plan.route = Route::kEngine;
  plan.algo = Algo::kTorus2d;
  plan.reason = Reason::kTorusOnNodes;
  return plan;
}

CommFacts layout(int size, int nodes, int ranksPerNode) {
  CommFacts facts;
  facts.size = size;
  facts.nodes = nodes;
  facts.ranksPerNode = ranksPerNode;
  return facts;
}

TEST(TorusPolicy, ChoosesTheTorusOnlyWhereAProperGridExists) {
  Settings settings;
  settings.algo = AlgoChoice::kTorus2d;
  EXPECT_EQ(chooseAlgorithm(torusPlan(), layout(8, 4, 2), settings, DType::kFloat32, RedOp::kSum,
                            64 << 20)
                .reason,
            Reason::kTorusOnNodes);
  EXPECT_EQ(chooseAlgorithm(torusPlan(), layout(8, 4, 2), settings, DType::kFloat32, RedOp::kSum,
                            64 << 20)
                .algo,
            Algo::kTorus2d);
  EXPECT_EQ(chooseAlgorithm(torusPlan(), layout(7, 2, 0), settings, DType::kFloat32, RedOp::kSum,
                            64 << 20)
                .reason,
            Reason::kRingTorusHeterogeneous);
  EXPECT_EQ(chooseAlgorithm(torusPlan(), layout(4, 1, 4), settings, DType::kFloat32, RedOp::kSum,
                            64 << 20)
                .reason,
            Reason::kRingTorusDegenerate);
  EXPECT_EQ(chooseAlgorithm(torusPlan(), layout(4, 4, 1), settings, DType::kFloat32, RedOp::kSum,
                            64 << 20)
                .algo,
            Algo::kRing);
  settings.torusX = 2;
  settings.torusY = 2;
  EXPECT_EQ(chooseAlgorithm(torusPlan(), layout(4, 1, 4), settings, DType::kFloat32, RedOp::kSum,
                            64 << 20)
                .reason,
            Reason::kTorusOnForcedDims);
  EXPECT_EQ(chooseAlgorithm(torusPlan(), layout(6, 1, 6), settings, DType::kFloat32, RedOp::kSum,
                            64 << 20)
                .reason,
            Reason::kRingTorusDimsMismatch);
  // A ring plan is left alone.
  Plan ring = torusPlan();
  ring.algo = Algo::kRing;
  ring.reason = Reason::kAutoRing;
  EXPECT_EQ(chooseAlgorithm(ring, layout(4, 2, 2), settings, DType::kFloat32, RedOp::kSum, 64 << 20)
                .reason,
            Reason::kAutoRing);
}

TEST(TorusPolicy, Torus2dSettingGivesAProvisionalTorusPlan) {
  Settings settings;
  settings.algo = AlgoChoice::kTorus2d;
  CallInfo call;
  call.count = 1 << 20;
  call.dtype = DType::kFloat32;
  call.op = RedOp::kSum;
  call.sendAddress = 0x1000;
  call.recvAddress = 0x10000000;
  EXPECT_EQ(planCall(call, settings).algo, Algo::kTorus2d);
}

}  // namespace
}  // namespace gfshim
