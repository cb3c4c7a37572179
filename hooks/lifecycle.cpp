// MPI_Init / MPI_Init_thread / MPI_Finalize hooks, and the detection of a foreign MPI flavour.
//
// Lifecycle choice: the init hooks (rather than a lazy first-call setup) because setup includes
// one agreement allreduce on MPI_COMM_WORLD, which must happen at the same point on every rank:
// MPI_Init is that point, whatever collectives the application makes later. Teardown is the
// MPI_Finalize hook, which still has a working MPI for the statistics reduction; per-communicator
// state is torn down by attribute delete callbacks (comm_registry.h).
//
// Parameter agreement: plan-relevant parameters are process-wide, so agreeing them once on
// MPI_COMM_WORLD covers every communicator derived from it (communicators that reach into other
// worlds are passed through, see CommFacts::spansWorlds). Agreeing per communicator at its first
// eligible call could not work: a rank whose GFSHIM_MIN_BYTES differs would not even enter the
// shim for that call, and the agreement collective would hang.
#include <dlfcn.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "common/log.h"
#include "gpu/cuda_driver.h"
#include "hooks/hook_api.h"
#include "hooks/next_mpi.h"
#include "hooks/runtime.h"
#include "mpi/detect.h"
#include "mpi/stall_inspector.h"
#include "version.h"

namespace gfshim::hooks {

namespace detail {
__thread int gReentryDepth GFSHIM_STATIC_TLS = 0;
Runtime* const gRuntime = new Runtime();  // never destroyed: hooks may run during exit
std::atomic<int> gFlavourCheck{kUnchecked};
}  // namespace detail

void* detail::findNextDefinition(const char* name) noexcept { return dlsym(RTLD_NEXT, name); }

namespace {

// The application's MPI_Init*, MPI_Finalize and MPI_Query_thread reach the next definition (a PMPI
// tool preloaded after the shim sees them; see next_mpi.h).
GFSHIM_NEXT_MPI(Init);
GFSHIM_NEXT_MPI(Init_thread);
GFSHIM_NEXT_MPI(Finalize);
GFSHIM_NEXT_MPI(Query_thread);

// The unsupported order: another object defines the hooked MPI_* functions ahead of libgfshim.so
// (it comes earlier in LD_PRELOAD, or the program itself is linked to a PMPI tool). Its wrappers
// then call PMPI_* directly and the shim never sees those calls, not even MPI_Init, so this check
// cannot wait for the init hook: it runs as the shim is loaded, when every preloaded library and
// the program are already mapped (a library dlopened later cannot be ahead of a preloaded one).
// dlsym(RTLD_DEFAULT) returns the first definition in search order; dladdr names its object.
// A non-PIE program that takes a function's address holds a PLT stub, not a definition: dladdr
// finds no symbol of that name there, so only real definitions count.
__attribute__((constructor)) void warnIfAnotherToolComesFirst() {
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&warnIfAnotherToolComesFirst), &self) == 0) return;
  static const char* const kHooked[] = {"MPI_Init", "MPI_Init_thread", "MPI_Finalize",
                                        "MPI_Allreduce", "MPI_Iallreduce"};
  std::string owner;
  std::string shadowed;
  for (const char* name : kHooked) {
    void* first = dlsym(RTLD_DEFAULT, name);
    Dl_info info{};
    if (first == nullptr || dladdr(first, &info) == 0 || info.dli_fbase == self.dli_fbase) continue;
    if (info.dli_sname == nullptr || std::strstr(info.dli_sname, name) == nullptr) continue;
    if (owner.empty()) {
      owner = info.dli_fname != nullptr && info.dli_fname[0] != '\0' ? info.dli_fname
                                                                     : "the program itself";
    }
    shadowed += shadowed.empty() ? name : std::string(", ") + name;
  }
  if (shadowed.empty()) return;
  GFSHIM_WARN(kInit,
              "%s defines %s ahead of libgfshim.so: its wrappers call PMPI_* directly, so "
              "those calls bypass the shim and every allreduce runs natively. Put libgfshim.so "
              "first in LD_PRELOAD (LD_PRELOAD=%s:%s)",
              owner.c_str(), shadowed.c_str(), self.dli_fname, owner.c_str());
}

// GFSHIM_STRICT's abort. The launchers (Hydra, mpirun) end the job at the first MPI_Abort and may
// drop what is still in the ranks' output pipes, which would lose the reason: the rank waits half
// a second for them to forward it. No barrier: GFSHIM_STRICT is per rank, so not every rank need
// be aborting.
void abortWithTheReasonForwarded() {
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  PMPI_Abort(MPI_COMM_WORLD, 1);
}

#if defined(GFSHIM_SMPI)
// SimGrid SMPI (cmake/smpi.cmake): linked into the simulated program, never preloaded. Its
// simulated ranks cannot be served by a real thread: progress is in calls and the stall watchdog
// (a thread, on wall-clock time that says nothing of simulated time) is off.
constexpr const char* kBuiltFor = "SimGrid SMPI";
constexpr bool kThreadsMayRun = false;
bool isBuiltForFlavour(const char* version) { return std::strncmp(version, "SMPI", 4) == 0; }
#elif defined(OPEN_MPI)
constexpr const char* kBuiltFor = "Open MPI";
constexpr bool kThreadsMayRun = true;
bool isBuiltForFlavour(const char* version) { return std::strncmp(version, "Open MPI", 8) == 0; }
#else
constexpr const char* kBuiltFor = "MPICH";
constexpr bool kThreadsMayRun = true;
// MPICH and its ABI-compatible derivatives.
bool isBuiltForFlavour(const char* version) {
  return std::strstr(version, "MPICH") != nullptr || std::strstr(version, "MVAPICH") != nullptr ||
         std::strstr(version, "Intel(R) MPI") != nullptr;
}
#endif

bool detectForeignMpi() {
  // Sized for any flavour, not by this build's MPI_MAX_LIBRARY_VERSION_STRING: Open MPI's is 256,
  // MPICH's 8192, and a foreign MPI writes up to its own limit.
  static char version[65536];
  int length = 0;
  PMPI_Get_library_version(version, &length);
  if (isBuiltForFlavour(version)) return false;
  const char* newline = std::strchr(version, '\n');
  const std::string firstLine(
      version, newline ? static_cast<size_t>(newline - version) : std::strlen(version));
  std::fprintf(
      stderr,
      "GFSHIM WARN INIT: this libgfshim.so was built for %s, but the program runs on '%s'. "
      "Every MPI call passes straight through; the shim does nothing. Preload the "
      "libgfshim.so built for this MPI (cmake -DGFSHIM_MPI=%s).\n",
      kBuiltFor, firstLine.c_str(), std::strcmp(kBuiltFor, "MPICH") == 0 ? "openmpi" : "mpich");
  return true;
}

// Stand-in for a rank's list of parameter problems: 0 when it has none.
int64_t diagnosticsHash(const Config& config) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a 64
  for (const std::string& problem : config.diagnostics()) {
    for (unsigned char c : problem + "\n") {
      hash ^= c;
      hash *= 1099511628211ull;
    }
  }
  return config.diagnostics().empty() ? 0 : static_cast<int64_t>(hash >> 1) | 1;
}

// Agrees, over MPI_COMM_WORLD, whether every rank has the same plan-relevant parameters and the
// same parameter problems, whether any rank wants the statistics report, and whether every rank
// could set up, whether every rank has MPI_THREAD_MULTIPLE for the fusion threads, whether
// every rank resolved progress in calls, whether some rank had the CUDA driver loaded before
// MPI_Init (Runtime::cudaDriverBeforeInit), and whether
// some rank would run a progress thread chosen by GFSHIM_PROGRESS=auto on an oversubscribed node:
// one allreduce of MIN over [h, -h, d, -d, -stats, -failed, -noThreads, -notCalls, -driver,
// -crowdedThread]. Rank 0 has
// already printed its own problems; a rank whose problems or parameters differ from rank 0's prints
// its own, so a mistake on one rank is never silent and the common case prints once. Returns
// whether the shim may be active (on every rank alike).
bool agreeAcrossRanks(Runtime& rt, bool setUp) {
  const int64_t plan = rt.config.planHash();
  const int64_t problems = diagnosticsHash(rt.config);
  // A progress thread per rank where ranks outnumber CPUs takes CPU time from the ranks that move
  // the data: measured with MPICH, 4 ranks on 2 cores, the fused path through the threads was
  // 1.2-2.8x slower than MPICH's own from 256K on (ResNet-50's 161 gradients 2.1-2.8x). Only
  // auto's choice gives way; GFSHIM_PROGRESS=thread is the user's.
  const bool crowdedThread = rt.settings.fusion && !rt.settings.progressInCalls &&
                             rt.settings.progressChoice == ProgressChoice::kAuto &&
                             worldNodeOversubscribed(rt.settings);
  int64_t local[10] = {plan,
                      -plan,
                      problems,
                      -problems,
                      rt.settings.stats ? -1 : 0,
                      setUp ? 0 : -1,
                      rt.threadMultiple ? 0 : -1,
                      rt.settings.progressInCalls ? 0 : -1,
                      rt.cudaDriverBeforeInit ? -1 : 0,
                      crowdedThread ? -1 : 0};
  int64_t agreed[10] = {};
  PMPI_Allreduce(local, agreed, 10, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  rt.paramsAgree = agreed[0] == -agreed[1];
  const bool problemsAgree = agreed[2] == -agreed[3];
  const bool anyProblems = agreed[2] != 0 || agreed[3] != 0;
  rt.statsWanted = agreed[4] != 0;
  const bool allSetUp = agreed[5] == 0;
  // Progress in calls only where every rank resolved it (GFSHIM_PROGRESS=auto resolves it from
  // the MPI each rank loaded); otherwise threads, which need MPI_THREAD_MULTIPLE everywhere.
  rt.settings.progressInCalls = rt.settings.fusion && agreed[7] == 0;
  // Where some rank had the CUDA driver, the queue stages device buffers, and the reproducible
  // mode takes every floating-point MPI_Iallreduce: both keep the threads.
  const bool noDriverAnywhere = agreed[8] == 0;
  rt.settings.fusionOversubscribed = rt.settings.fusion && !rt.settings.progressInCalls &&
                                     agreed[9] != 0 && noDriverAnywhere &&
                                     !rt.settings.reproducible;
  rt.settings.fusionAvailable = rt.settings.fusion && !rt.settings.fusionOversubscribed &&
                                (rt.settings.progressInCalls || agreed[6] == 0);
  // Small calls go to the MPI's own MPI_Iallreduce only where no rank had the CUDA driver loaded
  // when it called MPI_Init: whether a buffer is device memory is a fact of each rank, and a rank
  // whose device buffer the fusion queue would stage must not queue a call its peers hand to the
  // MPI. (A program that loads CUDA later and passes device memory to a small MPI_Iallreduce gets
  // what its MPI does with it, with one WARN, as without the shim.) The driver the MPI loads
  // during MPI_Init does not count: on a GPU node Debian's MPICH did (through hwloc's plugins),
  // and counting it sent every small MPI_Iallreduce of a CPU-only job through fusion, 5-12x
  // slower than MPICH's own (bench/RESULTS.md, the 16-core sweep).
#if defined(OPEN_MPI)
  rt.settings.nativeIallreduceBesideFusion = rt.settings.progressInCalls && noDriverAnywhere;
#else
  rt.settings.nativeIallreduceBesideFusion = noDriverAnywhere;
#endif
  if (rt.settings.fusionOversubscribed && rt.worldRank == 0) {
    GFSHIM_INFO(kInit,
                "MPI_Iallreduce passes through: a node runs more ranks than it has CPUs, where a "
                "fusion thread per rank (GFSHIM_PROGRESS=auto's choice with this MPI) would slow "
                "the ranks down; GFSHIM_PROGRESS=thread keeps the threads");
  } else if (rt.settings.fusion && !rt.settings.fusionAvailable && rt.worldRank == 0) {
    GFSHIM_INFO(kInit,
                "MPI_Iallreduce passes through: the fusion thread needs MPI_THREAD_MULTIPLE, which "
                "the MPI did not provide on every rank");
  }

  if (rt.worldRank == 0) {
    for (const std::string& problem : lossySettingProblems(rt.settings)) {
      GFSHIM_WARN(kConfig, "%s", problem.c_str());
    }
    const std::string momentum = momentumNote(rt.settings);
    if (!momentum.empty()) GFSHIM_INFO(kInit, "%s", momentum.c_str());
  }

  if (!rt.paramsAgree || !problemsAgree) {
    int64_t root[2] = {plan, problems};
    PMPI_Bcast(root, 2, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (rt.worldRank != 0 && problems != root[1]) {
      for (const std::string& problem : rt.config.diagnostics()) {
        GFSHIM_WARN(kConfig, "%s", problem.c_str());
      }
    }
    if (rt.worldRank != 0 && plan != root[0]) {
      GFSHIM_WARN(kConfig, "this rank's plan-relevant GFSHIM parameters differ from rank 0's: %s",
                  rt.config.planSummary().c_str());
    }
  }
  if (rt.worldRank == 0 && !rt.paramsAgree) {
    GFSHIM_WARN(kConfig,
                "plan-relevant GFSHIM parameters differ across ranks, so every allreduce passes "
                "through to the MPI; rank 0 has: %s",
                rt.config.planSummary().c_str());
  }
  if (rt.settings.strict && (anyProblems || !rt.paramsAgree)) {
    GFSHIM_WARN(kConfig,
                "GFSHIM_STRICT=1: aborting the job because of the parameter problems reported");
    abortWithTheReasonForwarded();
  }
  if (!allSetUp && rt.worldRank == 0) {
    GFSHIM_WARN(kInit, "the shim could not be set up on every rank; every call passes through");
  }
  return allSetUp;
}

// Open MPI's progress hook (libopen-pal, loaded with libmpi): a function called inside every
// progress call of the MPI, on whatever the application waits for. Internal API of Open MPI
// (present in 4.x); looked up, never linked, so another MPI simply has none.
using ProgressCallback = int (*)();
using ProgressRegistration = int (*)(ProgressCallback);

ProgressRegistration progressHook(const char* name) {
  return reinterpret_cast<ProgressRegistration>(dlsym(RTLD_DEFAULT, name));
}

int progressFusedCalls() {
  FusionQueue::progressAll();
  return 0;
}

// Reads the parameters before PMPI_Init: whether the fusion threads will run decides the thread
// level the shim asks the MPI for. Also notes whether the program loaded the CUDA driver itself.
// GFSHIM_PROGRESS=auto resolves to calls where the MPI has a progress hook, else to a thread; the
// ranks agree later. An application at MPI_THREAD_MULTIPLE may resume a queue's task from several
// threads, one at a time (FusionQueue::progress); the engine's thread-locals are read afresh at
// every use (common/task.h), so that is safe.
void loadConfig() {
  Runtime& rt = runtime();
  rt.cudaDriverBeforeInit = CudaDriver::inProcess() != nullptr;
  rt.config = Config::load(configInputsFromProcess());
  rt.settings = settingsFrom(rt.config);
  setLogFilter(rt.settings.log);
  const bool hook = progressHook("opal_progress_register") != nullptr;
  switch (rt.settings.progressChoice) {
    case ProgressChoice::kCalls:
      rt.settings.progressInCalls = true;
      break;
    case ProgressChoice::kThread:
      rt.settings.progressInCalls = !kThreadsMayRun;
      break;
    case ProgressChoice::kAuto:
      rt.settings.progressInCalls = hook || !kThreadsMayRun;
      break;
  }
  rt.settings.progressInCalls = rt.settings.progressInCalls && rt.settings.fusion;
}

// Calls mode: the MPI's progress loop drives the fused calls. Without a hook (MPICH) only the
// shim's own hooks do (Wait*, Test*, the allreduces), which docs/calls.md warns about.
void registerProgressHook(Runtime& rt) {
  if (!rt.settings.progressInCalls) return;
  const ProgressRegistration hook = progressHook("opal_progress_register");
  if (hook != nullptr && hook(progressFusedCalls) == 0) {
    rt.progressHookRegistered = true;
    return;
  }
  if (rt.worldRank == 0 && !kThreadsMayRun &&
      rt.settings.progressChoice == ProgressChoice::kThread) {
    GFSHIM_WARN(kInit,
                "GFSHIM_PROGRESS=thread: a thread cannot make simulated MPI calls under %s; "
                "fused MPI_Iallreduce calls progress in the application's MPI calls instead",
                kBuiltFor);
  } else if (rt.worldRank == 0 && kThreadsMayRun) {
    GFSHIM_WARN(kInit,
                "GFSHIM_PROGRESS=calls: this MPI has no progress hook, so fused MPI_Iallreduce "
                "calls progress only inside MPI_Wait*/MPI_Test* and the allreduce calls; a rank "
                "blocked in another MPI call (MPI_Barrier, MPI_Recv) while a peer waits for a "
                "fused call hangs. GFSHIM_PROGRESS=thread (auto's choice here) has no such limit");
  }
}

void unregisterProgressHook(Runtime& rt) {
  if (!rt.progressHookRegistered) return;
  const ProgressRegistration unhook = progressHook("opal_progress_unregister");
  if (unhook != nullptr) unhook(progressFusedCalls);
  rt.progressHookRegistered = false;
}

bool wantsProgressThreads() {
  const Settings& settings = runtime().settings;
  return settings.enable && settings.fusion && !settings.progressInCalls;
}

void startRuntime() {
  Runtime& rt = runtime();
  PMPI_Comm_rank(MPI_COMM_WORLD, &rt.worldRank);
  PMPI_Comm_size(MPI_COMM_WORLD, &rt.worldSize);
  setLogRank(rt.worldRank);
  if (rt.worldRank == 0) {
    for (const std::string& problem : rt.config.diagnostics()) {
      GFSHIM_WARN(kConfig, "%s", problem.c_str());
    }
  }
  const Status started = rt.registry.start();
  if (!started.isOk()) {
    GFSHIM_WARN(kInit, "cannot set up communicator state: %s", started.message().c_str());
  }
  // Before the agreement, which needs to know whether this rank's node is oversubscribed.
  const Status node = learnWorldNode();
  if (!node.isOk()) GFSHIM_WARN(kInit, "cannot learn this rank's node: %s", node.message().c_str());
  if (!agreeAcrossRanks(rt, started.isOk())) return;
  if (kThreadsMayRun) StallInspector::configure(rt.settings.stallWarnSec, rt.threadMultiple);
  if (!rt.settings.timeline.empty())
    rt.timeline = Timeline::open(rt.settings.timeline, rt.worldRank);
  if (rt.settings.fusionAvailable) {
    registerProgressHook(rt);
    prepareFusionOn(rt, MPI_COMM_WORLD);
  }
  if (rt.worldRank == 0) {
    GFSHIM_INFO(kInit, "libgfshim %s active on %d ranks (built for %s); %s", kGfshimVersion,
                rt.worldSize, kBuiltFor, rt.config.planSummary().c_str());
  }
  rt.active.store(true, std::memory_order_release);
}

void reportStats(Runtime& rt) {
  const StatsCounters local = rt.stats.snapshot();
  StatsCounters summed;
  constexpr int kN = kReasonCount;
  PMPI_Reduce(local.calls, summed.calls, kN, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  PMPI_Reduce(local.bytes, summed.bytes, kN, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  PMPI_Reduce(local.busBytes, summed.busBytes, kN, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  PMPI_Reduce(local.nanos, summed.nanos, kN, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
  PMPI_Reduce(local.fusion, summed.fusion, kFusionCounterCount, MPI_UINT64_T, MPI_SUM, 0,
              MPI_COMM_WORLD);
  // Shadow maxima too: identical on every rank, so their sum is `ranks` times the value.
  PMPI_Reduce(local.lossy, summed.lossy, kLossyModeCount * kLossyCounterCount, MPI_UINT64_T,
              MPI_SUM, 0, MPI_COMM_WORLD);
  PMPI_Reduce(local.gpu, summed.gpu, kGpuPathCount * 2, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rt.worldRank == 0) {
    std::string report = formatStatsReport(summed, rt.worldSize);
    const std::string momentum = momentumNote(rt.settings);
    if (!momentum.empty()) report += "GFSHIM STATS lossy " + momentum + "\n";
    std::fwrite(report.data(), 1, report.size(), stderr);
    std::fflush(stderr);
  }
}

int afterInit(int rc) {
  if (rc != MPI_SUCCESS) return rc;
  ReentryGuard guard;
  try {
    startRuntime();
  } catch (...) {
    GFSHIM_WARN(kInit, "setup failed; the shim passes every call through");
  }
  return rc;
}

}  // namespace

bool detail::checkFlavourOnce() noexcept {
  static const bool foreign = detectForeignMpi();  // thread-safe, runs once
  gFlavourCheck.store(foreign ? kForeignMpi : kBuiltForThisMpi, std::memory_order_relaxed);
  return foreign;
}

// With fusion progressed by threads, both init hooks ask PMPI for MPI_THREAD_MULTIPLE and remember
// the level the application would have got (MPI_Init: MPI_THREAD_SINGLE, as both MPIs give;
// MPI_Init_thread: what it required, capped by what the MPI provides), which the MPI_Query_thread
// hook reports.
int initHook(int* argc, char*** argv) noexcept {
  if (foreignMpi()) return nextInit(argc, argv);
  loadConfig();
  if (!wantsProgressThreads()) return afterInit(nextInit(argc, argv));
  int provided = MPI_THREAD_SINGLE;
  const int rc = nextInit_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  runtime().threadMultiple = provided == MPI_THREAD_MULTIPLE;
  runtime().applicationThreadLevel = MPI_THREAD_SINGLE;
  return afterInit(rc);
}

int initThreadHook(int* argc, char*** argv, int required, int* provided) noexcept {
  if (foreignMpi()) return nextInit_thread(argc, argv, required, provided);
  loadConfig();
  if (!wantsProgressThreads() || required == MPI_THREAD_MULTIPLE) {
    const int rc = nextInit_thread(argc, argv, required, provided);
    runtime().threadMultiple = *provided == MPI_THREAD_MULTIPLE;
    return afterInit(rc);
  }
  int got = MPI_THREAD_SINGLE;
  const int rc = nextInit_thread(argc, argv, MPI_THREAD_MULTIPLE, &got);
  runtime().threadMultiple = got == MPI_THREAD_MULTIPLE;
  *provided = got < required ? got : required;
  runtime().applicationThreadLevel = *provided;
  return afterInit(rc);
}

int queryThreadHook(int* provided) noexcept {
  const int level = runtime().applicationThreadLevel;
  if (level < 0) return nextQuery_thread(provided);
  *provided = level;
  return MPI_SUCCESS;
}

int finalizeHook() noexcept {
  Runtime& rt = runtime();
  if (rt.active.exchange(false)) {
    ReentryGuard guard;
    try {
      FusionQueue::stopAll();  // queued Iallreduces complete first, and count in the report
      unregisterProgressHook(rt);
      StallInspector::stop();
      if (rt.statsWanted) reportStats(rt);
      rt.registry.stop();
      rt.timeline.reset();
    } catch (...) {
      GFSHIM_WARN(kStats, "teardown failed");
    }
  }
  return nextFinalize();
}

}  // namespace gfshim::hooks
