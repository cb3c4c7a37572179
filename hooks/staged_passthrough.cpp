#include "hooks/staged_passthrough.h"

#include <mpi.h>

#include <cstring>
#include <vector>

#include "gpu/cuda_driver.h"

namespace gfshim::hooks {

int stagedPassthrough(Runtime& rt, const CallInfo& call, const void* send, void* recv,
                      const void* inPlaceMarker, PmpiCall pmpi, const void* context, bool* handled,
                      Status* copyError) {
  *handled = false;
  *copyError = Status::ok();
  const CudaDriver* driver = CudaDriver::inProcess();
  const void* source = call.inPlace ? recv : send;
  const BufferPlacements at = CudaDriver::placementsOf(driver, source, recv);
  if (!at.anyDevice()) return MPI_SUCCESS;
  const size_t bytes = call.bytes();
  if (!rt.settings.gpuStaging) {
    rt.stats.recordGpu(kGpuToMpi, bytes);
    return MPI_SUCCESS;
  }
  *handled = true;
  thread_local std::vector<std::byte> sendCopy, recvCopy;
  const bool sendOnDevice = at.send.kind == MemKind::kDevice;
  const bool recvOnDevice = at.recv.kind == MemKind::kDevice;
  if (recvOnDevice) recvCopy.resize(bytes);
  void* hostRecv = recvOnDevice ? recvCopy.data() : recv;
  const void* hostSend = send;
  Status status = Status::ok();
  if (call.inPlace) {
    hostSend = inPlaceMarker;
    if (recvOnDevice) status = driver->copyToHost(at.recv.context, hostRecv, recv, bytes);
    if (!status.isOk()) std::memset(hostRecv, 0, bytes);
  } else if (sendOnDevice) {
    sendCopy.resize(bytes);
    hostSend = sendCopy.data();
    status = driver->copyToHost(at.send.context, sendCopy.data(), send, bytes);
    if (!status.isOk()) std::memset(sendCopy.data(), 0, bytes);
  }
  // The MPI call runs even after a failed copy (with zeros): the peers are making it too.
  const int rc = pmpi(context, hostSend, hostRecv);
  if (status.isOk() && rc == MPI_SUCCESS && recvOnDevice) {
    status = driver->copyToDevice(at.recv.context, recv, hostRecv, bytes);
  }
  if (!status.isOk()) {
    *copyError = Status::error(StatusCode::kTransportError,
                               "staging a GPU buffer around the MPI call: " + status.message(),
                               MPI_ERR_OTHER);
  }
  rt.stats.recordGpu(kGpuStagedMpi, bytes);
  return rc;
}

}  // namespace gfshim::hooks
