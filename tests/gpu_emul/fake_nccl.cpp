// A stand-in for libnccl.so.2 on machines without a GPU: the NCCL calls of the plugin
// (cuda/nccl_library.h) over the emulated GPU (emulated_gpu.h), with the collectives carried out
// between the ranks' processes through shared memory (shm_collectives.h). Reductions run in rank
// order, 16-bit values rounded after every step, so every rank gets the same bits.
//
// As NCCL's, nonblocking communicators (config.blocking = 0) finish their initialisation only
// through ncclCommGetAsyncError, once every rank has joined, and report ncclInProgress once
// after each collective call; collectives run in stream order on the stream given; an abort ends
// the collectives this process waits in, and only those (its peers wait on, until their own
// deadline), unless FAKE_NCCL_ABORT_REACHES_PEERS=1 stands in for a transport that sees the closed
// connection: then every rank's collective ends, with ncclRemoteError from
// ncclCommGetAsyncError. Faults, each for every communicator of more than one rank in which the
// process is rank r:
//   FAKE_NCCL_FAIL_INIT_RANK=r  its initialisation fails (an asynchronous ncclSystemError)
//   FAKE_NCCL_HANG_INIT_RANK=r  its initialisation never finishes (ncclInProgress until aborted)
//   FAKE_NCCL_FAIL_CALL_RANK=r  its first collective fails there without taking part (an
//                               asynchronous ncclSystemError, as a broken link would give)
//   FAKE_NCCL_HANG_CALL_RANK=r  its first collective never takes part (until an abort)
//
// At destruction or abort each communicator says on stderr what ran:
//   "emulated NCCL rank R/N: destroyed, A allreduce, S reduce-scatter, G allgather"
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "emulated_gpu.h"
#include "shm_collectives.h"

namespace gfshim::emulated {
namespace {

// What a communicator's collectives share with the stream work they queued: it outlives an
// abort that frees the communicator while its work still runs.
struct CommState {
  std::unique_ptr<ShmGroup> group;
  std::atomic<int> asyncError{ncclSuccess};
  std::atomic<uint64_t> allReduces{0}, reduceScatters{0}, allGathers{0};
  // FAKE_NCCL_FAIL_CALL_RANK / FAKE_NCCL_HANG_CALL_RANK: what the first collective does instead.
  std::atomic<bool> failFirstCall{false}, hangFirstCall{false};
};

// Whether fault `variable` names this rank of a communicator of `ranks`.
bool faultHere(const char* variable, int ranks, int rank) {
  const char* text = std::getenv(variable);
  return ranks > 1 && text != nullptr && std::atoi(text) == rank;
}

bool shmTypeOf(ncclDataType_t type, ShmType* shm) {
  switch (type) {
    case ncclInt8:
      *shm = ShmType::kInt8;
      return true;
    case ncclUint8:
      *shm = ShmType::kUInt8;
      return true;
    case ncclInt32:
      *shm = ShmType::kInt32;
      return true;
    case ncclUint32:
      *shm = ShmType::kUInt32;
      return true;
    case ncclInt64:
      *shm = ShmType::kInt64;
      return true;
    case ncclUint64:
      *shm = ShmType::kUInt64;
      return true;
    case ncclFloat16:
      *shm = ShmType::kFloat16;
      return true;
    case ncclBfloat16:
      *shm = ShmType::kBfloat16;
      return true;
    case ncclFloat32:
      *shm = ShmType::kFloat32;
      return true;
    case ncclFloat64:
      *shm = ShmType::kFloat64;
      return true;
    default:
      return false;
  }
}

bool shmOpOf(ncclRedOp_t op, ShmOp* shm) {
  switch (op) {
    case ncclSum:
      *shm = ShmOp::kSum;
      return true;
    case ncclProd:
      *shm = ShmOp::kProd;
      return true;
    case ncclMax:
      *shm = ShmOp::kMax;
      return true;
    case ncclMin:
      *shm = ShmOp::kMin;
      return true;
    default:
      return false;
  }
}

}  // namespace
}  // namespace gfshim::emulated

namespace emulated = gfshim::emulated;

struct ncclComm {
  std::shared_ptr<emulated::CommState> state;
  int ranks = 0;
  int rank = 0;
  bool blocking = true;
  bool joined = false;         // every rank has joined: the initialisation is done
  bool failedInit = false;     // FAKE_NCCL_FAIL_INIT_RANK
  bool hungInit = false;       // FAKE_NCCL_HANG_INIT_RANK
  int enqueuesInProgress = 0;  // ncclInProgress reports owed after a nonblocking call

  void report(const char* how) const {
    std::fprintf(stderr,
                 "emulated NCCL rank %d/%d: %s, %llu allreduce, %llu reduce-scatter, %llu "
                 "allgather\n",
                 rank, ranks, how, static_cast<unsigned long long>(state->allReduces.load()),
                 static_cast<unsigned long long>(state->reduceScatters.load()),
                 static_cast<unsigned long long>(state->allGathers.load()));
  }
};

namespace {

// Queues one collective on `stream`; `run` gets the host views and returns the ShmResult.
template <typename Run>
ncclResult_t enqueueCollective(ncclComm_t comm, const void* send, size_t sendBytes, void* recv,
                               size_t recvBytes, cudaStream_t stream, const char* what, Run run) {
  if (comm == nullptr || !comm->joined) return ncclInvalidUsage;
  const void* from = sendBytes > 0 ? emulated::deviceView(send, sendBytes, what) : nullptr;
  void* to = recvBytes > 0 ? emulated::deviceView(recv, recvBytes, what) : nullptr;
  std::shared_ptr<emulated::CommState> state = comm->state;
  emulated::enqueue(stream, [state, from, to, run] {
    if (state->asyncError.load() != ncclSuccess) return 0;  // aborted: the kernel ends
    if (state->failFirstCall.exchange(false)) {
      state->asyncError.store(ncclSystemError);
      return 0;
    }
    if (state->hangFirstCall.exchange(false)) {
      while (state->asyncError.load() == ncclSuccess) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return 0;
    }
    const emulated::ShmResult result = run(*state->group, from, to);
    if (result != emulated::ShmResult::kOk) {
      state->asyncError.store(result == emulated::ShmResult::kAborted ? ncclRemoteError
                                                                      : ncclSystemError);
    }
    return 0;  // NCCL reports through ncclCommGetAsyncError, not as a CUDA error
  });
  if (!comm->blocking) {
    comm->enqueuesInProgress = 1;
    return ncclInProgress;
  }
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = 22800;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error (emulated NCCL)";
    case ncclSystemError:
      return "unhandled system error (emulated NCCL)";
    case ncclInvalidArgument:
      return "invalid argument (emulated NCCL)";
    case ncclInvalidUsage:
      return "invalid usage (emulated NCCL)";
    case ncclRemoteError:
      return "remote process exited or there was a network error (emulated NCCL)";
    case ncclInProgress:
      return "NCCL operation in progress (emulated NCCL)";
    default:
      return "unknown result (emulated NCCL)";
  }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  std::random_device random;
  for (char& byte : id->internal) byte = static_cast<char>(random());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int ranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  if (comm == nullptr) return ncclInvalidArgument;
  *comm = nullptr;
  std::string why;
  std::unique_ptr<emulated::ShmGroup> group =
      emulated::ShmGroup::open(id.internal, sizeof id.internal, ranks, rank, &why);
  if (group == nullptr) {
    std::fprintf(stderr, "emulated NCCL: %s\n", why.c_str());
    return ncclSystemError;
  }
  auto* made = new ncclComm;
  made->state = std::make_shared<emulated::CommState>();
  made->state->group = std::move(group);
  made->ranks = ranks;
  made->rank = rank;
  made->blocking = config == nullptr || config->blocking != 0;
  made->failedInit = emulated::faultHere("FAKE_NCCL_FAIL_INIT_RANK", ranks, rank);
  made->hungInit = emulated::faultHere("FAKE_NCCL_HANG_INIT_RANK", ranks, rank);
  made->state->failFirstCall = emulated::faultHere("FAKE_NCCL_FAIL_CALL_RANK", ranks, rank);
  made->state->hangFirstCall = emulated::faultHere("FAKE_NCCL_HANG_CALL_RANK", ranks, rank);
  *comm = made;
  if (made->failedInit) return made->blocking ? ncclSystemError : ncclInProgress;
  if (!made->blocking) return ncclInProgress;
  while (!made->state->group->allJoined()) std::this_thread::yield();
  made->joined = true;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (comm == nullptr || state == nullptr) return ncclInvalidArgument;
  if (comm->failedInit) {
    *state = ncclSystemError;
  } else if (comm->hungInit) {
    *state = ncclInProgress;
  } else if (!comm->joined) {
    comm->joined = comm->state->group->allJoined();
    *state = comm->joined ? ncclSuccess : ncclInProgress;
  } else if (comm->enqueuesInProgress > 0) {
    --comm->enqueuesInProgress;
    *state = ncclInProgress;
  } else {
    *state = static_cast<ncclResult_t>(comm->state->asyncError.load());
  }
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  return comm->blocking ? ncclSuccess : ncclInProgress;  // done at the next poll
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  comm->report("destroyed");
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->state->asyncError.store(ncclRemoteError);
  const char* reach = std::getenv("FAKE_NCCL_ABORT_REACHES_PEERS");
  if (reach != nullptr && reach[0] == '1') {
    comm->state->group->abort();  // every rank's waits end
  } else {
    comm->state->group->abortHere();
  }
  comm->report("aborted");
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  emulated::ShmType shmType;
  emulated::ShmOp shmOp;
  if (!emulated::shmTypeOf(type, &shmType) || !emulated::shmOpOf(op, &shmOp)) {
    return ncclInvalidArgument;
  }
  const size_t bytes = count * emulated::shmTypeBytes(shmType);
  if (comm != nullptr) comm->state->allReduces.fetch_add(1);
  return enqueueCollective(
      comm, send, bytes, recv, bytes, stream, "ncclAllReduce",
      [count, shmType, shmOp](emulated::ShmGroup& group, const void* from, void* to) {
        return group.allReduce(from, to, count, shmType, shmOp);
      });
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvCount, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  emulated::ShmType shmType;
  emulated::ShmOp shmOp;
  if (comm == nullptr || !emulated::shmTypeOf(type, &shmType) || !emulated::shmOpOf(op, &shmOp)) {
    return ncclInvalidArgument;
  }
  const size_t bytes = recvCount * emulated::shmTypeBytes(shmType);
  comm->state->reduceScatters.fetch_add(1);
  return enqueueCollective(
      comm, send, bytes * static_cast<size_t>(comm->ranks), recv, bytes, stream,
      "ncclReduceScatter",
      [recvCount, shmType, shmOp](emulated::ShmGroup& group, const void* from, void* to) {
        return group.reduceScatter(from, to, recvCount, shmType, shmOp);
      });
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendCount, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  emulated::ShmType shmType;
  if (comm == nullptr || !emulated::shmTypeOf(type, &shmType)) return ncclInvalidArgument;
  const size_t bytes = sendCount * emulated::shmTypeBytes(shmType);
  comm->state->allGathers.fetch_add(1);
  return enqueueCollective(
      comm, send, bytes, recv, bytes * static_cast<size_t>(comm->ranks), stream, "ncclAllGather",
      [sendCount, shmType](emulated::ShmGroup& group, const void* from, void* to) {
        return group.allGather(from, to, sendCount, shmType);
      });
}

}  // extern "C"
