// Threads as ranks: Rabenseifner's recursive halving and doubling (algo/halving_doubling.h) over
// the rendezvous fake transport, on 1 to 17 ranks (powers of two and the fold of the others).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "algo/halving_doubling.h"
#include "fake/fake_transport.h"
#include "fake/thread_ranks.h"

namespace gfshim {
namespace {

float contribution(int rank, size_t i) {
  return static_cast<float>((rank + 3) * 7 + static_cast<int>(i % 1009));
}

// Runs the allreduce of `count` floats on `p` ranks; returns each rank's status and result.
std::vector<Status> runHalvingDoubling(FakeFabric& fabric, size_t count, bool inPlace,
                                       std::vector<std::vector<float>>& recv) {
  const int p = fabric.ranks();
  std::vector<std::vector<float>> send(static_cast<size_t>(p));
  recv.assign(static_cast<size_t>(p), {});
  for (int r = 0; r < p; ++r) {
    auto& s = send[static_cast<size_t>(r)];
    s.resize(count);
    for (size_t i = 0; i < count; ++i) s[i] = contribution(r, i);
    recv[static_cast<size_t>(r)] = inPlace ? s : std::vector<float>(count, -777.0f);
  }
  return runRanks(fabric, [&](int r, Transport& transport) {
    Workspace workspace;
    float* out = recv[static_cast<size_t>(r)].data();
    const float* in = inPlace ? out : send[static_cast<size_t>(r)].data();
    return runHalvingDoublingAllreduce(count, sizeof(float),
                                       cpuReduceFn(DType::kFloat32, RedOp::kSum), transport,
                                       workspace, in, out);
  });
}

TEST(HalvingDoublingFake, ExactSumsOnOneToSeventeenRanks) {
  for (int p = 1; p <= 17; ++p) {
    const size_t ranks = static_cast<size_t>(p);
    for (size_t count :
         {size_t{0}, size_t{1}, ranks - 1, ranks, ranks + 1, size_t{997}, size_t{30011}}) {
      for (bool inPlace : {false, true}) {
        SCOPED_TRACE(testing::Message()
                     << p << " ranks, count " << count << ", in place " << inPlace);
        FakeFabric fabric(p);
        std::vector<std::vector<float>> recv;
        const std::vector<Status> statuses = runHalvingDoubling(fabric, count, inPlace, recv);
        ASSERT_NO_FATAL_FAILURE(expectExactSumOnEveryRank(statuses, recv, count, contribution));
      }
    }
  }
}

// The bytes that make it bandwidth-optimal: on a power of two each rank sends 2(p-1)/p of the
// buffer (halves, quarters ... in each direction), never a whole buffer; the fold adds one whole
// buffer for each rank of a pair (the even one's to the odd one, the result back).
TEST(HalvingDoublingFake, SendsTheRingsBytesAndTheFoldsOnly) {
  const size_t count = 16 * 1024;  // divides evenly on up to 16 participants
  const uint64_t buffer = count * sizeof(float);
  for (int p : {2, 4, 8, 16, 3, 6, 12}) {
    SCOPED_TRACE(testing::Message() << p << " ranks");
    int participants = 1;
    while (participants <= p / 2) participants *= 2;
    const int folded = p - participants;
    FakeFabric fabric(p);
    std::vector<std::vector<float>> recv;
    const std::vector<Status> statuses = runHalvingDoubling(fabric, count, true, recv);
    ASSERT_NO_FATAL_FAILURE(expectExactSumOnEveryRank(statuses, recv, count, contribution));
    const uint64_t halvingAndDoubling =
        2 * buffer * static_cast<uint64_t>(participants - 1) / static_cast<uint64_t>(participants);
    for (int r = 0; r < p; ++r) {
      uint64_t expected = halvingAndDoubling;
      if (r < 2 * folded) expected = r % 2 == 0 ? buffer : halvingAndDoubling + buffer;
      EXPECT_EQ(fabric.bytesSent(r), expected) << "rank " << r;
    }
  }
}

// Inexact floats: any rank reducing in another order than the others would show in the last bits.
TEST(HalvingDoublingFake, InexactFloatsGiveIdenticalBitsOnEveryRank) {
  for (int p : {3, 5, 6, 8, 12}) {
    SCOPED_TRACE(testing::Message() << p << " ranks");
    const size_t count = 4099;
    FakeFabric fabric(p);
    std::vector<std::vector<float>> data = inexactFloatsPerRank(p, count);
    const std::vector<Status> statuses = runRanks(fabric, [&](int r, Transport& transport) {
      Workspace workspace;
      float* buffer = data[static_cast<size_t>(r)].data();
      return runHalvingDoublingAllreduce(count, sizeof(float),
                                         cpuReduceFn(DType::kFloat32, RedOp::kSum), transport,
                                         workspace, buffer, buffer);
    });
    ASSERT_NO_FATAL_FAILURE(expectIdenticalBitsOnEveryRank(statuses, data));
  }
}

TEST(HalvingDoublingFake, NoReductionKernelIsAnErrorOnEveryRank) {
  FakeFabric fabric(4);
  std::vector<float> buffer(64, 1.0f);
  const std::vector<Status> statuses = runRanks(fabric, [&](int, Transport& transport) {
    Workspace workspace;
    std::vector<float> own = buffer;
    return runHalvingDoublingAllreduce(own.size(), sizeof(float), nullptr, transport, workspace,
                                       own.data(), own.data());
  });
  for (const Status& s : statuses) EXPECT_EQ(s.code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace gfshim
