/* Stress test of the lazy allreduce (fused MPI_Iallreduce), run under the shim.
 *
 * Each iteration posts a random burst of 1..200 Iallreduces (1 B..8 MB, several types and ops,
 * MPI_IN_PLACE or not) on two communicators, interleaved in a different random order on every
 * rank, with the application's own point-to-point requests, ineligible calls (user op, derived
 * type), blocking MPI_Allreduce / MPI_Barrier / MPI_Bcast between them, random per-rank delays,
 * MPI_Request_free on some requests, and completes them per rank in a random way (Wait in a
 * random order, Waitall, Waitany, Waitsome, Test, Testall, Testany polling). Every result is
 * compared with PMPI_Allreduce on the same inputs (PMPI bypasses the shim): bit for bit where the
 * values make the sum exact, and for random floats within a tolerance and bit-identical across
 * ranks. The burst's layout comes from a seed shared by all ranks; orders and delays from a
 * per-rank seed. A deadlock ends the run through alarm().
 *
 * usage: fusion_stress [iterations] [seed] [max burst bytes] [no-free] [--seconds S]
 * --seconds S: a bounded long run: iterations (rounds) go on until S seconds have passed (rank 0
 * decides after each round and tells the others through PMPI_Bcast), iterations then being only a
 * maximum (0: no maximum); the deadlock alarm is re-armed every round instead of covering the
 * whole run; a final "fusion_stress: summary" line gives the seed, rounds, operations, bytes and
 * mismatches summed over the ranks.
 * no-free: never MPI_Request_free (MPI 3.1 calls freeing a nonblocking collective's request
 * erroneous and Open MPI refuses it; the shim's requests allow it): for runs without fusion.
 */
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { kMaxOps = 200, kTimeLimitSeconds = 240 };

typedef struct {
  uint64_t state;
} Rng;

static uint64_t next(Rng* rng) { /* splitmix64 */
  uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static int below(Rng* rng, int n) { return (int)(next(rng) % (uint64_t)n); }

typedef enum { kEligible, kUserOp, kDerivedType, kBlockingAllreduce, kBarrier, kBcast } Kind;
typedef enum { kExactFloat, kRandomFloat, kDouble, kInt, kInt64, kByteSum } Flavour;

typedef struct {
  Kind kind;
  Flavour flavour;
  int comm;      /* 0 or 1 */
  int count;     /* elements */
  int inPlace;
  int freeIt;    /* MPI_Request_free instead of waiting */
  MPI_Op op;
  MPI_Datatype type;
  size_t elem;
  void* send;
  void* recv;
  void* expect;
  MPI_Request request;
} Call;

static MPI_Comm comms[2];
static MPI_Op userSum;
static MPI_Datatype intPair;
static int rank, size, failures, mayFree = 1;

static void onAlarm(int sig) {
  (void)sig;
  static const char msg[] = "fusion_stress: time limit reached: deadlock suspected\n";
  write(2, msg, sizeof msg - 1);
  _exit(3);
}

static void sumInts(void* in, void* inout, int* len, MPI_Datatype* type) {
  int n = *len;
  if (*type == intPair) n *= 2;
  for (int i = 0; i < n; ++i) ((int*)inout)[i] += ((int*)in)[i];
}

static void fill(Call* c, Rng* rng) {
  for (int i = 0; i < c->count; ++i) {
    const int v = below(rng, 64) - 16;
    switch (c->flavour) {
      case kExactFloat: ((float*)c->send)[i] = (float)v; break;
      case kRandomFloat: ((float*)c->send)[i] = (float)(next(rng) % 1000003) / 7919.0f; break;
      case kDouble: ((double*)c->send)[i] = v * 0.5; break;
      case kInt: ((int*)c->send)[i] = v; break;
      case kInt64: ((int64_t*)c->send)[i] = (int64_t)v << 33; break;
      /* no wrap-around: Open MPI 4.1's AVX reduction saturates unsigned char sums (ompi#8045),
       * which would make PMPI a wrong reference */
      case kByteSum: ((uint8_t*)c->send)[i] = (uint8_t)below(rng, 256 / size); break;
    }
  }
  if (c->kind == kDerivedType) {
    for (int i = 0; i < 2 * c->count; ++i) ((int*)c->send)[i] = below(rng, 100);
  }
}

/* Builds a burst from the shared generator: the same calls, per communicator, on every rank. */
static int makeBurst(Rng* shared, size_t maxBytes, Call* calls) {
  const int wanted = 1 + below(shared, kMaxOps);
  size_t total = 0;
  int n = 0;
  while (n < wanted) {
    Call* c = &calls[n];
    memset(c, 0, sizeof *c);
    c->comm = below(shared, 2);
    const int roll = below(shared, 100);
    c->kind = roll < 84 ? kEligible : roll < 88 ? kUserOp : roll < 92 ? kDerivedType
              : roll < 95 ? kBlockingAllreduce : roll < 98 ? kBarrier : kBcast;
    c->flavour = (Flavour)below(shared, 6);
    static const MPI_Op intOps[3] = {MPI_SUM, MPI_MAX, MPI_MIN};
    switch (c->flavour) {
      case kExactFloat: c->type = MPI_FLOAT; c->elem = 4; c->op = MPI_SUM; break;
      case kRandomFloat: c->type = MPI_FLOAT; c->elem = 4; c->op = MPI_SUM; break;
      case kDouble: c->type = MPI_DOUBLE; c->elem = 8; c->op = intOps[below(shared, 3)]; break;
      case kInt: c->type = MPI_INT; c->elem = 4; c->op = intOps[below(shared, 3)]; break;
      case kInt64: c->type = MPI_INT64_T; c->elem = 8; c->op = intOps[below(shared, 3)]; break;
      case kByteSum: c->type = MPI_UNSIGNED_CHAR; c->elem = 1; c->op = MPI_SUM; break;
    }
    if (c->kind == kUserOp) { c->flavour = kInt; c->type = MPI_INT; c->elem = 4; c->op = userSum; }
    if (c->kind == kDerivedType) { c->type = intPair; c->elem = 8; c->op = userSum; }
    /* log-uniform size from 1 B to 8 MB */
    const double exponent = (double)below(shared, 2301) / 100.0;
    size_t bytes = (size_t)1 << (int)exponent;
    bytes += bytes > 1 ? (size_t)below(shared, (int)(bytes / 2 + 1)) : 0;
    c->count = (int)(bytes / c->elem);
    if (c->count < 1) c->count = 1;
    if (c->kind == kBarrier) c->count = 0;
    const size_t callBytes = (size_t)c->count * c->elem;
    if (n > 0 && total + callBytes > maxBytes) break;
    total += callBytes;
    c->inPlace = below(shared, 3) == 0;
    ++n;
  }
  /* Request_free only on an eligible call that a later waited eligible call on the same
   * communicator follows: the shim completes a communicator's fused calls in order, so the freed
   * call's result can be checked once the later one is complete. */
  for (int i = 0; i < n; ++i) {
    if (calls[i].kind != kEligible || below(shared, 10) != 0 || !mayFree) continue;
    for (int j = i + 1; j < n; ++j) {
      if (calls[j].kind == kEligible && calls[j].comm == calls[i].comm && !calls[j].freeIt) {
        calls[i].freeIt = 1;
        break;
      }
    }
  }
  for (int i = n - 1; i >= 0; --i) {  /* the follower must not be freed itself */
    if (!calls[i].freeIt) continue;
    for (int j = i + 1; j < n; ++j) {
      if (calls[j].kind == kEligible && calls[j].comm == calls[i].comm) {
        calls[j].freeIt = 0;
        break;
      }
    }
  }
  return n;
}

static void prepare(Call* c, Rng* local) {
  const size_t bytes = (size_t)(c->count ? c->count : 1) * c->elem;
  c->send = malloc(bytes);
  c->recv = malloc(bytes);
  c->expect = malloc(bytes);
  if (!c->send || !c->recv || !c->expect) { fprintf(stderr, "out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 2); }
  fill(c, local);
  memset(c->recv, 0xA5, bytes);
  if (c->kind == kBcast) {
    memcpy(c->expect, c->send, bytes);
    PMPI_Bcast(c->expect, c->count * (int)c->elem, MPI_BYTE, 0, comms[c->comm]);
  } else if (c->kind != kBarrier) {
    PMPI_Allreduce(c->send, c->expect, c->count, c->type, c->op, comms[c->comm]);
  }
  if (c->inPlace) memcpy(c->recv, c->send, bytes);
}

static uint64_t fnv(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ ((const uint8_t*)data)[i]) * 1099511628211ull;
  return h;
}

static void check(Call* c, int iteration, int index) {
  if (c->kind == kBarrier) return;
  const size_t bytes = (size_t)c->count * c->elem;
  int ok = 1;
  if (c->flavour == kRandomFloat && c->kind != kBcast) {
    for (int i = 0; i < c->count && ok; ++i) {
      const float got = ((float*)c->recv)[i], want = ((float*)c->expect)[i];
      const float diff = got > want ? got - want : want - got;
      ok = diff <= 1e-5f * (want > 0 ? want : -want) + 1e-6f;
    }
    /* identical bits on every rank */
    int64_t h[2];
    h[0] = (int64_t)(fnv(c->recv, bytes) >> 1);
    h[1] = -h[0];
    PMPI_Allreduce(MPI_IN_PLACE, h, 2, MPI_INT64_T, MPI_MIN, comms[c->comm]);
    if (h[0] != -h[1]) {
      fprintf(stderr, "[%d] iteration %d call %d: results differ across ranks\n", rank, iteration, index);
      ++failures;
    }
  } else {
    ok = memcmp(c->recv, c->expect, bytes) == 0;
  }
  if (!ok && c->flavour != kRandomFloat) {
    size_t at = 0;
    while (at < bytes && ((uint8_t*)c->recv)[at] == ((uint8_t*)c->expect)[at]) ++at;
    fprintf(stderr, "[%d] first differing byte %zu of %zu: got %u want %u\n", rank, at, bytes,
            ((uint8_t*)c->recv)[at], ((uint8_t*)c->expect)[at]);
  }
  if (!ok) {
    fprintf(stderr, "[%d] iteration %d call %d: wrong result (kind %d flavour %d count %d in-place %d freed %d)\n",
            rank, iteration, index, c->kind, c->flavour, c->count, c->inPlace, c->freeIt);
    ++failures;
  }
}

/* Completes the requests in one of several ways, chosen per rank. */
static void complete(MPI_Request* requests, int n, Rng* local) {
  const int way = below(local, 7);
  int done = 0;
  int indices[kMaxOps + 2];
  static MPI_Status statuses[kMaxOps + 2];  /* not MPI_STATUSES_IGNORE: MPICH's trips gcc's
                                             * -Wstringop-overflow */
  switch (way) {
    case 0: MPI_Waitall(n, requests, statuses); break;
    case 1: {  /* Wait in a random order */
      int order[kMaxOps + 2];
      for (int i = 0; i < n; ++i) order[i] = i;
      for (int i = n - 1; i > 0; --i) { int j = below(local, i + 1), t = order[i]; order[i] = order[j]; order[j] = t; }
      for (int i = 0; i < n; ++i) MPI_Wait(&requests[order[i]], MPI_STATUS_IGNORE);
      break;
    }
    case 2:
      for (int index = 0; ; ) {
        MPI_Waitany(n, requests, &index, MPI_STATUS_IGNORE);
        if (index == MPI_UNDEFINED) break;
      }
      break;
    case 3:
      for (int outcount = 0; ; ) {
        MPI_Waitsome(n, requests, &outcount, indices, statuses);
        if (outcount == MPI_UNDEFINED) break;
      }
      break;
    case 4:  /* Test-polling, last request first */
      for (int i = n - 1; i >= 0; --i) {
        for (int flag = 0; !flag; ) MPI_Test(&requests[i], &flag, MPI_STATUS_IGNORE);
      }
      break;
    case 5:
      while (!done) MPI_Testall(n, requests, &done, statuses);
      break;
    default:
      for (;;) {
        int index = 0, flag = 0;
        MPI_Testany(n, requests, &index, &flag, MPI_STATUS_IGNORE);
        if (flag && index == MPI_UNDEFINED) break;
      }
      break;
  }
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char** argv) {
  double seconds = 0;  /* --seconds S: run rounds until S seconds have passed */
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      seconds = atof(argv[i + 1]);
      for (int j = i; j + 2 <= argc; ++j) argv[j] = argv[j + 2];
      argc -= 2;
      break;
    }
  }
  int iterations = argc > 1 ? atoi(argv[1]) : 10;
  if (seconds > 0 && iterations <= 0) iterations = 0x7fffffff;
  const uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 12345;
  const size_t maxBytes = argc > 3 ? strtoull(argv[3], NULL, 10) : (size_t)48 << 20;
  mayFree = !(argc > 4 && strcmp(argv[4], "no-free") == 0);
  signal(SIGALRM, onAlarm);
  alarm(kTimeLimitSeconds);
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_dup(MPI_COMM_WORLD, &comms[0]);
  MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &comms[1]);  /* reversed rank order */
  MPI_Op_create(sumInts, 1, &userSum);
  MPI_Type_contiguous(2, MPI_INT, &intPair);
  MPI_Type_commit(&intPair);

  Rng shared = {seed};
  Rng local = {seed * 1000003u + (uint64_t)rank + 1};
  static Call calls[kMaxOps];
  int totalCalls = 0;
  long long iallreduces = 0, iallreduceBytes = 0;
  const double started = now();
  int rounds = 0;
  for (int iteration = 0; iteration < iterations; ++iteration) {
    if (seconds > 0) {  /* every rank takes rank 0's decision, so all run the same rounds */
      int goOn = now() - started < seconds;
      PMPI_Bcast(&goOn, 1, MPI_INT, 0, MPI_COMM_WORLD);
      if (!goOn) break;
      alarm(kTimeLimitSeconds);
    }
    ++rounds;
    const int n = makeBurst(&shared, maxBytes, calls);
    for (int i = 0; i < n; ++i) prepare(&calls[i], &local);
    /* The application's own point-to-point traffic, completed together with the collectives. */
    int token = rank, received = -1;
    MPI_Request requests[kMaxOps + 2];
    int waited[kMaxOps + 2], nWait = 0;
    MPI_Irecv(&received, 1, MPI_INT, (rank + size - 1) % size, 7, MPI_COMM_WORLD, &requests[nWait]);
    waited[nWait++] = -1;
    /* Post: blocking calls keep their place (every rank reaches them in the same order);
     * between two of them the two communicators' calls are merged in a per-rank random order. */
    int next0 = 0, next1 = 0;
    int start = 0;
    while (start < n) {
      int end = start;
      while (end < n && calls[end].kind < kBlockingAllreduce) ++end;
      next0 = next1 = start;
      for (;;) {
        while (next0 < end && calls[next0].comm != 0) ++next0;
        while (next1 < end && calls[next1].comm != 1) ++next1;
        if (next0 >= end && next1 >= end) break;
        const int pick0 = next1 >= end || (next0 < end && below(&local, 2) == 0);
        const int i = pick0 ? next0++ : next1++;
        Call* c = &calls[i];
        if (below(&local, 20) == 0) usleep((useconds_t)below(&local, 500));
        MPI_Iallreduce(c->inPlace ? MPI_IN_PLACE : c->send, c->recv, c->count, c->type, c->op,
                       comms[c->comm], &c->request);
        ++iallreduces;
        iallreduceBytes += (long long)c->count * (long long)c->elem;
        if (c->freeIt) {
          MPI_Request_free(&c->request);
        } else {
          requests[nWait] = c->request;
          waited[nWait++] = i;
        }
      }
      if (end < n) {
        Call* c = &calls[end];
        if (c->kind == kBlockingAllreduce) {
          MPI_Allreduce(c->inPlace ? MPI_IN_PLACE : c->send, c->recv, c->count, c->type, c->op, comms[c->comm]);
        } else if (c->kind == kBarrier) {
          MPI_Barrier(comms[c->comm]);
        } else {
          memcpy(c->recv, c->send, (size_t)c->count * c->elem);
          MPI_Bcast(c->recv, c->count * (int)c->elem, MPI_BYTE, 0, comms[c->comm]);
        }
      }
      start = end + 1;
    }
    MPI_Send(&token, 1, MPI_INT, (rank + 1) % size, 7, MPI_COMM_WORLD);
    if (below(&local, 3) == 0) usleep((useconds_t)below(&local, 2000));
    complete(requests, nWait, &local);
    if (received != (rank + size - 1) % size) {
      fprintf(stderr, "[%d] iteration %d: point-to-point message lost\n", rank, iteration);
      ++failures;
    }
    for (int i = 0; i < nWait; ++i) {
      if (requests[i] != MPI_REQUEST_NULL) {
        fprintf(stderr, "[%d] iteration %d: request %d not freed by its completion\n", rank, iteration, waited[i]);
        ++failures;
      }
    }
    for (int i = 0; i < n; ++i) {
      check(&calls[i], iteration, i);
      free(calls[i].send);
      free(calls[i].recv);
      free(calls[i].expect);
    }
    totalCalls += n;
  }
  int allFailures = 0;
  PMPI_Allreduce(&failures, &allFailures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("fusion_stress: %d iterations, %d calls per rank, seed %llu: %s (%d failures)\n",
           rounds, totalCalls, (unsigned long long)seed, allFailures ? "FAILED" : "passed",
           allFailures);
  }
  if (seconds > 0) {
    long long mine[3] = {totalCalls, iallreduces, iallreduceBytes}, all[3] = {0, 0, 0};
    PMPI_Reduce(mine, all, 3, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      printf("fusion_stress: summary seed %llu ranks %d rounds %d elapsed %.1f s: calls %lld, "
             "MPI_Iallreduce operations %lld (%lld bytes), summed over ranks; mismatches %d\n",
             (unsigned long long)seed, size, rounds, now() - started, all[0], all[1], all[2],
             allFailures);
    }
  }
  MPI_Type_free(&intPair);
  MPI_Op_free(&userSum);
  MPI_Comm_free(&comms[0]);
  MPI_Comm_free(&comms[1]);
  MPI_Finalize();
  return allFailures ? 1 : 0;
}
