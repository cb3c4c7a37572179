// Lazy allreduce: fusion of MPI_Iallreduce, driven by the application's own MPI calls
// (GFSHIM_PROGRESS=calls) or by one progress thread per communicator (thread).
//
// The hook turns an MPI_Iallreduce into a PendingOp with a generalized request
// (MPI_Grequest_start) that the application completes with its ordinary MPI_Wait*/MPI_Test*, and
// returns at once. The communicator's round loop runs negotiation rounds on the fusion
// communicator (CommState::fusionComm, made where every rank makes a communicator anyway: see
// hooks/comm_hook.cpp; not the blocking path's, so the two never match each other's messages):
//
//   round:  each rank contributes its queue length n; one agreement, MIN over [n, -n], gives
//           min and max (src/mpi/pmpi_wait.h: a PMPI_Allreduce on the thread, a
//           point-to-point dissemination inside a task). Every rank takes `min` operations from the
//           head of its queue -- the same operations everywhere, since all ranks start their
//           Iallreduces on a communicator in the same order -- packs the engine's operations into
//           buckets (fusion_buckets.h), reduces each bucket through the queue's Engine
//           (mpi/engine.h: the code that runs a blocking call, which is a bucket of one; ring /
//           torus2d / the MPI's, chosen by the cost model for the bucket's size, on the host or
//           through NCCL), and completes the requests (MPI_Grequest_complete). Operations of at
//           least the cost model's fusionAloneBytes are reduced alone, in place. Operations the
//           engine cannot reduce (user op, derived datatype) go to PMPI_Allreduce alone, in their
//           place (queued only where the MPI's own MPI_Iallreduce may not run beside the shim's
//           progress: an Open MPI progress thread, or some rank had CUDA before MPI_Init; with
//           progress in calls that blocking call then runs inside the task, a known limit).
//           min == max means every queue is
//           empty after the round: the thread sleeps on a condition variable until the next
//           Iallreduce (no core is burned while idle), then gathers the burst for
//           GFSHIM_CYCLE_MS or until the application waits; the task yields until one is
//           queued. min < max means some rank has not posted everything yet: the next round
//           follows (after a 50 us sleep, or a yield, when min == 0).
//
// Cross-rank consistency: bucket boundaries depend only on the agreed minimum and on the
// (count, datatype, op) of the operations, which MPI requires to match. Completion order, Wait
// order and timing decide nothing. A communicator's thread only ever waits for the same
// communicator's peers, and every communicator has its own thread (or its own task, which never
// blocks), so Iallreduces on several communicators started in different orders on different
// ranks cannot deadlock.
//
// Progress in calls (GFSHIM_PROGRESS=calls; the default where the MPI has a progress hook):
// the round loop is a task (common/task.h) with no thread of its own. FusionQueue::progressAll
// resumes every queue's task that has work; it runs from the MPI's own progress loop (Open MPI's
// opal_progress_register: inside every MPI call that waits, on any communicator, so a rank
// blocked in MPI_Barrier still serves its peers' rounds) and from the Iallreduce hook (a round
// starts at once: no cycle is waited for). Inside the task nothing blocks: transfers and
// agreements test and yield (src/mpi/pmpi_wait.h), so progress calls nest safely and one
// thread drives any number of queues. The queue (in both modes) is set up (topology, transport) where its
// communicator is made, a collective point; the Iallreduce hook stays local. The application's
// thread level is untouched (no MPI_THREAD_MULTIPLE), and no MPI nonblocking collective runs
// beside a thread, so calls below GFSHIM_FUSION_MIN_BYTES and calls the engine cannot reduce go
// to the MPI's own MPI_Iallreduce instead of the queue.
//
// Progress by a thread (GFSHIM_PROGRESS=thread), a measured choice before progress in calls
// existed (Open MPI 4.1.4, np 2, this 2-core VM; bench/RESULTS.md, "Lazy allreduce"):
//   - A progress thread, with MPI_THREAD_MULTIPLE (the init hooks ask for it; MPI_Query_thread
//     still reports the level the application asked for). It runs while the application
//     computes, which is what overlap needs. Callbacks from the MPI's progress loop (MPICH's
//     MPIX_Grequest_start poll function, Open MPI's opal_progress_register) run only while the
//     application is inside MPI, so they cannot hide communication behind computation, and
//     their blocking rounds would nest inside any MPI call on any communicator; not built.
//   - The MPIs spin in MPI_Wait, and a rank's thread shares its core with the application: a
//     burst of ten 1 KiB Iallreduces took 20 ms (native 0.09-0.17 ms) because every bucket
//     waited for a scheduler time slice. The Wait hooks (hooks/completion_hooks.cpp) therefore
//     sleep on FusionCompletions while fused operations are in flight (0.5-0.6 ms per such burst),
//     and a round that empties every queue ends the rounds without a confirming empty round,
//     which a peer spinning in some other MPI call would again delay (0.05-0.06 ms per burst
//     with gradient_replay -m burst10x1K, native 0.01-0.02 ms; 4.2 ms with the confirming
//     round). Progress in calls (above) has none of these hand-offs: bench/RESULTS.md, "Never
//     slower than native".
//   - Rounds use blocking PMPI_Allreduce, not PMPI_Iallreduce + PMPI_Test: Open MPI 4.1's
//     libnbc segfaulted (NBC_Progress) when the thread tested its Iallreduce while the
//     application's own nonblocking collectives progressed.
//
// Requests: a generalized request is the one request kind both MPIs let the application mix
// freely with its own requests in Waitall/Waitany/Waitsome/Test*, and free with
// MPI_Request_free (MACHINE-NOTES; a fake handle hangs Open MPI's Wait and aborts MPICH's).
// MPICH's MPIX_Grequest_start would only add the poll callback, called only inside waits on its
// own request: not enough to serve a peer's rounds from inside MPI_Barrier, so not used.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/status.h"
#include "common/task.h"
#include "config/config.h"
#include "engine/fusion_rounds.h"
#include "engine/policy.h"
#include "engine/stats.h"
#include "engine/timeline.h"
#include "gpu/cuda_driver.h"
#include "mpi/engine.h"
#include "mpi/pmpi_wait.h"

namespace gfshim {

// What the generalized request's query function reports; shared by the request (freed by MPI's
// free function) and the progress thread (which sets the error before completing).
struct GrequestResult;

struct PendingOp {
  const void* send = nullptr;  // the user's send buffer (the receive buffer for MPI_IN_PLACE)
  void* recv = nullptr;
  int64_t count = 0;
  DType dtype = DType::kByte;
  RedOp op = RedOp::kSum;
  // The application's handles, for a bucket the cost model hands to PMPI_Allreduce and for a
  // native operation.
  MPI_Datatype mpiDatatype = MPI_DATATYPE_NULL;
  MPI_Op mpiOp = MPI_OP_NULL;
  // Not reducible by the engine (user op, derived datatype): reduced alone by PMPI_Allreduce, in
  // its place in the queue; dtype and op are then unused.
  bool native = false;
  // A native operation the MPI refused (bad arguments are found before any transfer, on every
  // rank alike): only this request fails, with the MPI's error code.
  int nativeError = MPI_SUCCESS;
  MPI_Request request = MPI_REQUEST_NULL;  // the generalized request the application holds
  GrequestResult* result = nullptr;
  std::chrono::steady_clock::time_point queuedAt;
  uint64_t id = 0;  // for the timeline
  // Where the buffers are (src/gpu/cuda_driver.h): device buffers are packed and unpacked with the
  // driver's copies, so a bucket always reduces host memory (the wire pattern is the host one).
  BufferPlacements at;
  size_t bytes() const { return static_cast<size_t>(count) * dtypeBytes(dtype); }  // not native
};

struct FusionSettings {
  Settings settings;             // the agreed settings: buckets' plans, fusionBytes, cycleMs
  Timeline* timeline = nullptr;  // GFSHIM_TIMELINE; nullptr: none
};

// The fused operations in flight over all communicators, and a signal when some complete. The
// Wait hooks (hooks/completion_hooks.cpp) sleep on it while fused operations are pending instead of
// spinning in the MPI's Wait: a spinning application thread takes the core from the progress
// thread, which on a rank bound to one core made every bucket wait for a scheduler time slice
// (measured: 20 ms per burst of ten 1 KiB Iallreduces at np 2, against 0.17 ms native).
class FusionCompletions {
 public:
  static int64_t inFlight();
  static uint64_t generation();
  // Returns when an operation completes after `seen` = generation() was read, or after `timeout`.
  static void waitForNext(uint64_t seen, std::chrono::microseconds timeout);
  // An application thread is blocked in a Wait hook: it posts nothing more until that returns, so
  // a progress thread gathering a burst (GFSHIM_CYCLE_MS) stops gathering.
  class ApplicationWaiting {
   public:
    ApplicationWaiting();
    ~ApplicationWaiting();
    ApplicationWaiting(const ApplicationWaiting&) = delete;
    ApplicationWaiting& operator=(const ApplicationWaiting&) = delete;
  };
  // An application thread polls with MPI_Test*: like a wait, it ends the gathering of a burst.
  static void applicationPolled();
  // Sleeps for `cycle`, or less when an application thread waits or polls.
  static void gatherBurst(std::chrono::microseconds cycle);

 private:
  friend class FusionQueue;
  static void queued();
  static void completed(size_t count);
};

class FusionQueue {
 public:
  // Collective over `comm` (CommState::fusionComm; the caller frees it after the queue): call it
  // where every rank makes a communicator, never inside a nonblocking call. Sets the queue's
  // engine up at once (topology, transport), so the Iallreduce hook can ask the cost model
  // (aloneNativeBelowBytes) in both progress modes. `rank` and `size` are the communicator's.
  //
  // With settings.settings.progressInCalls the round loop runs as a task that progressAll()
  // resumes. Otherwise the first enqueue starts the progress thread, which agrees on the CUDA
  // driver before its first round.
  static Status create(MPI_Comm comm, int rank, int size, const FusionSettings& settings,
                       Stats* stats, std::unique_ptr<FusionQueue>* queue);
  // Resumes the round loop of every queue progressed in calls that has work, once; returns at
  // once when called inside a task or while this thread already runs progressAll. Cheap when no
  // queue has work (one atomic load). Any thread; the MPI's progress hook calls it. False when
  // some queue with work was not resumed (another thread was in it, or this call returned early).
  static bool progressAll();
  // progressAll, and when that advanced no queue's task (each only tested a transfer still in
  // flight) blocks in the MPI until one of those transfers completes (ParkedWaits). For a Wait
  // hook whose requests are all fused operations (allFused): no other progress can complete them,
  // so waiting for a transfer loses nothing, and the rank stops polling.
  static void progressAllOrBlock();
  // Whether each of `requests[0..count)` is MPI_REQUEST_NULL or a fused operation's not yet freed,
  // and count > 0.
  static bool allFused(int count, const MPI_Request* requests);
  // Whether some queue is progressed in calls (then the Wait hooks need not sleep).
  static bool anyInCalls();
  // Finishes every queued operation (rounds continue until all ranks' queues are empty), then
  // stops the thread.
  ~FusionQueue();
  // The finalize hook, before PMPI_Finalize: finishes and stops every queue still alive (those of
  // communicators the application never freed), so that no thread is inside MPI afterwards.
  static void stopAll();

  // Starts a generalized request for the operation, queues it and wakes the thread. The request
  // is returned to the application in *request.
  Status enqueue(PendingOp op, MPI_Request* request);
  // Returns once every operation enqueued before the call has completed (or failed). MPI orders
  // a communicator's collectives alike on every rank, so every rank waits for the same ones. For
  // a blocking call about to run through NCCL: this thread's NCCL work of the communicator is
  // then done and no more can start during the call, so the two NCCL groups of one GPU never
  // run at once (on a GPU that runs one kernel at a time, CUDA_DEVICE_MAX_CONNECTIONS=1, two
  // groups started in different orders on two ranks would wait for each other).
  void waitForEnqueued();
  // With GFSHIM_ALGO=auto: an MPI_Iallreduce below this many bytes is predicted faster as the
  // MPI's own than fused alone (policy.h, fusedAloneBeatsNativeBytesOn, on the queue's agreed
  // facts). 0 otherwise, or where the setup failed.
  uint64_t aloneNativeBelowBytes() const { return aloneNativeBelowBytes_; }

 private:
  friend class FusionRounds<PendingOp>;
  FusionQueue() = default;
  void run();
  void stop();
  // Calls mode: resumes the round loop's task once unless another thread is in it or it is idle;
  // false when another thread was in it.
  bool progress();
  // Calls mode: counts this queue as having work, for progressAll's fast path.
  void markActive();
  // Calls mode, holding taskMutex_: resumes task_ once, with this queue's phase tracer.
  void resumeTask();

  // The round loop's driver (engine/fusion_rounds.h).
  void gatherBurst();
  Status agree(int64_t queued, int64_t* least, int64_t* most);
  void took(std::vector<PendingOp>& taken);
  Status reduce(std::vector<PendingOp>& taken);
  void complete(std::vector<PendingOp>& taken, const Status& status);

  // `run` points at the first operation of the run of engine operations `bucket` indexes into:
  // the engine reduces them as one bucket (mpi/engine.h).
  // `runResidualNames`: the run's residual names in queue order (position keys), or empty.
  Status reduceBucket(PendingOp* run, const struct FusionBucket& bucket,
                      const std::vector<uintptr_t>& runResidualNames);
  // One operation by PMPI_Allreduce (a native one; a device buffer the MPI must take as it is).
  void reduceNative(PendingOp& op);

  MPI_Comm comm_ = MPI_COMM_NULL;  // not owned
  FusionSettings settings_;
  Stats* stats_ = nullptr;
  // Reduces the buckets, with its own NCCL group (never shared with the blocking path's).
  std::unique_ptr<Engine> engine_;
  FusionRounds<PendingOp> rounds_;
  // Operations enqueued (by the application) and completed (by the thread): waitForEnqueued.
  std::mutex countsMutex_;
  std::condition_variable completedMore_;
  uint64_t enqueuedCount_ = 0;
  uint64_t completedCount_ = 0;
  std::thread thread_;                         // thread mode, from the first enqueue
  std::unique_ptr<Task> task_;                 // calls mode: the round loop
  std::mutex taskMutex_;                       // held while a thread resumes task_
  ParkedWaits parkedWaits_;                    // calls mode: the transfers task_ waits for
  std::optional<TimelinePhaseTracer> tracer_;  // calls mode with GFSHIM_TIMELINE
  long timelineLane_ = 0;                      // calls mode: this queue's timeline tid
  Status setUpStatus_;
  uint64_t aloneNativeBelowBytes_ = 0;
  std::atomic<bool> active_{false};  // counted in progressAll's active queues
};

}  // namespace gfshim
