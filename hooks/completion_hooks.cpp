// MPI_Wait* and MPI_Test* while fused Iallreduces are in flight.
//
// With progress in calls (GFSHIM_PROGRESS=calls) these hooks are where the application's thread
// drives the fused calls: a Wait hook alternates FusionQueue::progressAll with the matching
// MPI_Test function until it succeeds (no sleep: nobody else would do the work), a Test hook
// progresses once before testing. Where the MPI has a progress hook the MPI's own Wait would
// progress them as well; the loop here makes the hooks independent of it. Everything below is
// about progress threads.
//
// The MPIs' Wait functions spin. A rank's fusion thread usually shares a core with the application
// thread (Open MPI binds a rank to one core at np <= 2), so an application spinning in MPI_Wait
// on a fused request starved the very thread that completes it: each bucket then waited for a
// scheduler time slice (20 ms per burst of ten small Iallreduces at np 2, against 0.17 ms
// native). While fused operations are in flight the Wait hooks instead test the requests with the
// matching MPI_Test function and, until it succeeds, sleep until the next fused completion (or
// a short timeout, so that the application's own requests are still seen promptly). Semantics are
// those of the Test functions, which the standard defines to match the Wait functions.
//
// An application polling with MPI_Test* starves the thread the same way (gradient_replay -t,
// np 2: 29.5 ms per burst of ten 1 KiB calls, ResNet-50 214 ms against 66 ms with Waitall). While
// fused operations are in flight the Test hooks end the burst gathering (GFSHIM_CYCLE_MS: the
// application is polling, so it posts nothing more for now) and, when the test fails, yield the
// core once (sched_yield), which costs a polling loop about a microsecond. Measured after: 0.04 ms
// per burst (native 0.02) and ResNet-50 35 ms (native 440 ms) with -t.
//
// With no fused operation in flight every hook forwards the application's call, at the cost of one
// atomic load, to the next definition of the same MPI_* function (next_mpi.h: a PMPI tool
// preloaded after the shim sees it), and so does every MPI_Test* hook. While a Wait hook polls
// for fused operations, its polls are the shim's own PMPI_Test* calls: a tool sees the MPI_Wait*
// only if it is still waiting when the last fused operation completes, not the polls in between.
#include <mpi.h>
#include <sched.h>

#include <chrono>

#include "hooks/hook_api.h"
#include "hooks/next_mpi.h"
#include "hooks/runtime.h"
#include "mpi/fusion_queue.h"

namespace gfshim::hooks {
namespace {

GFSHIM_NEXT_MPI(Wait);
GFSHIM_NEXT_MPI(Waitsome);
GFSHIM_NEXT_MPI(Test);
GFSHIM_NEXT_MPI(Testall);
GFSHIM_NEXT_MPI(Testsome);
#if !defined(GFSHIM_SMPI)
GFSHIM_NEXT_MPI(Waitall);
GFSHIM_NEXT_MPI(Waitany);
GFSHIM_NEXT_MPI(Testany);
#endif

// SimGrid SMPI 3.32's MPI_Waitall, MPI_Waitany and MPI_Testany neither free nor null a completed
// generalized request (a fused MPI_Iallreduce's; checked with a small program: its MPI_Test,
// MPI_Testall, MPI_Testsome and MPI_Waitsome do). Under SMPI the three are built from MPI_Testall
// and MPI_Test, for every request, since a completed fused request is no longer counted in flight.
// forward*: the application's call passed on; own*: the shim's polls while fused calls run.
#if defined(GFSHIM_SMPI)
int testanyByTests(int count, MPI_Request* requests, int* index, int* flag, MPI_Status* status) {
  *flag = 0;
  *index = MPI_UNDEFINED;
  bool anyActive = false;
  for (int i = 0; i < count; ++i) {
    if (requests[i] == MPI_REQUEST_NULL) continue;
    anyActive = true;
    const int rc = PMPI_Test(&requests[i], flag, status);
    if (rc != MPI_SUCCESS || *flag) {
      *index = i;
      return rc;
    }
  }
  *flag = anyActive ? 0 : 1;  // no active request: done at once, with MPI_UNDEFINED
  return MPI_SUCCESS;
}

int forwardTestany(int count, MPI_Request* requests, int* index, int* flag, MPI_Status* status) {
  return testanyByTests(count, requests, index, flag, status);
}
int ownTestany(int count, MPI_Request* requests, int* index, int* flag, MPI_Status* status) {
  return testanyByTests(count, requests, index, flag, status);
}

int forwardWaitany(int count, MPI_Request* requests, int* index, MPI_Status* status) {
  int flag = 0;
  for (;;) {
    const int rc = testanyByTests(count, requests, index, &flag, status);
    if (rc != MPI_SUCCESS || flag) return rc;
  }
}

int forwardWaitall(int count, MPI_Request* requests, MPI_Status* statuses) {
  int flag = 0;
  for (;;) {
    const int rc = PMPI_Testall(count, requests, &flag, statuses);
    if (rc != MPI_SUCCESS || flag) return rc;
  }
}
#else
int forwardTestany(int count, MPI_Request* requests, int* index, int* flag, MPI_Status* status) {
  return nextTestany(count, requests, index, flag, status);
}
int ownTestany(int count, MPI_Request* requests, int* index, int* flag, MPI_Status* status) {
  return PMPI_Testany(count, requests, index, flag, status);
}
int forwardWaitany(int count, MPI_Request* requests, int* index, MPI_Status* status) {
  return nextWaitany(count, requests, index, status);
}
int forwardWaitall(int count, MPI_Request* requests, MPI_Status* statuses) {
  return nextWaitall(count, requests, statuses);
}
#endif

// How long a waiting application thread sleeps before it tests its requests again when no fused
// operation completes: bounds the extra latency of the application's own requests.
constexpr std::chrono::microseconds kRecheck{100};

// Polls `test` (an MPI_Test* call writing whether the wait is over) until it succeeds, sleeping
// between polls; once no fused operation is in flight, hands over to `wait` (the blocking form).
// `requests`: the `count` requests waited on. When every one is a fused operation's
// (FusionQueue::allFused), nothing but the shim's transfers can complete them: progress in calls
// then blocks in the MPI while every fused operation waits for a transfer, instead of polling.
template <typename Test, typename Wait>
int waitWhileFusing(Test test, Wait wait, int count, const MPI_Request* requests) {
  if (ReentryGuard::inside() || FusionCompletions::inFlight() == 0) return wait();
  if (FusionQueue::anyInCalls()) {
    const bool onlyFused = FusionQueue::allFused(count, requests);
    for (;;) {
      if (onlyFused) {
        FusionQueue::progressAllOrBlock();
      } else {
        FusionQueue::progressAll();
      }
      if (FusionCompletions::inFlight() == 0) return wait();
      bool done = false;
      const int rc = test(&done);
      if (rc != MPI_SUCCESS || done) return rc;
    }
  }
  const FusionCompletions::ApplicationWaiting waiting;
  for (;;) {
    const uint64_t seen = FusionCompletions::generation();
    if (FusionCompletions::inFlight() == 0) return wait();
    bool done = false;
    const int rc = test(&done);
    if (rc != MPI_SUCCESS || done) return rc;
    FusionCompletions::waitForNext(seen, kRecheck);
  }
}

// Runs `test` (an MPI_Test* call writing whether it succeeded) once; while fused operations are in
// flight, first ends the progress threads' burst gathering, and after a failed test yields.
template <typename Test>
int testWhileFusing(Test test) {
  bool done = false;
  if (ReentryGuard::inside() || FusionCompletions::inFlight() == 0) return test(&done);
  if (FusionQueue::anyInCalls()) {
    FusionQueue::progressAll();
    return test(&done);
  }
  FusionCompletions::applicationPolled();
  const int rc = test(&done);
  if (rc == MPI_SUCCESS && !done) sched_yield();
  return rc;
}

}  // namespace

int testHook(void* rawRequest, int* flag, void* rawStatus) noexcept {
  auto* request = static_cast<MPI_Request*>(rawRequest);
  auto* status = static_cast<MPI_Status*>(rawStatus);
  return testWhileFusing([&](bool* done) {
    const int rc = nextTest(request, flag, status);
    *done = *flag != 0;
    return rc;
  });
}

int testallHook(int count, void* rawRequests, int* flag, void* rawStatuses) noexcept {
  auto* requests = static_cast<MPI_Request*>(rawRequests);
  auto* statuses = static_cast<MPI_Status*>(rawStatuses);
  return testWhileFusing([&](bool* done) {
    const int rc = nextTestall(count, requests, flag, statuses);
    *done = *flag != 0;
    return rc;
  });
}

int testanyHook(int count, void* rawRequests, int* index, int* flag, void* rawStatus) noexcept {
  auto* requests = static_cast<MPI_Request*>(rawRequests);
  auto* status = static_cast<MPI_Status*>(rawStatus);
  return testWhileFusing([&](bool* done) {
    const int rc = forwardTestany(count, requests, index, flag, status);
    *done = *flag != 0;
    return rc;
  });
}

int testsomeHook(int count, void* rawRequests, int* outcount, int* indices,
                 void* rawStatuses) noexcept {
  auto* requests = static_cast<MPI_Request*>(rawRequests);
  auto* statuses = static_cast<MPI_Status*>(rawStatuses);
  return testWhileFusing([&](bool* done) {
    const int rc = nextTestsome(count, requests, outcount, indices, statuses);
    *done = *outcount != 0;
    return rc;
  });
}

int waitHook(void* rawRequest, void* rawStatus) noexcept {
  auto* request = static_cast<MPI_Request*>(rawRequest);
  auto* status = static_cast<MPI_Status*>(rawStatus);
  return waitWhileFusing(
      [&](bool* done) {
        int flag = 0;
        const int rc = PMPI_Test(request, &flag, status);
        *done = flag != 0;
        return rc;
      },
      [&] { return nextWait(request, status); }, 1, request);
}

// Waitall's poll while fused operations run: one request looked at per poll, not all of them.
// The requests before `seen` were found complete by MPI_Request_get_status, which neither frees a
// request nor fills a status; once every one is complete, one MPI_Testall completes them with
// Waitall's statuses and errors. A poll of all of them (MPI_Testall) cost one test per request
// every time the fused operations were progressed: a framework's Waitall over the 161 requests
// of a ResNet-50 step made its 102 MB step 6x slower on simulated ranks, where a failed test
// costs 1 us (bench/RESULTS.md, "At scale, simulated (issue 19, second session)").
int waitallHook(int count, void* rawRequests, void* rawStatuses) noexcept {
  auto* requests = static_cast<MPI_Request*>(rawRequests);
  auto* statuses = static_cast<MPI_Status*>(rawStatuses);
  int seen = 0;
  return waitWhileFusing(
      [&](bool* done) -> int {
        for (; seen < count; ++seen) {
          if (requests[seen] == MPI_REQUEST_NULL) continue;
          int complete = 0;
          if (PMPI_Request_get_status(requests[seen], &complete, MPI_STATUS_IGNORE) !=
              MPI_SUCCESS) {
            break;  // MPI_Testall below reports it as Waitall would
          }
          if (!complete) {
            *done = false;
            return MPI_SUCCESS;
          }
        }
        int flag = 0;
        const int rc = PMPI_Testall(count, requests, &flag, statuses);
        *done = flag != 0;
        return rc;
      },
      [&] { return forwardWaitall(count, requests, statuses); }, count, requests);
}

int waitanyHook(int count, void* rawRequests, int* index, void* rawStatus) noexcept {
  auto* requests = static_cast<MPI_Request*>(rawRequests);
  auto* status = static_cast<MPI_Status*>(rawStatus);
  return waitWhileFusing(
      [&](bool* done) {
        int flag = 0;
        const int rc = ownTestany(count, requests, index, &flag, status);
        *done = flag != 0;
        return rc;
      },
      [&] { return forwardWaitany(count, requests, index, status); }, count, requests);
}

int waitsomeHook(int count, void* rawRequests, int* outcount, int* indices,
                 void* rawStatuses) noexcept {
  auto* requests = static_cast<MPI_Request*>(rawRequests);
  auto* statuses = static_cast<MPI_Status*>(rawStatuses);
  return waitWhileFusing(
      [&](bool* done) {
        const int rc = PMPI_Testsome(count, requests, outcount, indices, statuses);
        *done = *outcount != 0;  // MPI_UNDEFINED (no active request) ends the wait too
        return rc;
      },
      [&] { return nextWaitsome(count, requests, outcount, indices, statuses); }, count, requests);
}

}  // namespace gfshim::hooks
