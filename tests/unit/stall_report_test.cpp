#include "transport/stall_report.h"

#include <gtest/gtest.h>

namespace gfshim {
namespace {

StallReport waitingRank0(int size) {
  StallReport report;
  report.rank = 0;
  report.size = size;
  report.operation = 17;
  report.label = {"ring allreduce", 1048576, DType::kFloat32, RedOp::kSum};
  report.waitedSeconds = 61.04;
  report.peer = 3;
  return report;
}

TEST(StallReport, NamesTheOperationThePeerAndTheRanksThatHaveNotJoined) {
  StallReport report = waitingRank0(4);
  report.answers.resize(4);
  report.answers[1] = {true, 17, 60.2};   // in this operation, waiting too
  report.answers[2] = {true, 16, -1};     // still computing before it
  report.answers[3] = {false, 0, -1};     // no answer
  EXPECT_EQ(formatStallReport(report),
            "stall: waited 61.0 s in engine operation #17 on a communicator of 4 ranks (ring "
            "allreduce of 1048576 x float sum), for rank 3; not joined: rank 2 (at operation #16, "
            "not in the engine), rank 3 (no answer); joined: rank 1 (60.2 s)");
}

TEST(StallReport, ARankWaitingInAnEarlierOperationHasNotJoined) {
  StallReport report = waitingRank0(2);
  report.answers.resize(2);
  report.answers[1] = {true, 12, 30.0};
  EXPECT_NE(formatStallReport(report).find("not joined: rank 1 (at operation #12, waiting in it)"),
            std::string::npos);
}

TEST(StallReport, EveryoneJoinedAndACollectiveWait) {
  StallReport report = waitingRank0(3);
  report.peer = -1;
  report.label = {"fusion negotiation round", 0, DType::kInt64, RedOp::kMin};
  report.answers.resize(3);
  report.answers[1] = {true, 18, -1};  // already past it
  report.answers[2] = {true, 17, 2.5};
  EXPECT_EQ(formatStallReport(report),
            "stall: waited 61.0 s in engine operation #17 on a communicator of 3 ranks (fusion "
            "negotiation round); not joined: none; joined: rank 1, rank 2 (2.5 s)");
}

TEST(StallReport, WithoutAnswersSaysWhyTheLateRanksAreUnknown) {
  EXPECT_NE(formatStallReport(waitingRank0(4)).find("only under MPI_THREAD_MULTIPLE"),
            std::string::npos);
}

}  // namespace
}  // namespace gfshim
