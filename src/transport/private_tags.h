// The point-to-point tags the shim uses on its private duplicates of user communicators, in one
// place so that no two concerns share one. Collectives on those duplicates need no tag.
#pragma once

namespace gfshim {

constexpr int kTransportTag = 0x6f5;           // the host algorithms' data (PmpiTransport)
constexpr int kStallQueryTag = 0x6f6;          // stall inspector: "which operation are you at?"
constexpr int kStallAnswerTag = 0x6f7;         // stall inspector: the answer
constexpr int kNcclConnectOutcomeTag = 0x6f8;  // NCCL setup: a rank's outcome (nccl_setup.cpp)
constexpr int kAgreementTag = 0x6f9;  // an agreement run inside a task (src/mpi/pmpi_wait.h)

}  // namespace gfshim
