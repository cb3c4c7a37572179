// The engine: one communicator's machinery that reduces a bucket. A bucket is a run of
// operations of one (datatype, op) reduced as one allreduce of their concatenation; a blocking
// MPI_Allreduce is a bucket of one, a fusion round's bucket holds many (mpi/fusion_queue.h).
// The blocking hook and the fusion queue each own an Engine on a private communicator of their
// own, and both reduce through Engine::reduce, so placement, agreement and algorithm are decided
// and run in one place:
//
//   plan      planOnComm + chooseAlgorithm on the agreed facts (plan()): engine algorithm, the
//             MPI's own (pass-through), lossy modes. Inside a task no blocking MPI collective may
//             run (it would hold the application's thread until every peer joins), and the MPI's
//             counts are int: there the ring reduces what the cost model gives the MPI.
//   agree     one small agreement: the arguments (GFSHIM_CHECK_CALLS, for a blocking call; a
//             fusion round checks its operations once per round) and, where some rank has the
//             CUDA driver, the GPU route vote (engine/gpu_route.h) in the same allreduce
//   route     NCCL through the plugin (one operation: its allreduce, lossy modes included; many:
//             its fused allreduce, exact or a codec), else the host: one operation through the
//             staging pipeline in blocks (gpu/staged_allreduce.h; host buffers in place),
//             many packed into one host buffer (device buffers copied, a failed copy reduced as
//             zeros); or, where a device buffer may be neither reduced by NCCL nor staged, back
//             to the caller, which hands the operations to the MPI
//   reduce    on host memory: the lossy modes (engine/lossy_allreduce.h, residuals per
//             operation, named by its receive buffer or, with GFSHIM_CSC_KEY=position, by its
//             place in the step: engine/step_positions.h), the MPI's own allreduce, or the
//             engine's algorithm (engine/execute.h)
//
// Every step depends only on agreed values, so every rank runs the same steps (invariant 3); a
// local failure after the agreement (a failed device copy) still runs the collective steps and
// is reported after them.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "algo/torus_grid.h"
#include "algo/workspace.h"
#include "common/status.h"
#include "common/task.h"
#include "config/config.h"
#include "engine/gpu_route.h"
#include "engine/lossy_allreduce.h"
#include "engine/policy.h"
#include "engine/stats.h"
#include "engine/step_positions.h"
#include "engine/timeline.h"
#include "gpu/cuda_driver.h"
#include "mpi/nccl_setup.h"
#include "mpi/pmpi_transport.h"

namespace gfshim {

// One operation of a bucket (send == recv for MPI_IN_PLACE).
struct BucketOperation {
  const void* send = nullptr;
  void* recv = nullptr;
  int64_t count = 0;
  BufferPlacements at;  // where its buffers are (src/gpu/cuda_driver.h)
};

struct Bucket {
  const BucketOperation* ops = nullptr;
  size_t opCount = 0;
  DType dtype = DType::kByte;
  RedOp op = RedOp::kSum;
  // The application's handles, for a bucket the plan gives to the MPI's own algorithm.
  MPI_Datatype mpiDatatype = MPI_DATATYPE_NULL;
  MPI_Op mpiOp = MPI_OP_NULL;
  int64_t count() const;
  uint64_t bytes() const { return static_cast<uint64_t>(count()) * dtypeBytes(dtype); }
};

struct BucketOptions {
  // Agree the arguments (count, datatype, op) first: a mismatch fails the call on every rank
  // before any transfer (GFSHIM_CHECK_CALLS, mpi/call_check.h).
  bool checkArguments = false;
  // Runs on every rank before an agreed NCCL route starts (the blocking path waits there for its
  // fusion queue's NCCL work: FusionQueue::waitForEnqueued).
  std::function<void()> beforeNccl;
  // The operations' residual names, given by a fusion round that named its operations in queue
  // order (residualNameOf), so that positions in the step do not follow the buckets' order; empty:
  // the engine names them itself.
  std::vector<uintptr_t> residualNames;
};

struct BucketOutcome {
  // kPassthrough: nothing ran (a device buffer that neither NCCL nor staging may take); the
  // caller hands the operations to the MPI, on every rank alike.
  GpuRoute route = GpuRoute::kHost;
  // The arguments agreed (or were not checked): a failure after this point may leave peers
  // mid-transfer, so the communicator's engine is unusable afterwards.
  bool pastArgumentCheck = false;
};

class Engine {
 public:
  // `facts` holds the communicator's rank, size and the checks made before its setup.
  explicit Engine(const CommFacts& facts) : facts_(facts) {}
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Collective over `comm` (a private duplicate the caller frees after the engine): detects the
  // topology into the facts, builds the torus grid and makes the transport. `timeline` (may be
  // null) gets the bucket's phases. agreeOnCudaDriver must follow before the first reduce.
  Status setUp(MPI_Comm comm, const Settings& settings, Stats* stats, Timeline* timeline);
  // Collective over the engine's communicator, after setUp: agrees whether some rank has the CUDA
  // driver loaded now (then every bucket agrees on its GPU route). Apart from setUp so that a
  // fusion queue set up where its communicator is made can agree later, on its thread, after the
  // application may have loaded CUDA.
  Status agreeOnCudaDriver();
  bool isSetUp() const { return transport_ != nullptr; }

  const CommFacts& facts() const { return facts_; }
  MPI_Comm comm() const { return comm_; }
  WaitState& waitState() { return transport_->waitState(); }

  // The plan of a bucket of `bytes` whose call-level plan is `callPlan` (planCall): pass-through
  // or engine on this communicator, and its algorithm. Agreed inputs only.
  // `largestOperationBytes`: a fused bucket's largest operation (chooseAlgorithm).
  Plan plan(const Plan& callPlan, DType dtype, RedOp op, uint64_t bytes,
            uint64_t largestOperationBytes = 0) const;

  // GFSHIM_CSC_KEY=position is on: residual names are places in the step, counted per operation.
  bool namesResidualsByPlace() const { return steps_.has_value(); }
  // What one operation's residual belongs to (GFSHIM_CSC_KEY): its receive buffer's address, or
  // for a float SUM with position keys its place in the step (0 while it has none: the call then
  // runs dense); counts the place.
  uintptr_t residualNameOf(const void* recv, int64_t count, DType dtype, RedOp op);

  // Collective: reduces the bucket with `plan` (from plan(), not a pass-through unless the bucket
  // came from a fusion round). *outcome says which route ran.
  Status reduce(const Bucket& bucket, const Plan& plan, const BucketOptions& options,
                BucketOutcome* outcome);

 private:
  // Device buffers may be staged (GFSHIM_GPU_STAGING, or inside a task, where the MPI may not
  // take them: a blocking call there would hold the application's thread).
  bool stagingAllowed() const { return settings_.gpuStaging || Task::inTask(); }
  // This rank's GPU route vote for the bucket (engine/gpu_route.h).
  GpuVote voteFor(const Bucket& bucket, const Plan& plan, const BufferPlacements& at) const;
  Status agree(const Bucket& bucket, const BucketOptions& options, const GpuVote& vote,
               BucketOutcome* outcome, std::array<int32_t, 3>* minimum);
  // NCCL through the plugin. *declined: every rank's plugin refused it alike before any transfer.
  Status reduceOnGpu(const Bucket& bucket, const Plan& plan, bool* declined);
  // residualNameOf for each of the bucket's operations. With position keys every float SUM
  // bucket counts its operations' places, lossy or not, so that the steps look alike whatever the
  // buckets; otherwise it is asked for lossy buckets only.
  std::vector<uintptr_t> residualNamesOf(const Bucket& bucket);
  // Host memory: one operation through the staging pipeline, or the packed bucket.
  Status reduceOnHost(const Bucket& bucket, const Plan& plan, GpuRoute route,
                      const std::vector<uintptr_t>& residualNames);
  // The plan on one block of host memory: `keys` name the operations' residuals (lossy modes).
  Status reduceBlock(const Bucket& bucket, const Plan& plan, const void* in, void* out,
                     int64_t count, const std::vector<ResidualKey>& keys);
  // Copies the operations' send buffers into / their results out of the packed bucket (the
  // driver's synchronous copies for device memory). A failed copy in leaves zeros in *copyError's
  // place and is reduced anyway: the peers reduce the bucket too.
  void pack(const Bucket& bucket, std::byte* packed, Status* copyError);
  Status unpack(const Bucket& bucket, const std::byte* packed);

  CommFacts facts_;
  MPI_Comm comm_ = MPI_COMM_NULL;  // not owned
  Settings settings_;
  Stats* stats_ = nullptr;
  Timeline* timeline_ = nullptr;
  std::optional<TorusGrid> grid_;
  std::unique_ptr<PmpiTransport> transport_;
  Workspace workspace_;                // the algorithms' scratch
  Workspace packed_;                   // a bucket of several operations
  std::unique_ptr<LossyState> lossy_;  // made at the first lossy bucket
  std::optional<StepPositions> steps_;  // GFSHIM_CSC_KEY=position with sparse communication
  bool stepsBrokenWarned_ = false;
  GpuCommState gpu_;                   // staging area and this engine's own NCCL group
};

}  // namespace gfshim
