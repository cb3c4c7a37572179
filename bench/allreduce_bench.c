/*
 * allreduce_bench.c - nccl-tests style MPI_Allreduce benchmark.
 *
 * A plain C11 MPI program: it links only MPI and knows nothing about
 * libgfshim.  Preload a shim (LD_PRELOAD) to measure it; see
 * bench/side_by_side.sh.
 *
 * Usage:
 *   mpirun -np N allreduce_bench [options]
 *     -b BYTES   smallest message size (default 8)          K/M/G suffixes
 *     -e BYTES   largest message size (default 256M)        are powers of 1024
 *     -f FACTOR  multiplier between sizes (default 2, must be > 1)
 *     -d TYPE    float | double | int32 | int64 (default float)
 *     -o OP      sum | max | min | prod (default sum)
 *     -n ITERS   calls per timed round (default: auto, see below)
 *     -w WARMUP  untimed warm-up calls per size (default 2)
 *     -r ROUNDS  timed rounds per size (default 5)
 *     -i         in-place (MPI_IN_PLACE)
 *     -c         check mode: verify results, print #wrong, exit 1 on error
 *     -p         compare mode: time MPI_Allreduce (shim, if preloaded) and
 *                PMPI_Allreduce (always the real MPI) side by side
 *     -h         help
 *
 * Timing methodology:
 *   - Every size is preceded by WARMUP untimed calls of each measured
 *     function.  Without -n, rank 0 times those warm-up calls (the first one
 *     excluded when there are two or more), picks the number of calls per
 *     round so that one round takes about TARGET_ROUND_S (clamped to
 *     1..MAX_AUTO_ITERS) and broadcasts it, so all ranks agree.
 *   - A round is: barrier, ITERS back-to-back calls, stop the clock.  A
 *     rank's round time is its elapsed time / ITERS; the round's time is the
 *     MAX over ranks (the collective is done when the slowest rank is done).
 *   - The reported time is the MEDIAN over ROUNDS rounds, which is robust
 *     against the odd round disturbed by a noisy neighbour.
 *   - In compare mode (-p) the two functions are timed in alternating rounds
 *     in the same processes on the same buffers; which one goes first flips
 *     every round, so slow drifts of the machine hit both equally.
 *   - All of the benchmark's own collectives (barriers, the max-reduction of
 *     round times, broadcasts, the check bookkeeping) use PMPI_* entry points
 *     so they bypass an interposed shim and do not show up in its statistics.
 *     MPI_Init/MPI_Finalize stay un-prefixed so a shim can hook them.
 *
 * Bandwidth (nccl-tests definitions):
 *   algbw = bytes / time
 *   busbw = algbw * 2(p-1)/p  (the per-rank link traffic of an optimal ring
 *           allreduce).  For p == 1 this is 0 on purpose: no data crosses
 *           any link, so there is no bus bandwidth to report.
 *
 * Check mode (-c): send buffers hold small integers that depend on the rank
 * and on the element index (through an index period of CHECK_PERIOD, a prime,
 * so misplaced chunks are caught), chosen such that every sum/product is
 * exactly representable in every type, so a correct result is bit-exact
 * whatever the reduction order.  After the timed rounds of each size the
 * buffers are refilled (and the receive buffer poisoned), MPI_Allreduce is
 * called once more and every element is compared with the expected value;
 * a guard zone just past the result is checked for overruns, and rank 0's
 * result bytes are broadcast and compared with every rank's.  In compare
 * mode PMPI_Allreduce is verified the same way.  #wrong is the largest number
 * of wrong elements (including overwritten guard elements) on any rank, for
 * -p of the MPI_Allreduce/shim path; rank divergence and native failures are
 * reported on "# ERROR" lines.  Any failure makes every rank exit with 1.
 * (The timed calls themselves are not verified: with -i their buffers are
 * reduced over and over and the values grow, e.g. to inf for float sums.)
 */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TARGET_ROUND_S 0.010 /* auto iteration count aims at 10 ms/round */
#define MAX_AUTO_ITERS 1000
#define CHECK_PERIOD 1021 /* prime index period of the check pattern */
#define GUARD_BYTES 64    /* overrun guard checked past the result */
#define POISON_BYTE 0xA5
#define BCAST_CHUNK (4u << 20) /* rank-0 result comparison chunk size */

typedef int (*allreduce_fn)(const void*, void*, int, MPI_Datatype, MPI_Op, MPI_Comm);

typedef enum { T_FLOAT, T_DOUBLE, T_INT32, T_INT64 } type_id;
typedef enum { O_SUM, O_MAX, O_MIN, O_PROD } op_id;

typedef struct {
  const char* name;
  size_t size;
} type_info;

static const type_info TYPES[] = {
    [T_FLOAT] = {"float", sizeof(float)},
    [T_DOUBLE] = {"double", sizeof(double)},
    [T_INT32] = {"int32", sizeof(int32_t)},
    [T_INT64] = {"int64", sizeof(int64_t)},
};
static const char* const OPS[] = {
    [O_SUM] = "sum", [O_MAX] = "max", [O_MIN] = "min", [O_PROD] = "prod"};

typedef struct {
  size_t min_bytes, max_bytes;
  double factor;
  type_id type;
  op_id op;
  int iters; /* 0 = auto */
  int warmup;
  int rounds;
  int in_place;
  int check;
  int compare;
} options;

typedef struct {
  int rank, nranks;
  MPI_Datatype dtype;
  MPI_Op mop;
  size_t tsize;
  void *sendbuf, *recvbuf;
  size_t buf_bytes;       /* allocated bytes of each buffer */
  double* expected;       /* CHECK_PERIOD expected values (check mode) */
  unsigned char* scratch; /* BCAST_CHUNK bytes (check mode) */
  double* round_times;    /* 2 x rounds entries: per-round times */
} bench_ctx;

typedef struct {
  double time_s; /* median over rounds of the max over ranks */
} timing;

/* ------------------------------------------------------------------ */
/* argument parsing                                                    */
/* ------------------------------------------------------------------ */

static void usage(FILE* f, const char* prog) {
  fprintf(f,
          "usage: %s [-b BYTES] [-e BYTES] [-f FACTOR] [-d float|double|int32|int64]\n"
          "          [-o sum|max|min|prod] [-n ITERS] [-w WARMUP] [-r ROUNDS]\n"
          "          [-i] [-c] [-p] [-h]\n"
          "  -b/-e  min/max size in bytes (suffix K/M/G = 1024^1..3; default 8..256M)\n"
          "  -f     size multiplier (default 2)\n"
          "  -n     calls per timed round (default auto: ~10 ms/round, 1..%d)\n"
          "  -w     warm-up calls per size (default 2)   -r  timed rounds (default 5)\n"
          "  -i     MPI_IN_PLACE    -c  verify results (exit 1 on error)\n"
          "  -p     compare MPI_Allreduce (shim) with PMPI_Allreduce (native)\n",
          prog, MAX_AUTO_ITERS);
}

static int parse_bytes(const char* s, size_t* out) {
  char* end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || s[0] == '-') return -1;
  unsigned shift = 0;
  switch (toupper((unsigned char)*end)) {
    case '\0':
      break;
    case 'K':
      shift = 10;
      end++;
      break;
    case 'M':
      shift = 20;
      end++;
      break;
    case 'G':
      shift = 30;
      end++;
      break;
    default:
      return -1;
  }
  if (*end != '\0' || v > (SIZE_MAX >> shift)) return -1;
  *out = (size_t)(v << shift);
  return 0;
}

static int parse_int(const char* s, int min, int* out) {
  char* end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end != '\0' || v < min || v > INT_MAX) return -1;
  *out = (int)v;
  return 0;
}

static int lookup_type(const char* s) {
  for (int i = 0; i < (int)(sizeof TYPES / sizeof TYPES[0]); i++)
    if (strcmp(s, TYPES[i].name) == 0) return i;
  return -1;
}

static int lookup_op(const char* s) {
  for (int i = 0; i < (int)(sizeof OPS / sizeof OPS[0]); i++)
    if (strcmp(s, OPS[i]) == 0) return i;
  return -1;
}

/* Applies one option; returns 0, or -1 if its argument is invalid. */
static int apply_option(int c, const char* arg, options* o) {
  char* end;
  int idx;
  switch (c) {
    case 'b':
      return parse_bytes(arg, &o->min_bytes);
    case 'e':
      return parse_bytes(arg, &o->max_bytes);
    case 'f':
      o->factor = strtod(arg, &end);
      return (end != arg && *end == '\0' && o->factor > 1.0) ? 0 : -1;
    case 'd':
      if ((idx = lookup_type(arg)) < 0) return -1;
      o->type = (type_id)idx;
      return 0;
    case 'o':
      if ((idx = lookup_op(arg)) < 0) return -1;
      o->op = (op_id)idx;
      return 0;
    case 'n':
      return parse_int(arg, 1, &o->iters);
    case 'w':
      return parse_int(arg, 0, &o->warmup);
    case 'r':
      return parse_int(arg, 1, &o->rounds);
    case 'i':
      o->in_place = 1;
      return 0;
    case 'c':
      o->check = 1;
      return 0;
    case 'p':
      o->compare = 1;
      return 0;
    default:
      return -1;
  }
}

/*
 * Every rank parses the same argv, so all ranks take the same decision.
 * Returns 0 = run, 1 = exit 0 (help), 2 = exit 2 (bad usage); only rank 0
 * prints.
 */
static int parse_options(int argc, char** argv, int rank, options* o) {
  *o = (options){.min_bytes = 8,
                 .max_bytes = (size_t)256 << 20,
                 .factor = 2.0,
                 .type = T_FLOAT,
                 .op = O_SUM,
                 .iters = 0,
                 .warmup = 2,
                 .rounds = 5};
  char err[256] = "";
  int c, help = 0;
  opterr = 0;
  while ((c = getopt(argc, argv, "b:e:f:d:o:n:w:r:icph")) != -1) {
    if (c == 'h')
      help = 1;
    else if (c == '?' || c == ':')
      snprintf(err, sizeof err, "unknown option or missing argument: -%c", optopt);
    else if (apply_option(c, optarg, o) != 0 && !err[0])
      snprintf(err, sizeof err, "invalid argument for -%c: '%s'", c, optarg);
  }
  if (!err[0] && optind < argc)
    snprintf(err, sizeof err, "unexpected argument: '%s'", argv[optind]);
  if (!err[0] && o->min_bytes > o->max_bytes)
    snprintf(err, sizeof err, "-b (%zu) is larger than -e (%zu)", o->min_bytes, o->max_bytes);
  if (!err[0] && o->max_bytes / TYPES[o->type].size > INT_MAX)
    snprintf(err, sizeof err, "-e %zu gives more than INT_MAX elements", o->max_bytes);
  if (rank == 0 && err[0]) fprintf(stderr, "error: %s\n", err);
  if (rank == 0 && (help || err[0])) usage(err[0] ? stderr : stdout, argv[0]);
  return err[0] ? 2 : (help ? 1 : 0);
}

/* ------------------------------------------------------------------ */
/* MPI type/op mapping and buffers                                     */
/* ------------------------------------------------------------------ */

static MPI_Datatype mpi_type(type_id t) {
  switch (t) {
    case T_FLOAT:
      return MPI_FLOAT;
    case T_DOUBLE:
      return MPI_DOUBLE;
    case T_INT32:
      return MPI_INT32_T;
    default:
      return MPI_INT64_T;
  }
}

static MPI_Op mpi_op(op_id op) {
  switch (op) {
    case O_SUM:
      return MPI_SUM;
    case O_MAX:
      return MPI_MAX;
    case O_MIN:
      return MPI_MIN;
    default:
      return MPI_PROD;
  }
}

static void* alloc_buffer(size_t bytes) {
  const size_t align = 4096;
  size_t rounded = (bytes + align - 1) / align * align;
#ifdef GFSHIM_SMPI
  /* SMPI's malloc (smpi_helpers.h), page-aligned from its threshold on, which
     smpi/auto-shared-malloc-thresh can make one buffer shared by all simulated ranks;
     aligned_alloc would give each rank its own. */
  void* p = malloc(rounded ? rounded : align);
#else
  void* p = aligned_alloc(align, rounded ? rounded : align);
#endif
  if (p) memset(p, 0, rounded); /* fault the pages in before any timing */
  return p;
}

/* ------------------------------------------------------------------ */
/* check pattern                                                       */
/* ------------------------------------------------------------------ */

/*
 * Value of element i (m = i % CHECK_PERIOD) on rank r.  All values are small
 * integers; per op they are chosen so the reduction over any number of ranks
 * is exact in float and cannot overflow int32 for realistic rank counts:
 *   sum:  -8..8                  |result| <= 8p
 *   max/min: -50..50
 *   prod: mostly 1, one rank in 13 contributes 2 and one in 13 -1, so
 *         |result| <= 2^ceil(p/13) (a power of two, exact in float)
 */
static long pattern_value(op_id op, long m, long r) {
  switch (op) {
    case O_SUM:
      return (m * 7 + r * 3) % 17 - 8;
    case O_MAX:
    case O_MIN:
      return (m * 37 + r * 11) % 101 - 50;
    default: {
      long k = (m * 5 + r * 3) % 13;
      return k == 0 ? 2 : (k == 1 ? -1 : 1);
    }
  }
}

static void compute_expected(op_id op, int nranks, double* expected) {
  for (long m = 0; m < CHECK_PERIOD; m++) {
    double acc = (double)pattern_value(op, m, 0);
    for (long r = 1; r < nranks; r++) {
      double v = (double)pattern_value(op, m, r);
      switch (op) {
        case O_SUM:
          acc += v;
          break;
        case O_MAX:
          acc = v > acc ? v : acc;
          break;
        case O_MIN:
          acc = v < acc ? v : acc;
          break;
        default:
          acc *= v;
          break;
      }
    }
    expected[m] = acc;
  }
}

#define FILL_LOOP(T)                                                                \
  do {                                                                              \
    T tab[CHECK_PERIOD];                                                            \
    for (long m = 0; m < CHECK_PERIOD; m++) tab[m] = (T)pattern_value(op, m, rank); \
    T* p = (T*)buf;                                                                 \
    for (size_t i = 0, m = 0; i < count; i++) {                                     \
      p[i] = tab[m];                                                                \
      if (++m == CHECK_PERIOD) m = 0;                                               \
    }                                                                               \
  } while (0)

static void fill_pattern(void* buf, size_t count, type_id t, op_id op, int rank) {
  switch (t) {
    case T_FLOAT:
      FILL_LOOP(float);
      break;
    case T_DOUBLE:
      FILL_LOOP(double);
      break;
    case T_INT32:
      FILL_LOOP(int32_t);
      break;
    case T_INT64:
      FILL_LOOP(int64_t);
      break;
  }
}

#define VERIFY_LOOP(T)                          \
  do {                                          \
    const T* p = (const T*)buf;                 \
    for (size_t i = 0, m = 0; i < count; i++) { \
      wrong += ((double)p[i] != expected[m]);   \
      if (++m == CHECK_PERIOD) m = 0;           \
    }                                           \
  } while (0)

/* Number of result elements that differ from the expected values. */
static long long verify_elements(const void* buf, size_t count, type_id t, const double* expected) {
  long long wrong = 0;
  switch (t) {
    case T_FLOAT:
      VERIFY_LOOP(float);
      break;
    case T_DOUBLE:
      VERIFY_LOOP(double);
      break;
    case T_INT32:
      VERIFY_LOOP(int32_t);
      break;
    case T_INT64:
      VERIFY_LOOP(int64_t);
      break;
  }
  return wrong;
}

/* Prepare one verification call: pattern in, poison in the result area. */
static void prepare_check_buffers(bench_ctx* cx, const options* o, size_t count) {
  size_t bytes = count * cx->tsize;
  size_t guard_end = bytes + GUARD_BYTES;
  if (guard_end > cx->buf_bytes) guard_end = cx->buf_bytes;
  if (o->in_place) {
    fill_pattern(cx->recvbuf, count, o->type, o->op, cx->rank);
  } else {
    fill_pattern(cx->sendbuf, count, o->type, o->op, cx->rank);
    memset(cx->recvbuf, POISON_BYTE, bytes);
  }
  memset((char*)cx->recvbuf + bytes, POISON_BYTE, guard_end - bytes);
}

/* Elements' worth of guard zone past the result that were overwritten. */
static long long guard_damage(const bench_ctx* cx, size_t bytes) {
  const unsigned char* g = (const unsigned char*)cx->recvbuf + bytes;
  size_t n = cx->buf_bytes - bytes;
  if (n > GUARD_BYTES) n = GUARD_BYTES;
  long long bad = 0;
  for (size_t e = 0; e < n; e += cx->tsize) {
    int hit = 0;
    for (size_t b = e; b < e + cx->tsize && b < n; b++) hit |= g[b] != POISON_BYTE;
    bad += hit;
  }
  return bad;
}

/* 1 if this rank's result bytes differ from rank 0's, else 0. */
static int differs_from_root(bench_ctx* cx, size_t bytes) {
  int differs = 0;
  for (size_t off = 0; off < bytes; off += BCAST_CHUNK) {
    size_t n = bytes - off < BCAST_CHUNK ? bytes - off : BCAST_CHUNK;
    const unsigned char* mine = (const unsigned char*)cx->recvbuf + off;
    if (cx->rank == 0) memcpy(cx->scratch, mine, n);
    PMPI_Bcast(cx->scratch, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (memcmp(cx->scratch, mine, n) != 0) differs = 1;
  }
  return differs;
}

typedef struct {
  long long wrong; /* max over ranks of wrong elements */
  int diverging;   /* ranks whose result bytes differ from rank 0's */
} check_result;

/* One fresh call of fn on pattern data, verified on every rank. */
static check_result check_call(bench_ctx* cx, const options* o, size_t count, allreduce_fn fn) {
  size_t bytes = count * cx->tsize;
  prepare_check_buffers(cx, o, count);
  fn(o->in_place ? MPI_IN_PLACE : cx->sendbuf, cx->recvbuf, (int)count, cx->dtype, cx->mop,
     MPI_COMM_WORLD);

  long long wrong =
      verify_elements(cx->recvbuf, count, o->type, cx->expected) + guard_damage(cx, bytes);
  int differs = differs_from_root(cx, bytes);

  check_result res;
  PMPI_Allreduce(&wrong, &res.wrong, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  PMPI_Allreduce(&differs, &res.diverging, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  return res;
}

/* ------------------------------------------------------------------ */
/* timing                                                              */
/* ------------------------------------------------------------------ */

static void call_n(const bench_ctx* cx, const options* o, size_t count, allreduce_fn fn, int n) {
  const void* sbuf = o->in_place ? MPI_IN_PLACE : cx->sendbuf;
  for (int k = 0; k < n; k++) fn(sbuf, cx->recvbuf, (int)count, cx->dtype, cx->mop, MPI_COMM_WORLD);
}

/*
 * Warm-up calls of fn.  Returns rank 0's mean time per call, excluding the
 * first call when there are two or more (it may include one-time setup).
 * With warmup == 0 a single call is still made so there is something to
 * calibrate on.
 */
static double warm_up(const bench_ctx* cx, const options* o, size_t count, allreduce_fn fn) {
  int n = o->warmup > 0 ? o->warmup : 1;
  PMPI_Barrier(MPI_COMM_WORLD);
  if (n >= 2) {
    call_n(cx, o, count, fn, 1);
    n--;
  }
  double t0 = PMPI_Wtime();
  call_n(cx, o, count, fn, n);
  return (PMPI_Wtime() - t0) / n;
}

/* Calls per round: -n, or decided on rank 0 and broadcast. */
static int choose_iters(const options* o, double per_call_s) {
  if (o->iters > 0) return o->iters;
  double want = per_call_s > 0 ? TARGET_ROUND_S / per_call_s : MAX_AUTO_ITERS;
  int iters = want >= MAX_AUTO_ITERS ? MAX_AUTO_ITERS : want < 1.0 ? 1 : (int)(want + 0.5);
  PMPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return iters;
}

/* One timed round; the max over ranks is returned on rank 0. */
static double timed_round(const bench_ctx* cx, const options* o, size_t count, allreduce_fn fn,
                          int iters) {
  PMPI_Barrier(MPI_COMM_WORLD);
  double t0 = PMPI_Wtime();
  call_n(cx, o, count, fn, iters);
  double mine = (PMPI_Wtime() - t0) / iters, slowest = 0.0;
  PMPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  return slowest;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/*
 * Times the functions fns[0..nfns-1] in interleaved rounds (the order of
 * the functions rotates every round) and stores each one's median.
 */
static void time_size(bench_ctx* cx, const options* o, size_t count, allreduce_fn* fns, int nfns,
                      timing* out) {
  double per_call = 0.0;
  for (int f = 0; f < nfns; f++) {
    double t = warm_up(cx, o, count, fns[f]);
    per_call = t > per_call ? t : per_call;
  }
  int iters = choose_iters(o, per_call);

  double* times = cx->round_times; /* [f * rounds + round] */
  for (int r = 0; r < o->rounds; r++)
    for (int k = 0; k < nfns; k++) {
      int f = (r + k) % nfns;
      times[f * o->rounds + r] = timed_round(cx, o, count, fns[f], iters);
    }
  for (int f = 0; f < nfns; f++) out[f].time_s = median(times + f * o->rounds, o->rounds);
}

/* ------------------------------------------------------------------ */
/* output                                                              */
/* ------------------------------------------------------------------ */

static void print_header(const bench_ctx* cx, const options* o) {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  version[strcspn(version, "\r\n")] = '\0';
  for (char* c = version; *c; c++)
    if (*c == '\t') *c = ' ';
  const char* preload = getenv("LD_PRELOAD");
  char iters[64];
  if (o->iters > 0)
    snprintf(iters, sizeof iters, "%d", o->iters);
  else
    snprintf(iters, sizeof iters, "auto (~%.0f ms/round, 1..%d)", TARGET_ROUND_S * 1e3,
             MAX_AUTO_ITERS);

  printf("# allreduce_bench\n");
  printf("# MPI library : %s\n", version);
  printf("# np          : %d\n", cx->nranks);
  printf("# type        : %s (%zu B)\n", TYPES[o->type].name, cx->tsize);
  printf("# op          : %s\n", OPS[o->op]);
  printf("# in-place    : %s\n", o->in_place ? "yes" : "no");
  printf("# check       : %s\n", o->check ? "yes" : "no");
  printf("# mode        : %s\n", o->compare ? "compare: native = PMPI_Allreduce, "
                                              "shim = MPI_Allreduce (interleaved rounds)"
                                            : "MPI_Allreduce");
  printf("# LD_PRELOAD  : %s\n", preload && *preload ? preload : "(none)");
  printf("# iters/round : %s, warm-up %d, rounds %d\n", iters, o->warmup, o->rounds);
  printf("# time        : median over rounds of max over ranks, per call\n");
  printf("# busbw       : algbw * 2(p-1)/p (0 for p = 1)\n");
  if (o->compare) printf("# ratio       : shim/native time (< 1: shim faster)\n");
  if (o->compare)
    printf("#%12s %11s %7s %5s %11s %11s %7s %12s %12s %7s\n", "size(B)", "count", "type", "op",
           "native(us)", "shim(us)", "ratio", "native_busbw", "shim_busbw", "#wrong");
  else
    printf("#%12s %11s %7s %5s %11s %11s %11s %7s\n", "size(B)", "count", "type", "op", "time(us)",
           "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  fflush(stdout);
}

static double busbw_factor(int nranks) { return 2.0 * (nranks - 1) / nranks; }

static void format_wrong(char* s, size_t n, const options* o, long long w) {
  if (o->check)
    snprintf(s, n, "%lld", w);
  else
    snprintf(s, n, "-");
}

/* Rank 0 only: the times are only valid there. */
static void print_row(const bench_ctx* cx, const options* o, size_t count, const timing* t,
                      long long wrong) {
  if (cx->rank != 0) return;
  size_t bytes = count * cx->tsize;
  double bw = busbw_factor(cx->nranks);
  char w[32];
  format_wrong(w, sizeof w, o, wrong);
  if (o->compare) {
    double nat = t[0].time_s, shim = t[1].time_s;
    printf(" %12zu %11zu %7s %5s %11.2f %11.2f %7.3f %12.3f %12.3f %7s\n", bytes, count,
           TYPES[o->type].name, OPS[o->op], nat * 1e6, shim * 1e6, shim / nat,
           bytes / nat / 1e9 * bw, bytes / shim / 1e9 * bw, w);
  } else {
    double alg = bytes / t[0].time_s / 1e9;
    printf(" %12zu %11zu %7s %5s %11.2f %11.3f %11.3f %7s\n", bytes, count, TYPES[o->type].name,
           OPS[o->op], t[0].time_s * 1e6, alg, alg * bw, w);
  }
  fflush(stdout);
}

/* ------------------------------------------------------------------ */
/* driver                                                              */
/* ------------------------------------------------------------------ */

/* Runs and prints one size.  Returns 1 if its check failed. */
static int run_size(bench_ctx* cx, const options* o, size_t count) {
  /* [0] = what is reported as "time" / "native", [1] = "shim" */
  allreduce_fn fns[2];
  int nfns = 0;
  if (o->compare) {
    fns[nfns++] = PMPI_Allreduce;
    fns[nfns++] = MPI_Allreduce;
  } else {
    fns[nfns++] = MPI_Allreduce;
  }

  fill_pattern(o->in_place ? cx->recvbuf : cx->sendbuf, count, o->type, o->op, cx->rank);
  timing t[2];
  time_size(cx, o, count, fns, nfns, t);

  if (!o->check) {
    print_row(cx, o, count, t, 0);
    return 0;
  }
  check_result shim = check_call(cx, o, count, MPI_Allreduce);
  check_result native = {0, 0};
  if (o->compare) native = check_call(cx, o, count, PMPI_Allreduce);
  print_row(cx, o, count, t, shim.wrong);

  size_t bytes = count * cx->tsize;
  if (cx->rank == 0) {
    if (shim.diverging)
      printf(
          "# ERROR size %zu: MPI_Allreduce result differs from "
          "rank 0's on %d rank(s)\n",
          bytes, shim.diverging);
    if (native.wrong || native.diverging)
      printf(
          "# ERROR size %zu: native PMPI_Allreduce: %lld wrong "
          "element(s), %d rank(s) differ from rank 0\n",
          bytes, native.wrong, native.diverging);
    fflush(stdout);
  }
  return shim.wrong || shim.diverging || native.wrong || native.diverging;
}

/* Next size in the sweep; always grows by at least one byte. */
static size_t next_size(size_t bytes, double factor) {
  double next = (double)bytes * factor;
  if (next >= (double)SIZE_MAX) return SIZE_MAX;
  size_t n = (size_t)next;
  return n > bytes ? n : bytes + 1;
}

static int run_sweep(bench_ctx* cx, const options* o) {
  int failed = 0;
  size_t last_count = 0;
  for (size_t bytes = o->min_bytes; bytes <= o->max_bytes; bytes = next_size(bytes, o->factor)) {
    size_t count = bytes / cx->tsize;
    if (count > 0 && count != last_count) failed |= run_size(cx, o, count);
    last_count = count;
    if (bytes == SIZE_MAX) break;
  }
  return failed;
}

static int setup(bench_ctx* cx, const options* o) {
  *cx = (bench_ctx){0};
  MPI_Comm_rank(MPI_COMM_WORLD, &cx->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &cx->nranks);
  cx->dtype = mpi_type(o->type);
  cx->mop = mpi_op(o->op);
  cx->tsize = TYPES[o->type].size;
  cx->buf_bytes = o->max_bytes / cx->tsize * cx->tsize + GUARD_BYTES;
  cx->sendbuf = alloc_buffer(cx->buf_bytes);
  cx->recvbuf = alloc_buffer(cx->buf_bytes);
  cx->round_times = malloc(2 * (size_t)o->rounds * sizeof(double));
  int ok = cx->sendbuf && cx->recvbuf && cx->round_times;
  if (o->check) {
    cx->expected = malloc(CHECK_PERIOD * sizeof(double));
    cx->scratch = malloc(BCAST_CHUNK);
    ok = ok && cx->expected && cx->scratch;
    if (cx->expected) compute_expected(o->op, cx->nranks, cx->expected);
  }
  int all_ok = 0;
  PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_ok && cx->rank == 0)
    fprintf(stderr, "error: cannot allocate 2 x %zu bytes\n", cx->buf_bytes);
  return all_ok ? 0 : -1;
}

static void teardown(bench_ctx* cx) {
  free(cx->sendbuf);
  free(cx->recvbuf);
  free(cx->round_times);
  free(cx->expected);
  free(cx->scratch);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  options o;
  int rc = parse_options(argc, argv, rank, &o);
  if (rc != 0) {
    MPI_Finalize();
    return rc == 1 ? 0 : 2;
  }

  bench_ctx cx;
  if (setup(&cx, &o) != 0) {
    teardown(&cx);
    MPI_Finalize();
    return 1;
  }
  if (rank == 0) print_header(&cx, &o);
  int failed = run_sweep(&cx, &o);
  if (rank == 0 && o.check) printf("# check: %s\n", failed ? "FAILED" : "passed");
  teardown(&cx);
  MPI_Finalize();
  return failed ? 1 : 0;
}
