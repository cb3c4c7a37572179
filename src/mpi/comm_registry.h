// Per-communicator state of the shim, cached on the user's communicator as an MPI attribute, so
// it lives exactly as long as the communicator: MPI calls the attribute's delete callback when
// the application frees the communicator (and the finalize hook for MPI_COMM_WORLD/SELF), which
// frees the private duplicate and the scratch memory.
#pragma once

#include <mpi.h>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "common/status.h"
#include "engine/policy.h"
#include "mpi/engine.h"
#include "mpi/fusion_queue.h"

namespace gfshim {

struct CommState {
  explicit CommState(const CommFacts& facts) : engine(std::make_unique<Engine>(facts)) {}
  const CommFacts& facts() const { return engine->facts(); }
  MPI_Comm privateComm = MPI_COMM_NULL;  // created collectively at the first engine call
  // Reduces the blocking calls on privateComm (a bucket of one each), once set up.
  std::unique_ptr<Engine> engine;
  // Set when an engine call failed after sending started: peers may be mid-algorithm and the
  // private communicator may hold unmatched messages, so later calls report an error.
  std::string failure;
  std::set<std::pair<uint64_t, DType>> loggedShapes;  // (bytes, dtype) already logged at INFO
  // The communicator of the fusion queue, made by prepareFusion where all ranks make it at the
  // same point (MPI_Init for MPI_COMM_WORLD, the communicator-creating hooks, the first engine
  // call); the queue starts there with progress in calls, else at the first eligible
  // MPI_Iallreduce.
  MPI_Comm fusionComm = MPI_COMM_NULL;
  std::unique_ptr<FusionQueue> fusion;
  ~CommState();
};

// Collective over `comm`: detects the topology (src/mpi/detect.h) into `facts` (whose rank and
// size are already set) and builds the torus grid; logs the result at INFO.
Status describeOnComm(MPI_Comm comm, const Settings& settings, CommFacts* facts,
                      std::optional<TorusGrid>* torusGrid,
                      std::vector<PciDevice>* nodeGpus = nullptr);

class CommRegistry {
 public:
  // Creates the attribute key; call once after MPI is initialized.
  Status start();
  // The state of `comm`, created with its facts on first sight (local calls only).
  Status stateFor(MPI_Comm comm, bool paramsAgree, CommState** state);
  // Collective over `comm`, on the first engine call: creates the private communicator for the
  // shim's traffic and sets its engine up on it (topology, torus grid, transport).
  Status ensureSetUp(MPI_Comm comm, const Settings& settings, Stats* stats, CommState& state);
  // Collective over `comm`: creates the fusion thread's communicator (MPI_Comm_split, see
  // createPrivateComm) unless it exists.
  Status prepareFusion(MPI_Comm comm, CommState& state);
  // Drops the state of the predefined communicators; call before PMPI_Finalize.
  void stop();

 private:
  int keyval_ = MPI_KEYVAL_INVALID;
};

}  // namespace gfshim
