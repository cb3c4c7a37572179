/*
 * allreduce_conformance.c -- conformance test for MPI_Allreduce / MPI_Iallreduce.
 *
 * Every call under test (MPI_Allreduce, MPI_Iallreduce) is compared against a
 * reference computed with PMPI_Allreduce, which bypasses an LD_PRELOADed PMPI
 * shim such as libgfshim.  All of the test's own communication (reference,
 * broadcasts, result reduction, barriers) uses PMPI_* so that a preloaded
 * shim sees only the calls under test.
 *
 * Usage:  mpirun -np N ./allreduce_conformance [-q] [-v]
 *   -q   quick mode: reduced matrix for slow launches (e.g. oversubscribed MPICH)
 *   -v   verbose: print per-section progress and native-rejection notes
 *   -n   no intercommunicator section (for MPIs without MPI_Intercomm_create: SimGrid SMPI)
 *   -p   predefined datatypes and ops only: no user-op and derived-datatype sections, which the
 *        shim passes through (SimGrid SMPI 3.32's own MPI_Iallreduce fails them, shim or not)
 *
 * Output: per-failure lines "FAIL[rank r] case=... comm=... type=... op=...
 * count=... inplace=... api=...: <what, first mismatching index>" from any
 * rank, then on world rank 0 informational "NOTE: ..." / "TIME ..." lines and
 *   CALLS engine_eligible=<n> user_op=<n> derived=<n>
 *   CALLS_OTHER user_op_derived=<n> zero_count=<n> intercomm=<n> invalid_args=<n>
 *   N passed, N failed
 * The CALLS counters are the MPI_Allreduce + MPI_Iallreduce calls made by
 * world rank 0 (every rank makes the same number):
 *   engine_eligible  predefined datatype and predefined op, count > 0,
 *                    intracommunicator, valid arguments
 *   user_op          user-defined op (MPI_Op_create) on a predefined datatype
 *   derived          derived datatype with a predefined op (both Open MPI 4.1
 *                    and MPICH 4.0 reject these natively with MPI_ERR_OP, so
 *                    they only check that the error class is passed through)
 *   user_op_derived  user-defined op on a derived datatype
 *   zero_count       predefined datatype and op, count == 0
 *   intercomm        intercommunicator calls (predefined type/op, any count)
 *   invalid_args     invalid arguments that PMPI rejected (each such call is
 *                    made only after PMPI_Allreduce reported the error)
 * Exit status 1 if any case failed on any rank.
 *
 * A "case" is one (comm, type, op, count, in-place, api) combination.  It
 * fails if it failed on any rank.  Cases the MPI library itself rejects
 * (PMPI_Allreduce returns an error, and MPI_Allreduce returns the same error
 * class) are "not applicable" and are counted in neither total; invalid-
 * argument cases pass when the error classes match.  The data keep every sum
 * and product exact for up to 15 ranks.
 *
 * Data are chosen so that every legal reduction order gives bit-identical
 * results (small integer-valued / dyadic floating values, products of small
 * powers of two, Gaussian integers with non-zero components for complex
 * products), so the comparison with the reference is bitwise, except:
 *   - pair types (MPI_FLOAT_INT, ...): only the value and index fields are
 *     compared (padding bytes may legitimately differ);
 *   - long double (x87 80-bit): only the first 10 bytes of each value.
 */
#include <float.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POISON 0xA5
#define GUARD 64          /* poisoned bytes after every receive buffer */
#define MAX_FAIL_LINES 40 /* per rank */

#if LDBL_MANT_DIG == 64
#define LD_SIG 10 /* x87 extended: 80 significant bits */
#else
#define LD_SIG sizeof(long double)
#endif

/* ------------------------------------------------------------------ */
/* type and op tables                                                  */
/* ------------------------------------------------------------------ */

enum { C_INT = 1, C_FLT = 2, C_CPX = 4, C_BOOL = 8, C_BYTE = 16, C_PAIR = 32 };
enum { M_SUM, M_PROD, M_WIDE, M_LOGIC, M_BITS, M_LOC };
enum { K_SINT, K_UINT, K_FLT, K_CPX, K_BOOL, K_BYTE, K_PAIR };

typedef struct {
  size_t off, len;
} range_t;

typedef struct {
  const char* name;
  MPI_Datatype dt;
  int cls;      /* C_* class bit */
  int kind;     /* K_* storage kind */
  size_t csize; /* sizeof the C element == expected MPI extent */
  size_t sub;   /* scalar width: int/float width, complex component, pair value */
  int pflt;     /* pair: value is floating */
  size_t ioff;  /* pair: offset of the int index */
  int nr;       /* byte ranges compared per element */
  range_t r[2];
  int big; /* included in the large-count SUM case */
} tinfo_t;

typedef struct {
  const char* name;
  MPI_Op op;
  int cls;  /* classes the standard allows */
  int mode; /* data pattern M_* */
} opinfo_t;

typedef struct {
  float v;
  int i;
} p_fi;
typedef struct {
  double v;
  int i;
} p_di;
typedef struct {
  long v;
  int i;
} p_li;
typedef struct {
  int v;
  int i;
} p_2i;
typedef struct {
  short v;
  int i;
} p_si;
typedef struct {
  long double v;
  int i;
} p_ldi;

static tinfo_t T[64];
static int nT;
static opinfo_t O[16];
static int nO;

static void add_type(const char* name, MPI_Datatype dt, int cls, int kind, size_t csize, size_t sub,
                     int pflt, size_t ioff, int big) {
  tinfo_t* t = &T[nT++];
  memset(t, 0, sizeof *t);
  t->name = name;
  t->dt = dt;
  t->cls = cls;
  t->kind = kind;
  t->csize = csize;
  t->sub = sub;
  t->pflt = pflt;
  t->ioff = ioff;
  t->big = big;
  t->nr = 1;
  t->r[0].off = 0;
  t->r[0].len = csize;
  if (kind == K_FLT && sub == sizeof(long double) && sub != sizeof(double)) {
    t->r[0].len = LD_SIG;
  } else if (kind == K_CPX && sub == sizeof(long double) && sub != sizeof(double)) {
    t->nr = 2;
    t->r[0].len = LD_SIG;
    t->r[1].off = sub;
    t->r[1].len = LD_SIG;
  } else if (kind == K_PAIR) {
    t->nr = 2;
    t->r[0].len = (pflt && sub == sizeof(long double) && sub != sizeof(double)) ? LD_SIG : sub;
    t->r[1].off = ioff;
    t->r[1].len = sizeof(int);
  }
}

#define SINT(dt, ct) add_type(#dt, dt, C_INT, K_SINT, sizeof(ct), sizeof(ct), 0, 0, 0)
#define UINT(dt, ct) add_type(#dt, dt, C_INT, K_UINT, sizeof(ct), sizeof(ct), 0, 0, 0)
#define FLT(dt, ct, big) add_type(#dt, dt, C_FLT, K_FLT, sizeof(ct), sizeof(ct), 0, 0, big)
#define CPX(dt, ct) add_type(#dt, dt, C_CPX, K_CPX, 2 * sizeof(ct), sizeof(ct), 0, 0, 0)
#define PAIR(dt, st, vt, fl) \
  add_type(#dt, dt, C_PAIR, K_PAIR, sizeof(st), sizeof(vt), fl, offsetof(st, i), 0)

static void init_tables(void) {
  nT = 0;
  add_type("MPI_INT", MPI_INT, C_INT, K_SINT, sizeof(int), sizeof(int), 0, 0, 1);
  SINT(MPI_LONG, long);
  SINT(MPI_SHORT, short);
  UINT(MPI_UNSIGNED_SHORT, unsigned short);
  UINT(MPI_UNSIGNED, unsigned);
  UINT(MPI_UNSIGNED_LONG, unsigned long);
  SINT(MPI_LONG_LONG, long long);
  UINT(MPI_UNSIGNED_LONG_LONG, unsigned long long);
  SINT(MPI_SIGNED_CHAR, signed char);
  UINT(MPI_UNSIGNED_CHAR, unsigned char);
  SINT(MPI_INT8_T, int8_t);
  SINT(MPI_INT16_T, int16_t);
  SINT(MPI_INT32_T, int32_t);
  SINT(MPI_INT64_T, int64_t);
  UINT(MPI_UINT8_T, uint8_t);
  UINT(MPI_UINT16_T, uint16_t);
  UINT(MPI_UINT32_T, uint32_t);
  UINT(MPI_UINT64_T, uint64_t);
  SINT(MPI_AINT, MPI_Aint);
  SINT(MPI_OFFSET, MPI_Offset);
  SINT(MPI_COUNT, MPI_Count);
  FLT(MPI_FLOAT, float, 1);
  FLT(MPI_DOUBLE, double, 1);
  FLT(MPI_LONG_DOUBLE, long double, 0);
  CPX(MPI_C_FLOAT_COMPLEX, float);
  CPX(MPI_C_DOUBLE_COMPLEX, double);
  CPX(MPI_C_LONG_DOUBLE_COMPLEX, long double);
  add_type("MPI_C_BOOL", MPI_C_BOOL, C_BOOL, K_BOOL, sizeof(bool), sizeof(bool), 0, 0, 0);
  add_type("MPI_BYTE", MPI_BYTE, C_BYTE, K_BYTE, 1, 1, 0, 0, 0);
  PAIR(MPI_FLOAT_INT, p_fi, float, 1);
  PAIR(MPI_DOUBLE_INT, p_di, double, 1);
  PAIR(MPI_LONG_INT, p_li, long, 0);
  PAIR(MPI_2INT, p_2i, int, 0);
  PAIR(MPI_SHORT_INT, p_si, short, 0);
  PAIR(MPI_LONG_DOUBLE_INT, p_ldi, long double, 1);

  nO = 0;
#define OP(o, c, m)   \
  do {                \
    O[nO].name = #o;  \
    O[nO].op = o;     \
    O[nO].cls = (c);  \
    O[nO].mode = (m); \
    nO++;             \
  } while (0)
  OP(MPI_MAX, C_INT | C_FLT, M_WIDE);
  OP(MPI_MIN, C_INT | C_FLT, M_WIDE);
  OP(MPI_SUM, C_INT | C_FLT | C_CPX, M_SUM);
  OP(MPI_PROD, C_INT | C_FLT | C_CPX, M_PROD);
  OP(MPI_LAND, C_INT | C_BOOL, M_LOGIC);
  OP(MPI_LOR, C_INT | C_BOOL, M_LOGIC);
  OP(MPI_LXOR, C_INT | C_BOOL, M_LOGIC);
  OP(MPI_BAND, C_INT | C_BYTE, M_BITS);
  OP(MPI_BOR, C_INT | C_BYTE, M_BITS);
  OP(MPI_BXOR, C_INT | C_BYTE, M_BITS);
  OP(MPI_MINLOC, C_PAIR, M_LOC);
  OP(MPI_MAXLOC, C_PAIR, M_LOC);
#undef OP
}

static const tinfo_t* find_type(const char* name) {
  for (int i = 0; i < nT; i++)
    if (strcmp(T[i].name, name) == 0) return &T[i];
  fprintf(stderr, "internal error: unknown type %s\n", name);
  PMPI_Abort(MPI_COMM_WORLD, 2);
  return NULL;
}

static const opinfo_t* find_op(const char* name) {
  for (int i = 0; i < nO; i++)
    if (strcmp(O[i].name, name) == 0) return &O[i];
  fprintf(stderr, "internal error: unknown op %s\n", name);
  PMPI_Abort(MPI_COMM_WORLD, 2);
  return NULL;
}

/* ------------------------------------------------------------------ */
/* data generation                                                     */
/* ------------------------------------------------------------------ */

static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static void store_int(char* p, size_t w, uint64_t v) {
  switch (w) {
    case 1: {
      uint8_t x = (uint8_t)v;
      memcpy(p, &x, 1);
      break;
    }
    case 2: {
      uint16_t x = (uint16_t)v;
      memcpy(p, &x, 2);
      break;
    }
    case 4: {
      uint32_t x = (uint32_t)v;
      memcpy(p, &x, 4);
      break;
    }
    default:
      memcpy(p, &v, 8);
      break;
  }
}

static void store_flt(char* p, size_t w, double v) {
  if (w == sizeof(float)) {
    float x = (float)v;
    memcpy(p, &x, sizeof x);
  } else if (w == sizeof(double)) {
    memcpy(p, &v, sizeof v);
  } else {
    long double x = v;
    memcpy(p, &x, sizeof x);
  }
}

/* integer value for element i: small enough that no sum/product overflows */
static int64_t ival(int mode, int sgn, uint64_t h, size_t i, int rank) {
  switch (mode) {
    case M_SUM: /* |sum| <= 8*p: fits int8 up to 15 ranks */
      return sgn ? (int64_t)(h % 17) - 8 : (int64_t)(h % 17);
    case M_PROD: /* a 2 on at most ceil(p/4) ranks per element */
      if ((i + (size_t)rank) % 4 == 0) return 2;
      if (h % 53 == 0) return 0;
      if (sgn && (h >> 8) % 5 == 0) return -1;
      return 1;
    case M_LOGIC: { /* mix of zero and assorted non-zero values */
      unsigned zp = (i % 3 == 0) ? 3 : 1;
      if (h % 4 < zp) return 0;
      switch ((h >> 8) % 3) {
        case 0:
          return 1;
        case 1:
          return sgn ? -1 : 0x80;
        default:
          return (int64_t)((h >> 16) % 100) + 2;
      }
    }
    default: /* M_WIDE, M_BITS: full-width random bits */
      return (int64_t)h;
  }
}

/* floating value: integers or dyadic fractions, all sums/products exact */
static double fval(int mode, uint64_t h, size_t i, int rank) {
  switch (mode) {
    case M_SUM:
      return ((int)(h % 2001) - 1000) * 0.25;
    case M_PROD:
      if ((i + (size_t)rank) % 4 == 0) return 2.0;
      if (h % 53 == 0) return 0.0;
      if ((h >> 8) % 5 == 0) return -1.0;
      if ((h >> 16) % 7 == 0) return 0.5;
      return 1.0;
    default: /* M_WIDE: lots of ties, never a negative zero */
      return ((int)(h % 20001) - 10000) * 0.125;
  }
}

/* Complex product factors have both components non-zero, so no signed-zero
 * result depends on the order of the multiplications. */
static void cval(int mode, uint64_t h, size_t i, int rank, double* re, double* im) {
  if (mode == M_SUM) {
    *re = ((int)(h % 201) - 100) * 0.5;
    *im = ((int)((h >> 20) % 201) - 100) * 0.5;
    return;
  }
  if ((i + (size_t)rank) % 4 == 0) {
    if ((h >> 4) & 1) {
      *re = 2;
      *im = 1;
    } else {
      *re = 1;
      *im = -2;
    }
    return;
  }
  *re = (h >> 8) & 1 ? 1.0 : -1.0;
  *im = (h >> 9) & 1 ? 1.0 : -1.0;
}

/* fill n elements of type t (buffer must be zeroed by the caller so that
 * padding is deterministic) */
static void fill(const tinfo_t* t, int mode, char* buf, size_t n, int rank, uint64_t salt) {
  uint64_t base = mix(((uint64_t)(unsigned)rank << 32) ^ mix(salt));
  for (size_t i = 0; i < n; i++) {
    char* p = buf + i * t->csize;
    uint64_t h = mix((uint64_t)i ^ base);
    switch (t->kind) {
      case K_SINT:
        store_int(p, t->sub, (uint64_t)ival(mode, 1, h, i, rank));
        break;
      case K_UINT:
        store_int(p, t->sub, (uint64_t)ival(mode, 0, h, i, rank));
        break;
      case K_FLT:
        store_flt(p, t->sub, fval(mode, h, i, rank));
        break;
      case K_CPX: {
        double re, im;
        cval(mode, h, i, rank, &re, &im);
        store_flt(p, t->sub, re);
        store_flt(p + t->sub, t->sub, im);
        break;
      }
      case K_BOOL: {
        unsigned zp = (i % 3 == 0) ? 3 : 1;
        bool b = (h % 4) >= zp;
        memcpy(p, &b, sizeof b);
        break;
      }
      case K_BYTE:
        *(unsigned char*)p = (unsigned char)h;
        break;
      case K_PAIR: {
        /* few distinct values -> many ties; index not monotonic in rank,
         * sometimes negative */
        int v = (int)(h % 5) - 2;
        int idx = (int)((h >> 20) % 1000) - 100;
        if (t->pflt)
          store_flt(p, t->sub, (double)v);
        else
          store_int(p, t->sub, (uint64_t)(int64_t)v);
        memcpy(p + t->ioff, &idx, sizeof idx);
        break;
      }
    }
  }
}

/* ------------------------------------------------------------------ */
/* bookkeeping                                                         */
/* ------------------------------------------------------------------ */

#define F_FAIL 1
#define F_NA 2

enum { CAT_ELIG, CAT_USER, CAT_DERIVED, CAT_USER_DERIVED, CAT_ZERO, CAT_INTER, CAT_INVALID, NCAT };
static long g_calls[NCAT];

static unsigned char* g_flags;
static size_t g_ncases, g_cap;
static int g_wrank, g_wsize, g_verbose, g_quick, g_no_intercomm, g_predefined_only;
static int g_faillines;

static char *sbuf, *scopy, *rbuf, *refbuf, *bbuf;
static size_t g_bufbytes;

static size_t new_case(void) {
  if (g_ncases == g_cap) {
    g_cap = g_cap ? 2 * g_cap : 4096;
    g_flags = realloc(g_flags, g_cap);
    if (!g_flags) {
      perror("realloc");
      PMPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  g_flags[g_ncases] = 0;
  return g_ncases++;
}

typedef struct {
  const char* name;
  MPI_Comm comm; /* communicator under test */
  MPI_Comm chk;  /* intracomm over which results must agree (== comm,
                    or the local group for an intercommunicator) */
  int inter;
  int rank, size; /* in chk */
  int remote_size;
} commi_t;

/* everything describing one case */
typedef struct {
  const commi_t* C;
  const char* tname;
  MPI_Datatype dt;
  size_t ext;
  int nr; /* byte ranges compared against the reference */
  range_t r[2];
  int nx; /* byte ranges compared across ranks (0: same as r); differs
             for in-place derived types with gaps, whose gaps keep
             each rank's own input */
  range_t x[3];
  const char* oname;
  MPI_Op op;
  int count;
  int inplace;
  int api;       /* API_* */
  int cat;       /* CAT_* for count>0 */
  int ikind;     /* K_SINT or K_UINT for integer types (MIN/MAX oracle), else -1 */
  size_t iwidth; /* integer width in bytes */
} case_t;

enum { API_BLOCK, API_WAIT, API_TEST };
static const char* api_name[] = {"MPI_Allreduce", "MPI_Iallreduce+Wait", "MPI_Iallreduce+Test"};

static void fail(size_t cid, const case_t* K, const char* fmt, ...) {
  g_flags[cid] |= F_FAIL;
  if (++g_faillines > MAX_FAIL_LINES) {
    if (g_faillines == MAX_FAIL_LINES + 1)
      printf("FAIL[rank %d] ... further failure lines suppressed on this rank\n", g_wrank);
    return;
  }
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  printf("FAIL[rank %d] case=%zu comm=%s type=%s op=%s count=%d inplace=%d api=%s: %s\n", g_wrank,
         cid, K->C->name, K->tname, K->oname, K->count, K->inplace, api_name[K->api], msg);
  fflush(stdout);
}

static void hexbytes(char* out, size_t outsz, const unsigned char* p, size_t n) {
  size_t o = 0;
  if (n > 16) n = 16;
  out[0] = 0;
  for (size_t i = 0; i < n && o + 3 < outsz; i++)
    o += (size_t)snprintf(out + o, outsz - o, "%02x", p[i]);
}

/* index of the first element whose compared byte ranges differ, or -1 */
static long cmp_elems(const char* a, const char* b, size_t count, size_t ext, int nr,
                      const range_t* r) {
  if (nr == 1 && r[0].off == 0 && r[0].len == ext) {
    if (memcmp(a, b, count * ext) == 0) return -1;
    for (size_t e = 0; e < count; e++)
      if (memcmp(a + e * ext, b + e * ext, ext)) return (long)e;
    return -1;
  }
  for (size_t e = 0; e < count; e++)
    for (int k = 0; k < nr; k++)
      if (memcmp(a + e * ext + r[k].off, b + e * ext + r[k].off, r[k].len)) return (long)e;
  return -1;
}

static void err_string(int rc, char* out, size_t outsz) {
  int cls = -1, len = 0;
  char s[MPI_MAX_ERROR_STRING];
  MPI_Error_class(rc, &cls);
  if (MPI_Error_string(cls, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "?");
  snprintf(out, outsz, "class %d (%.80s)", cls, s);
}

static int err_class(int rc) {
  int cls = -1;
  MPI_Error_class(rc, &cls);
  return cls;
}

static void count_call(const case_t* K) {
  if (K->cat == CAT_ELIG && K->count == 0)
    g_calls[CAT_ZERO]++;
  else
    g_calls[K->cat]++;
}

/* The call under test. */
static int call_under_test(const case_t* K, const void* sb, void* rb, MPI_Request* req) {
  count_call(K);
  *req = MPI_REQUEST_NULL;
  if (K->api == API_BLOCK) return MPI_Allreduce(sb, rb, K->count, K->dt, K->op, K->C->comm);
  int rc = MPI_Iallreduce(sb, rb, K->count, K->dt, K->op, K->C->comm, req);
  if (rc != MPI_SUCCESS) return rc;
  MPI_Status st;
  if (K->api == API_WAIT) return MPI_Wait(req, &st);
  int flag = 0;
  while (!flag) {
    rc = MPI_Test(req, &flag, &st);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

/* Check a completed call: rb (test result, n bytes + guard) vs ref.  in is
 * the original input (to verify the send buffer was not written).  Always
 * performs the same PMPI collective (the broadcast) on every rank. */
/* Set by the oracle when the MPI library's own result was wrong; then verify() also accepts the
 * library's (wrong) answer, kept in g_library_ref, which is what a passthrough call returns. */
static int g_ref_disputed;
static char* g_library_ref;

static void verify(size_t cid, const case_t* K, int rc_ref, int rc, const char* sb, const char* in,
                   const char* rb, const char* ref, MPI_Request req) {
  char s1[128], s2[128];
  size_t n = (size_t)K->count * K->ext;

  if (rc_ref != MPI_SUCCESS) {
    if (rc == MPI_SUCCESS) {
      err_string(rc_ref, s1, sizeof s1);
      fail(cid, K, "PMPI_Allreduce returned error %s but the call under test succeeded", s1);
    } else if (err_class(rc) != err_class(rc_ref)) {
      err_string(rc_ref, s1, sizeof s1);
      err_string(rc, s2, sizeof s2);
      fail(cid, K, "error class mismatch: PMPI returned %s, call under test returned %s", s1, s2);
    } else {
      static const char *last_t, *last_o;
      g_flags[cid] |= F_NA;
      if (g_verbose && g_wrank == 0 && (K->tname != last_t || K->oname != last_o)) {
        err_string(rc_ref, s1, sizeof s1);
        printf("NOTE: not applicable: PMPI rejects type=%s op=%s on %s with %s\n", K->tname,
               K->oname, K->C->name, s1);
        last_t = K->tname;
        last_o = K->oname;
      }
    }
    return;
  }
  if (rc != MPI_SUCCESS) {
    err_string(rc, s1, sizeof s1);
    fail(cid, K, "returned error %s (PMPI_Allreduce succeeded)", s1);
  }
  if (req != MPI_REQUEST_NULL) fail(cid, K, "request not MPI_REQUEST_NULL after completion");
  if (!K->inplace && memcmp(sb, in, n) != 0) {
    size_t j = 0;
    while (sb[j] == in[j]) j++;
    fail(cid, K, "send buffer modified (first at byte %zu, element %zu)", j, j / K->ext);
  }
  for (size_t j = 0; j < GUARD; j++)
    if ((unsigned char)rb[n + j] != POISON) {
      fail(cid, K, "wrote past the end of the receive buffer (guard byte %zu)", j);
      break;
    }
  long e = cmp_elems(rb, ref, (size_t)K->count, K->ext, K->nr, K->r);
  if (e >= 0 && g_ref_disputed &&
      cmp_elems(rb, g_library_ref, (size_t)K->count, K->ext, K->nr, K->r) < 0) {
    e = -1;
  }
  if (e >= 0) {
    int untouched = 1;
    for (size_t j = 0; j < K->ext; j++)
      if ((unsigned char)rb[(size_t)e * K->ext + j] != POISON) untouched = 0;
    hexbytes(s1, sizeof s1, (const unsigned char*)rb + (size_t)e * K->ext, K->ext);
    hexbytes(s2, sizeof s2, (const unsigned char*)ref + (size_t)e * K->ext, K->ext);
    fail(cid, K, "result differs from PMPI reference at index %ld: got %s expected %s%s", e, s1, s2,
         untouched ? " (element untouched: still poison)" : "");
  }
  /* identical bits on every rank of the (local) group */
  if (n > 0) {
    char* dst = (K->C->rank == 0) ? (char*)rb : bbuf;
    int brc = PMPI_Bcast(dst, (int)n, MPI_BYTE, 0, K->C->chk);
    if (brc != MPI_SUCCESS) {
      fail(cid, K, "internal: PMPI_Bcast failed");
    } else if (K->C->rank != 0) {
      long e2 = K->nx ? cmp_elems(rb, bbuf, (size_t)K->count, K->ext, K->nx, K->x)
                      : cmp_elems(rb, bbuf, (size_t)K->count, K->ext, K->nr, K->r);
      if (e2 >= 0) fail(cid, K, "result differs from rank 0's result at index %ld", e2);
    }
  }
}

static void integer_minmax_oracle(const case_t* K, const char* in, char* ref);
/* Run one case; sbuf (count*ext bytes) must already hold this rank's input. */
static void run_case(size_t cid, const case_t* K) {
  size_t n = (size_t)K->count * K->ext;
  memcpy(scopy, sbuf, n);
  memset(rbuf, POISON, n + GUARD);
  memset(refbuf, POISON, n + GUARD);
  if (K->inplace) {
    memcpy(rbuf, sbuf, n);
    memcpy(refbuf, sbuf, n);
  }
  int rc_ref =
      PMPI_Allreduce(K->inplace ? MPI_IN_PLACE : sbuf, refbuf, K->count, K->dt, K->op, K->C->comm);
  g_ref_disputed = 0;
  if (rc_ref == MPI_SUCCESS) integer_minmax_oracle(K, scopy, refbuf);
  MPI_Request req;
  int rc = call_under_test(K, K->inplace ? MPI_IN_PLACE : sbuf, rbuf, &req);
  verify(cid, K, rc_ref, rc, sbuf, scopy, rbuf, refbuf, req);
}

static void set_type(case_t* K, const tinfo_t* t) {
  K->tname = t->name;
  K->dt = t->dt;
  K->ext = t->csize;
  K->nr = t->nr;
  K->r[0] = t->r[0];
  K->r[1] = t->r[1];
  K->ikind = (t->kind == K_SINT || t->kind == K_UINT) ? t->kind : -1;
  K->iwidth = t->sub;
}

/* Integer element i of buf as a comparable value (sign-extended or zero-extended). */
static int64_t load_sint(const char* p, size_t w) {
  switch (w) {
    case 1: {
      int8_t v;
      memcpy(&v, p, 1);
      return v;
    }
    case 2: {
      int16_t v;
      memcpy(&v, p, 2);
      return v;
    }
    case 4: {
      int32_t v;
      memcpy(&v, p, 4);
      return v;
    }
    default: {
      int64_t v;
      memcpy(&v, p, 8);
      return v;
    }
  }
}

static uint64_t load_uint(const char* p, size_t w) {
  uint64_t v = 0;
  memcpy(&v, p, w); /* little-endian */
  return v;
}

/*
 * Independent oracle for integer MIN/MAX: gathers every rank's input and computes the result the
 * standard defines. Some MPI releases get these wrong (Open MPI 4.1.4 treats MPI_UNSIGNED_LONG
 * as signed and MPI_OFFSET as unsigned, ompi#10525/#10648; MPICH 4.0.2 compares unsigned types
 * as signed, mpich#6083), so PMPI_Allreduce is no reference for them. When the library's answer
 * differs from the oracle, a NOTE says so once per (type, op) and the oracle is used.
 */
static void integer_minmax_oracle(const case_t* K, const char* in, char* ref) {
  int is_max = K->op == MPI_MAX;
  if (K->ikind < 0 || !(is_max || K->op == MPI_MIN) || K->C->inter || K->count <= 0) return;
  size_t n = (size_t)K->count * K->ext;
  int p = K->C->size;
  char* all = malloc(n * (size_t)p);
  char* want = malloc(n);
  if (!all || !want) {
    free(all);
    free(want);
    return;
  }
  PMPI_Allgather(in, (int)n, MPI_BYTE, all, (int)n, MPI_BYTE, K->C->comm);
  memcpy(want, all, n);
  for (int r = 1; r < p; r++) {
    for (size_t i = 0; i < (size_t)K->count; i++) {
      const char* x = all + (size_t)r * n + i * K->ext;
      char* y = want + i * K->ext;
      int take;
      if (K->ikind == K_SINT) {
        int64_t a = load_sint(x, K->iwidth), b = load_sint(y, K->iwidth);
        take = is_max ? a > b : a < b;
      } else {
        uint64_t a = load_uint(x, K->iwidth), b = load_uint(y, K->iwidth);
        take = is_max ? a > b : a < b;
      }
      if (take) memcpy(y, x, K->iwidth);
    }
  }
  if (memcmp(want, ref, n) != 0) {
    static char noted[64][48];
    static int nnoted;
    char key[48];
    snprintf(key, sizeof key, "%s/%s", K->tname, K->oname);
    int seen = 0;
    for (int j = 0; j < nnoted; j++) seen |= strcmp(noted[j], key) == 0;
    if (!seen && nnoted < 64) {
      snprintf(noted[nnoted++], sizeof noted[0], "%s", key);
      if (g_wrank == 0) {
        printf(
            "NOTE: MPI library bug: PMPI_Allreduce(%s, %s) differs from the result the "
            "standard defines; the test compares with its own oracle\n",
            K->tname, K->oname);
      }
    }
    free(g_library_ref);
    g_library_ref = malloc(n);
    if (g_library_ref) {
      memcpy(g_library_ref, ref, n);
      g_ref_disputed = 1;
    }
    memcpy(ref, want, n);
  }
  free(all);
  free(want);
}

/* a predefined (type, op) case on communicator C */
static void predefined_case(const commi_t* C, const tinfo_t* t, const opinfo_t* o, int count,
                            int inplace, int api) {
  case_t K;
  memset(&K, 0, sizeof K);
  K.C = C;
  set_type(&K, t);
  K.oname = o->name;
  K.op = o->op;
  K.count = count;
  K.inplace = inplace;
  K.api = api;
  K.cat = C->inter ? CAT_INTER : CAT_ELIG;
  size_t cid = new_case();
  size_t n = (size_t)count * t->csize;
  memset(sbuf, 0, n);
  fill(t, o->mode, sbuf, (size_t)count, C->rank, (uint64_t)cid);
  run_case(cid, &K);
}

/* ------------------------------------------------------------------ */
/* sections                                                            */
/* ------------------------------------------------------------------ */

#define SLOT_BIG (-1)

static int slot_count(int slot, int p) {
  switch (slot) {
    case 0:
      return 0;
    case 1:
      return 1;
    case 2:
      return p - 1;
    case 3:
      return p;
    case 4:
      return p + 1;
    case 5:
      return 7;
    case 6:
      return 13;
    case 7:
      return 1000;
    case 8:
      return 4099;
    default:
      return g_quick ? (1 << 16) + 3 : (1 << 20) + 3;
  }
}

/* All allowed (type, op) combinations on C for the given count slots, both
 * in place and not.  In quick mode only one of the two in-place variants is
 * run (alternating), and thin > 1 keeps only every thin-th combination. */
static void matrix(const commi_t* C, const int* slots, int nslots, int api, int with_big,
                   int thin) {
  int combo = 0;
  for (int ti = 0; ti < nT; ti++)
    for (int oi = 0; oi < nO; oi++) {
      if (!(O[oi].cls & T[ti].cls)) continue;
      if (combo++ % thin != 0) continue;
      for (int si = 0; si < nslots + 1; si++) {
        int slot = si < nslots ? slots[si] : SLOT_BIG;
        if (slot == SLOT_BIG && !(with_big && T[ti].big && O[oi].op == MPI_SUM)) continue;
        int count = slot_count(slot, C->size);
        for (int ip = 0; ip < 2; ip++) {
          if (g_quick && ip != ((si + ti + oi) & 1)) continue;
          predefined_case(C, &T[ti], &O[oi], count, ip, api);
        }
      }
    }
}

/* several MPI_Iallreduce outstanding at once */
typedef struct {
  const commi_t* C;
  const char *type, *op;
  int count, inplace;
  int share_prev; /* use the previous entry's send buffer (same type/op/count, both not in place) */
} bspec_t;

enum { DONE_WAITALL, DONE_TESTALL, DONE_WAITANY };
static const char* done_name[] = {"Waitall", "Testall", "Waitany"};

static void batch(const bspec_t* spec, int nb, int mode) {
  case_t* K = calloc((size_t)nb, sizeof *K);
  size_t* cid = calloc((size_t)nb, sizeof *cid);
  char **sb = calloc((size_t)nb, sizeof *sb), **in = calloc((size_t)nb, sizeof *in);
  char** rb = calloc((size_t)nb, sizeof *rb);
  MPI_Request* req = calloc((size_t)nb, sizeof *req);
  int* rc = calloc((size_t)nb, sizeof *rc);
  char* ref = NULL;
  size_t refsz = 0;

  for (int i = 0; i < nb; i++) {
    const tinfo_t* t = find_type(spec[i].type);
    const opinfo_t* o = find_op(spec[i].op);
    K[i].C = spec[i].C;
    set_type(&K[i], t);
    K[i].oname = o->name;
    K[i].op = o->op;
    K[i].count = spec[i].count;
    K[i].inplace = spec[i].inplace;
    K[i].api = API_WAIT;
    K[i].cat = CAT_ELIG;
    cid[i] = new_case();
    size_t n = (size_t)spec[i].count * t->csize;
    if (n + GUARD > refsz) refsz = n + GUARD;
    in[i] = calloc(1, n + GUARD);
    rb[i] = malloc(n + GUARD);
    if (spec[i].share_prev && i > 0) {
      sb[i] = sb[i - 1];
      memcpy(in[i], in[i - 1], n);
    } else {
      sb[i] = calloc(1, n + GUARD);
      fill(t, o->mode, sb[i], (size_t)spec[i].count, K[i].C->rank, (uint64_t)cid[i]);
      memcpy(in[i], sb[i], n);
    }
    memset(rb[i], POISON, n + GUARD);
    if (spec[i].inplace) memcpy(rb[i], sb[i], n);
  }
  /* start them all */
  for (int i = 0; i < nb; i++) {
    count_call(&K[i]);
    rc[i] = MPI_Iallreduce(K[i].inplace ? MPI_IN_PLACE : sb[i], rb[i], K[i].count, K[i].dt, K[i].op,
                           K[i].C->comm, &req[i]);
    if (rc[i] != MPI_SUCCESS) req[i] = MPI_REQUEST_NULL;
  }
  /* complete them */
  int crc = MPI_SUCCESS;
  MPI_Status* st = calloc((size_t)nb, sizeof *st);
  if (mode == DONE_WAITALL) {
    crc = MPI_Waitall(nb, req, st);
  } else if (mode == DONE_TESTALL) {
    int flag = 0;
    while (!flag && crc == MPI_SUCCESS) crc = MPI_Testall(nb, req, &flag, st);
  } else {
    int* seen = calloc((size_t)nb, sizeof *seen);
    for (int k = 0; k < nb && crc == MPI_SUCCESS; k++) {
      int idx = MPI_UNDEFINED;
      crc = MPI_Waitany(nb, req, &idx, MPI_STATUS_IGNORE);
      if (crc != MPI_SUCCESS) break;
      if (idx == MPI_UNDEFINED) {
        /* allowed only if some Iallreduce failed to start */
        int active = 0;
        for (int i = 0; i < nb; i++) active += (rc[i] == MPI_SUCCESS && !seen[i]);
        if (active)
          fail(cid[0], &K[0], "MPI_Waitany returned MPI_UNDEFINED with %d requests active", active);
        break;
      }
      if (idx < 0 || idx >= nb || seen[idx]) {
        fail(cid[0], &K[0], "MPI_Waitany returned bad/duplicate index %d", idx);
        break;
      }
      seen[idx] = 1;
    }
    free(seen);
  }
  free(st);
  if (crc != MPI_SUCCESS) {
    char s[128];
    err_string(crc, s, sizeof s);
    for (int i = 0; i < nb; i++) fail(cid[i], &K[i], "MPI_%s returned %s", done_name[mode], s);
  }
  /* references (blocking PMPI, same order on every rank) and checks */
  ref = malloc(refsz);
  for (int i = 0; i < nb; i++) {
    size_t n = (size_t)K[i].count * K[i].ext;
    memset(ref, POISON, n + GUARD);
    if (K[i].inplace) memcpy(ref, in[i], n);
    int rc_ref = PMPI_Allreduce(K[i].inplace ? MPI_IN_PLACE : in[i], ref, K[i].count, K[i].dt,
                                K[i].op, K[i].C->comm);
    verify(cid[i], &K[i], rc_ref, rc[i], sb[i], in[i], rb[i], ref, req[i]);
  }
  for (int i = 0; i < nb; i++) {
    if (!(spec[i].share_prev && i > 0)) free(sb[i]);
    free(in[i]);
    free(rb[i]);
  }
  free(ref);
  free(K);
  free(cid);
  free(sb);
  free(in);
  free(rb);
  free(req);
  free(rc);
}

/* ---- user-defined ops (must be passed through to MPI) ---- */

static void uop_isum(void* in, void* inout, int* len, MPI_Datatype* dt) {
  (void)dt;
  const int* a = in;
  int* b = inout;
  for (int i = 0; i < *len; i++) b[i] += a[i];
}

/* a o b = a : associative, not commutative -> result is rank 0's input */
static void uop_first(void* in, void* inout, int* len, MPI_Datatype* dt) {
  (void)dt;
  memcpy(inout, in, (size_t)*len * sizeof(double));
}

/* a o b = b : associative, not commutative -> result is the last rank's input */
static void uop_last(void* in, void* inout, int* len, MPI_Datatype* dt) {
  (void)in;
  (void)inout;
  (void)len;
  (void)dt;
}

static void user_ops(const commi_t* C, const int* counts, int ncounts) {
  struct {
    const char* name;
    MPI_User_function* fn;
    int commute;
    const char* type;
    int mode;
  } U[] = {
      {"user(sum,commutative)", uop_isum, 1, "MPI_INT", M_SUM},
      {"user(first,noncommutative)", uop_first, 0, "MPI_DOUBLE", M_WIDE},
      {"user(last,noncommutative)", uop_last, 0, "MPI_INT", M_WIDE},
  };
  for (size_t u = 0; u < sizeof U / sizeof U[0]; u++) {
    MPI_Op op;
    MPI_Op_create(U[u].fn, U[u].commute, &op);
    const tinfo_t* t = find_type(U[u].type);
    for (int c = 0; c < ncounts; c++)
      for (int ip = 0; ip < 2; ip++)
        for (int api = API_BLOCK; api <= API_WAIT; api++) {
          case_t K;
          memset(&K, 0, sizeof K);
          K.C = C;
          set_type(&K, t);
          K.oname = U[u].name;
          K.op = op;
          K.count = counts[c];
          K.inplace = ip;
          K.api = api;
          K.cat = CAT_USER;
          size_t cid = new_case();
          memset(sbuf, 0, (size_t)K.count * t->csize);
          fill(t, U[u].mode, sbuf, (size_t)K.count, C->rank, (uint64_t)cid);
          run_case(cid, &K);
        }
    MPI_Op_free(&op);
  }
}

/* ---- derived datatypes with predefined ops ---- */

typedef struct {
  int a;
  double b;
} s_id;

static void derived(const commi_t* C, const int* counts, int ncounts) {
  enum { D_BASE, D_STRUCT };
  struct {
    const char* name;
    MPI_Datatype dt;
    const char* base;
    int fillk;
    const char* ops[3];
  } D[6];
  int nd = 0;
  MPI_Datatype tmp;

  MPI_Type_contiguous(2, MPI_INT, &D[nd].dt);
  D[nd].name = "contig(2,MPI_INT)";
  D[nd].base = "MPI_INT";
  D[nd].ops[0] = "MPI_SUM";
  D[nd].ops[1] = "MPI_MAX";
  D[nd].ops[2] = "MPI_BXOR";
  nd++;

  MPI_Type_vector(2, 1, 2, MPI_INT, &D[nd].dt);
  D[nd].name = "vector(2,1,2,MPI_INT)";
  D[nd].base = "MPI_INT";
  D[nd].ops[0] = "MPI_SUM";
  D[nd].ops[1] = "MPI_MIN";
  D[nd].ops[2] = NULL;
  nd++;

  MPI_Type_vector(3, 1, 2, MPI_DOUBLE, &tmp);
  MPI_Type_create_resized(tmp, 0, 7 * (MPI_Aint)sizeof(double), &D[nd].dt);
  MPI_Type_free(&tmp);
  D[nd].name = "resized(vector(3,1,2,MPI_DOUBLE),56)";
  D[nd].base = "MPI_DOUBLE";
  D[nd].ops[0] = "MPI_SUM";
  D[nd].ops[1] = "MPI_MAX";
  D[nd].ops[2] = NULL;
  nd++;

  MPI_Type_contiguous(3, MPI_DOUBLE, &D[nd].dt);
  D[nd].name = "contig(3,MPI_DOUBLE)";
  D[nd].base = "MPI_DOUBLE";
  D[nd].ops[0] = "MPI_SUM";
  D[nd].ops[1] = NULL;
  D[nd].ops[2] = NULL;
  nd++;

  MPI_Type_dup(MPI_FLOAT, &D[nd].dt);
  D[nd].name = "dup(MPI_FLOAT)";
  D[nd].base = "MPI_FLOAT";
  D[nd].ops[0] = "MPI_SUM";
  D[nd].ops[1] = "MPI_MAX";
  D[nd].ops[2] = NULL;
  nd++;

  { /* mixed-type struct: not a reduction type in the standard; most MPIs reject */
    int bl[2] = {1, 1};
    MPI_Aint disp[2] = {offsetof(s_id, a), offsetof(s_id, b)};
    MPI_Datatype ty[2] = {MPI_INT, MPI_DOUBLE};
    MPI_Type_create_struct(2, bl, disp, ty, &tmp);
    MPI_Type_create_resized(tmp, 0, (MPI_Aint)sizeof(s_id), &D[nd].dt);
    MPI_Type_free(&tmp);
    D[nd].name = "struct{int,double}";
    D[nd].base = NULL;
    D[nd].ops[0] = "MPI_SUM";
    D[nd].ops[1] = NULL;
    D[nd].ops[2] = NULL;
    nd++;
  }

  for (int d = 0; d < nd; d++) {
    MPI_Type_commit(&D[d].dt);
    MPI_Aint lb, ext;
    MPI_Type_get_extent(D[d].dt, &lb, &ext);
    for (int k = 0; k < 3 && D[d].ops[k]; k++) {
      const opinfo_t* o = find_op(D[d].ops[k]);
      for (int c = 0; c < ncounts; c++)
        for (int ip = 0; ip < 2; ip++)
          for (int api = API_BLOCK; api <= API_WAIT; api++) {
            case_t K;
            memset(&K, 0, sizeof K);
            K.C = C;
            K.tname = D[d].name;
            K.dt = D[d].dt;
            K.ext = (size_t)ext;
            K.nr = 1;
            K.r[0].off = 0;
            K.r[0].len = (size_t)ext; /* gaps compared too */
            K.oname = o->name;
            K.op = o->op;
            K.count = counts[c];
            K.inplace = ip;
            K.api = api;
            K.cat = CAT_DERIVED;
            size_t cid = new_case();
            size_t n = (size_t)K.count * K.ext;
            memset(sbuf, 0, n);
            if (D[d].base) {
              const tinfo_t* b = find_type(D[d].base);
              fill(b, o->mode, sbuf, n / b->csize, C->rank, (uint64_t)cid);
            } else {
              const tinfo_t *ti = find_type("MPI_INT"), *td = find_type("MPI_DOUBLE");
              for (int e = 0; e < K.count; e++) {
                s_id* s = (s_id*)(sbuf + (size_t)e * K.ext);
                fill(ti, o->mode, (char*)&s->a, 1, C->rank, (uint64_t)cid + 7u * (unsigned)e);
                fill(td, o->mode, (char*)&s->b, 1, C->rank, (uint64_t)cid + 7u * (unsigned)e);
              }
            }
            run_case(cid, &K);
          }
    }
    MPI_Type_free(&D[d].dt);
  }
}

/* ---- user-defined ops on derived datatypes (pass-through, with data) ---- */

/* contig(2,MPI_INT): elementwise sum */
static void uop_pairsum(void* in, void* inout, int* len, MPI_Datatype* dt) {
  (void)dt;
  const int* a = in;
  int* b = inout;
  for (int i = 0; i < 2 * *len; i++) b[i] += a[i];
}

/* contig(4,MPI_INT) = 2x2 integer matrix: inout = in x inout (non-commutative) */
static void uop_matmul(void* in, void* inout, int* len, MPI_Datatype* dt) {
  (void)dt;
  const int* a = in;
  int* b = inout;
  for (int i = 0; i < *len; i++, a += 4, b += 4) {
    int r0 = a[0] * b[0] + a[1] * b[2], r1 = a[0] * b[1] + a[1] * b[3];
    int r2 = a[2] * b[0] + a[3] * b[2], r3 = a[2] * b[1] + a[3] * b[3];
    b[0] = r0;
    b[1] = r1;
    b[2] = r2;
    b[3] = r3;
  }
}

/* resized(vector(3,1,2,MPI_DOUBLE), extent 7 doubles): sum of the 3 values,
 * the gaps must not be touched */
static void uop_vecsum(void* in, void* inout, int* len, MPI_Datatype* dt) {
  (void)dt;
  const double* a = in;
  double* b = inout;
  for (int i = 0; i < *len; i++, a += 7, b += 7)
    for (int k = 0; k < 6; k += 2) b[k] += a[k];
}

static void user_derived(const commi_t* C, const int* counts, int ncounts) {
  MPI_Datatype tmp, dt[3];
  MPI_Type_contiguous(2, MPI_INT, &dt[0]);
  MPI_Type_contiguous(4, MPI_INT, &dt[1]);
  MPI_Type_vector(3, 1, 2, MPI_DOUBLE, &tmp);
  MPI_Type_create_resized(tmp, 0, 7 * (MPI_Aint)sizeof(double), &dt[2]);
  MPI_Type_free(&tmp);
  struct {
    const char *tname, *oname;
    MPI_User_function* fn;
    int commute;
    const char* base;
  } U[3] = {
      {"contig(2,MPI_INT)", "user(pairsum,commutative)", uop_pairsum, 1, "MPI_INT"},
      {"contig(4,MPI_INT)=2x2 matrix", "user(matmul,noncommutative)", uop_matmul, 0, NULL},
      {"resized(vector(3,1,2,MPI_DOUBLE),56)", "user(vecsum,commutative)", uop_vecsum, 1,
       "MPI_DOUBLE"},
  };
  for (int u = 0; u < 3; u++) {
    MPI_Op op;
    MPI_Aint lb, ext;
    MPI_Type_commit(&dt[u]);
    MPI_Type_get_extent(dt[u], &lb, &ext);
    MPI_Op_create(U[u].fn, U[u].commute, &op);
    for (int c = 0; c < ncounts; c++)
      for (int ip = 0; ip < 2; ip++)
        for (int api = API_BLOCK; api <= API_WAIT; api++) {
          case_t K;
          memset(&K, 0, sizeof K);
          K.C = C;
          K.tname = U[u].tname;
          K.dt = dt[u];
          K.ext = (size_t)ext;
          K.nr = 1;
          K.r[0].off = 0;
          K.r[0].len = (size_t)ext; /* gaps compared too */
          K.oname = U[u].oname;
          K.op = op;
          K.count = counts[c];
          K.inplace = ip;
          K.api = api;
          K.cat = CAT_USER_DERIVED;
          if (u == 2) { /* only the 3 doubles of the type map agree across ranks */
            K.nx = 3;
            for (int k = 0; k < 3; k++) {
              K.x[k].off = (size_t)(2 * k) * sizeof(double);
              K.x[k].len = sizeof(double);
            }
          }
          size_t cid = new_case();
          size_t n = (size_t)K.count * K.ext;
          memset(sbuf, 0, n);
          if (U[u].base) {
            const tinfo_t* b = find_type(U[u].base);
            fill(b, M_SUM, sbuf, n / b->csize, C->rank, (uint64_t)cid);
          } else {
            /* matrices with entries in {-1,0,1}, mostly non-commuting */
            uint64_t base = mix(((uint64_t)(unsigned)C->rank << 32) ^ mix((uint64_t)cid));
            int* m = (int*)sbuf;
            for (size_t e = 0; e < (size_t)K.count; e++, m += 4) {
              uint64_t h = mix((uint64_t)e ^ base);
              for (int k = 0; k < 4; k++) m[k] = (int)((h >> (8 * k)) % 3) - 1;
              if ((h >> 40) % 2) {
                m[0] = 1;
                m[1] = 1;
                m[2] = 0;
                m[3] = 1;
              }
            }
          }
          run_case(cid, &K);
        }
    MPI_Op_free(&op);
    MPI_Type_free(&dt[u]);
  }
}

/* ---- invalid arguments: must fail with the same error class as PMPI ---- */

static void invalid_args(const commi_t* C, const commi_t* inter) {
  const int cnt = 8;
  int *ibuf = calloc(64, sizeof(double)), *ibuf2 = calloc(64, sizeof(double));
  MPI_Datatype uncommitted;
  MPI_Type_contiguous(2, MPI_INT, &uncommitted);
  struct {
    const char* what;
    const void* sb;
    void* rb;
    int count;
    MPI_Datatype dt;
    MPI_Op op;
    const commi_t* C;
  } E[] = {
      {"aliased sendbuf==recvbuf", ibuf, ibuf, cnt, MPI_INT, MPI_SUM, C},
      {"MPI_DATATYPE_NULL", ibuf, ibuf2, cnt, MPI_DATATYPE_NULL, MPI_SUM, C},
      {"MPI_OP_NULL", ibuf, ibuf2, cnt, MPI_INT, MPI_OP_NULL, C},
      {"uncommitted datatype", ibuf, ibuf2, cnt, uncommitted, MPI_SUM, C},
      {"MPI_BAND on MPI_FLOAT", ibuf, ibuf2, cnt, MPI_FLOAT, MPI_BAND, C},
      {"MPI_MAXLOC on MPI_INT", ibuf, ibuf2, cnt, MPI_INT, MPI_MAXLOC, C},
      {"MPI_SUM on MPI_2INT", ibuf, ibuf2, cnt, MPI_2INT, MPI_SUM, C},
      {"MPI_SUM on MPI_BYTE", ibuf, ibuf2, cnt, MPI_BYTE, MPI_SUM, C},
      {"MPI_SUM on MPI_C_BOOL", ibuf, ibuf2, cnt, MPI_C_BOOL, MPI_SUM, C},
      {"MPI_MAX on MPI_C_DOUBLE_COMPLEX", ibuf, ibuf2, cnt, MPI_C_DOUBLE_COMPLEX, MPI_MAX, C},
      {"MPI_IN_PLACE on intercomm", MPI_IN_PLACE, ibuf2, cnt, MPI_INT, MPI_SUM, inter},
  };
  for (size_t e = 0; e < sizeof E / sizeof E[0]; e++) {
    if (!E[e].C) continue;
    for (int api = API_BLOCK; api <= API_WAIT; api++) {
      case_t K;
      memset(&K, 0, sizeof K);
      K.C = E[e].C;
      K.tname = "(invalid)";
      K.dt = E[e].dt;
      K.ext = 0;
      K.nr = 0;
      K.oname = E[e].what;
      K.count = E[e].count;
      K.api = api;
      K.cat = CAT_INVALID;
      size_t cid = new_case();
      for (int i = 0; i < 64; i++) ibuf[i] = i + C->rank;
      MPI_Request rq = MPI_REQUEST_NULL;
      int rc_ref;
      if (api == API_BLOCK) {
        rc_ref = PMPI_Allreduce(E[e].sb, E[e].rb, E[e].count, E[e].dt, E[e].op, K.C->comm);
      } else {
        rc_ref = PMPI_Iallreduce(E[e].sb, E[e].rb, E[e].count, E[e].dt, E[e].op, K.C->comm, &rq);
        if (rc_ref == MPI_SUCCESS) PMPI_Wait(&rq, MPI_STATUS_IGNORE);
      }
      if (rc_ref == MPI_SUCCESS) {
        /* the MPI does not diagnose this: do not call the function
         * under test with arguments whose behaviour is undefined */
        g_flags[cid] |= F_NA;
        if (g_verbose && g_wrank == 0)
          printf("NOTE: PMPI accepts invalid arguments '%s' (%s); not tested\n", E[e].what,
                 api_name[api]);
        continue;
      }
      int rc;
      g_calls[CAT_INVALID]++;
      if (api == API_BLOCK) {
        rc = MPI_Allreduce(E[e].sb, E[e].rb, E[e].count, E[e].dt, E[e].op, K.C->comm);
      } else {
        rc = MPI_Iallreduce(E[e].sb, E[e].rb, E[e].count, E[e].dt, E[e].op, K.C->comm, &rq);
        if (rc == MPI_SUCCESS) rc = MPI_Wait(&rq, MPI_STATUS_IGNORE);
      }
      char s1[128], s2[128];
      err_string(rc_ref, s1, sizeof s1);
      if (g_verbose && g_wrank == 0)
        printf("NOTE: invalid '%s' (%s): PMPI returns %s\n", E[e].what, api_name[api], s1);
      if (rc == MPI_SUCCESS) {
        fail(cid, &K, "invalid arguments accepted; PMPI returned %s", s1);
      } else if (err_class(rc) != err_class(rc_ref)) {
        err_string(rc, s2, sizeof s2);
#ifdef MPICH
        /* MPICH 4.0 under MPI_THREAD_MULTIPLE (what the shim asks for when fusion is on) answers
         * an MPI_IN_PLACE Iallreduce on an intercommunicator with MPI_ERR_OP from the test's own
         * PMPI call and MPI_ERR_BUFFER from the identical call the shim passes through, on np >=
         * 3; both reject it. Not explained yet (docs/limitations.md). */
        const int mpichIntercommInPlace =
            api != API_BLOCK && E[e].sb == MPI_IN_PLACE && E[e].C == inter;
#else
        const int mpichIntercommInPlace = 0;
#endif
        if (mpichIntercommInPlace) {
          if (g_wrank == 0)
            printf("NOTE: invalid '%s' (%s): PMPI returned %s, the call under test %s (known MPICH "
                   "difference, accepted)\n", E[e].what, api_name[api], s1, s2);
        } else {
          fail(cid, &K, "error class mismatch: PMPI returned %s, call under test returned %s", s1,
               s2);
        }
      }
    }
  }
  MPI_Type_free(&uncommitted);
  free(ibuf);
  free(ibuf2);
}

/* ------------------------------------------------------------------ */

static void mkcomm(commi_t* c, const char* name, MPI_Comm comm) {
  memset(c, 0, sizeof *c);
  c->name = name;
  c->comm = comm;
  c->chk = comm;
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm, &c->rank);
  MPI_Comm_size(comm, &c->size);
}

static int check_extents(void) {
  int bad = 0;
  for (int i = 0; i < nT; i++) {
    MPI_Aint lb, ext;
    MPI_Type_get_extent(T[i].dt, &lb, &ext);
    if ((size_t)ext != T[i].csize) {
      printf("FAIL[rank %d] internal: extent of %s is %ld, expected %zu\n", g_wrank, T[i].name,
             (long)ext, T[i].csize);
      bad = 1;
    }
  }
  return bad;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_wrank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_wsize);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-q") == 0)
      g_quick = 1;
    else if (strcmp(argv[i], "-v") == 0)
      g_verbose = 1;
    else if (strcmp(argv[i], "-n") == 0)
      g_no_intercomm = 1;
    else if (strcmp(argv[i], "-p") == 0)
      g_predefined_only = 1;
    else {
      if (g_wrank == 0) fprintf(stderr, "usage: %s [-q] [-v] [-n] [-p]\n", argv[0]);
      MPI_Finalize();
      return 2;
    }
  }
  if (g_no_intercomm && g_wrank == 0) printf("NOTE: intercommunicator section skipped (-n)\n");
  if (g_predefined_only && g_wrank == 0)
    printf("NOTE: user-op and derived-datatype sections skipped (-p)\n");
  double t0 = MPI_Wtime();
  init_tables();
  int internal_bad = check_extents();

  /* communicators */
  commi_t world, half, rev, oddeven, inter;
  MPI_Comm c_half, c_rev, c_oe, c_inter = MPI_COMM_NULL;
  mkcomm(&world, "world", MPI_COMM_WORLD);
  MPI_Comm_split(MPI_COMM_WORLD, g_wrank < g_wsize / 2, g_wrank, &c_half);
  MPI_Comm_split(MPI_COMM_WORLD, 0, g_wsize - 1 - g_wrank, &c_rev);
  MPI_Comm_split(MPI_COMM_WORLD, g_wrank % 2, g_wrank, &c_oe);
  mkcomm(&half, "half", c_half);
  mkcomm(&rev, "reversed", c_rev);
  mkcomm(&oddeven, "oddeven", c_oe);
  commi_t* interp = NULL;
  if (g_wsize >= 2 && !g_no_intercomm) {
    int remote_leader = (g_wrank < g_wsize / 2) ? g_wsize / 2 : 0;
    MPI_Intercomm_create(c_half, 0, MPI_COMM_WORLD, remote_leader, 4711, &c_inter);
    memset(&inter, 0, sizeof inter);
    inter.name = "intercomm(half)";
    inter.comm = c_inter;
    inter.chk = c_half;
    inter.inter = 1;
    inter.rank = half.rank;
    inter.size = half.size;
    MPI_Comm_set_errhandler(c_inter, MPI_ERRORS_RETURN);
    MPI_Comm_remote_size(c_inter, &inter.remote_size);
    interp = &inter;
  }

  /* scratch buffers: the largest case */
  size_t maxb = (size_t)slot_count(SLOT_BIG, 0) * sizeof(double);
  if (maxb < 4099 * sizeof(p_ldi) * 2) maxb = 4099 * sizeof(p_ldi) * 2;
  if (maxb < 4099 * 7 * sizeof(double)) maxb = 4099 * 7 * sizeof(double);
  g_bufbytes = maxb + GUARD;
  sbuf = malloc(g_bufbytes);
  scopy = malloc(g_bufbytes);
  rbuf = malloc(g_bufbytes);
  refbuf = malloc(g_bufbytes);
  bbuf = malloc(g_bufbytes);
  if (!sbuf || !scopy || !rbuf || !refbuf || !bbuf) {
    perror("malloc");
    PMPI_Abort(MPI_COMM_WORLD, 2);
  }

  /* 1. predefined type x op matrix, blocking */
  static const int full_slots[] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  static const int quick_slots[] = {0, 1, 4, 7};
  static const int quick_slots_split[] = {4};
  const commi_t* mcomms[4] = {&world, &half, &rev, &oddeven};
  for (int c = 0; c < (g_quick ? 2 : 4); c++) {
    if (g_verbose && g_wrank == 0) printf("section: matrix blocking on %s\n", mcomms[c]->name);
    if (!g_quick)
      matrix(mcomms[c], full_slots, 9, API_BLOCK, 1, 1);
    else if (c == 0)
      matrix(mcomms[c], quick_slots, 4, API_BLOCK, 1, 1);
    else
      matrix(mcomms[c], quick_slots_split, 1, API_BLOCK, 0, 1);
  }

  /* 2. the same matrix through MPI_Iallreduce + MPI_Wait (fewer counts),
   *    and MPI_Iallreduce + MPI_Test polling */
  {
    static const int nb_slots_full[] = {0, 1, 2, 4, 6, 8};
    static const int nb_slots_quick[] = {4};
    const commi_t* nbc[4] = {&world, &rev, &half, &oddeven};
    for (int c = 0; c < (g_quick ? 1 : 4); c++) {
      if (g_verbose && g_wrank == 0) printf("section: matrix Iallreduce on %s\n", nbc[c]->name);
      if (!g_quick)
        matrix(nbc[c], nb_slots_full, 6, API_WAIT, c == 0, 1);
      else
        matrix(nbc[c], nb_slots_quick, 1, API_WAIT, 0, 3);
    }
    static const int test_slots[] = {4, 7};
    if (!g_quick)
      matrix(&world, test_slots, 2, API_TEST, 0, 1);
    else
      matrix(&world, test_slots + 1, 1, API_TEST, 0, 6);
  }

  /* 3. several MPI_Iallreduce outstanding at once */
  if (g_verbose && g_wrank == 0) printf("section: batches\n");
  {
    const int p = world.size;
    for (int mode = DONE_WAITALL; mode <= DONE_WAITANY; mode++) {
      const commi_t* cs[4] = {&world, &half, &rev, &oddeven};
      for (int c = 0; c < (g_quick ? 1 : 4); c++) {
        const commi_t* C = cs[c];
        bspec_t b[] = {
            {C, "MPI_DOUBLE", "MPI_SUM", 4099, 0, 0},
            {C, "MPI_FLOAT", "MPI_SUM", 1000, 1, 0},
            {C, "MPI_INT", "MPI_MAX", C->size + 1, 0, 0},
            {C, "MPI_INT", "MPI_MAX", C->size + 1, 0, 1}, /* shares send buffer */
            {C, "MPI_LONG_LONG", "MPI_BXOR", 13, 1, 0},
            {C, "MPI_DOUBLE_INT", "MPI_MINLOC", 1000, 0, 0},
            {C, "MPI_C_DOUBLE_COMPLEX", "MPI_PROD", 7, 0, 0},
            {C, "MPI_UNSIGNED_CHAR", "MPI_LOR", 1, 1, 0},
            {C, "MPI_INT", "MPI_SUM", 0, 0, 0},
            {C, "MPI_DOUBLE", "MPI_MIN", 65539, 1, 0},
        };
        batch(b, (int)(sizeof b / sizeof b[0]), mode);
      }
      /* requests on several communicators outstanding together */
      bspec_t x[] = {
          {&world, "MPI_DOUBLE", "MPI_SUM", 5000, 0, 0},
          {&half, "MPI_DOUBLE", "MPI_SUM", 5000, 0, 0},
          {&rev, "MPI_INT", "MPI_SUM", 777, 1, 0},
          {&oddeven, "MPI_FLOAT", "MPI_MAX", p + 1, 0, 0},
          {&world, "MPI_INT64_T", "MPI_BAND", 4099, 1, 0},
          {&half, "MPI_2INT", "MPI_MAXLOC", 100, 0, 0},
      };
      batch(x, (int)(sizeof x / sizeof x[0]), mode);
    }
  }

  /* 4. user-defined ops (pass-through) */
  if (g_verbose && g_wrank == 0 && !g_predefined_only) printf("section: user ops\n");
  if (!g_predefined_only) {
    static const int uc_full[] = {0, 1, 7, 1000, 4099, 65539};
    static const int uc_quick[] = {0, 1, 1000};
    user_ops(&world, g_quick ? uc_quick : uc_full, g_quick ? 3 : 6);
    if (!g_quick) user_ops(&rev, uc_full, 6);
  }

  /* 5. derived datatypes with predefined ops (pass-through) */
  if (g_verbose && g_wrank == 0 && !g_predefined_only) printf("section: derived types\n");
  if (!g_predefined_only) {
    static const int dc_full[] = {0, 1, 7, 1000, 4099};
    static const int dc_quick[] = {0, 7, 1000};
    derived(&world, g_quick ? dc_quick : dc_full, g_quick ? 3 : 5);
    if (!g_quick) derived(&half, dc_full, 5);
  }

  /* 5b. user-defined ops on derived datatypes (pass-through, with data) */
  if (!g_predefined_only) {
    static const int uc_full[] = {0, 1, 7, 1000, 4099};
    static const int uc_quick[] = {1, 1000};
    user_derived(&world, g_quick ? uc_quick : uc_full, g_quick ? 2 : 5);
    if (!g_quick) user_derived(&rev, uc_full, 5);
  }

  /* 6. intercommunicator */
  if (interp) {
    if (g_verbose && g_wrank == 0) printf("section: intercommunicator\n");
    static const char* it[][2] = {
        {"MPI_INT", "MPI_SUM"}, {"MPI_DOUBLE", "MPI_MAX"}, {"MPI_FLOAT_INT", "MPI_MINLOC"}};
    static const int ic[] = {0, 1, 7, 1000};
    for (int k = 0; k < 3; k++)
      for (int c = 0; c < 4; c++)
        for (int api = API_BLOCK; api <= API_WAIT; api++)
          predefined_case(interp, find_type(it[k][0]), find_op(it[k][1]), ic[c], 0, api);
  }

  /* 7. invalid arguments */
  if (g_verbose && g_wrank == 0) printf("section: invalid arguments\n");
  invalid_args(&world, interp);

  /* ---- totals ---- */
  long nc[2] = {(long)g_ncases, -(long)g_ncases}, ncr[2];
  PMPI_Allreduce(nc, ncr, 2, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
  int mismatch = (ncr[0] != -ncr[1]);
  unsigned char* all = g_wrank == 0 ? malloc(g_ncases ? g_ncases : 1) : NULL;
  if (!mismatch)
    PMPI_Reduce(g_flags, all, (int)g_ncases, MPI_UNSIGNED_CHAR, MPI_BOR, 0, MPI_COMM_WORLD);
  int anybad = internal_bad, anybad_all = 0;
  PMPI_Reduce(&anybad, &anybad_all, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
  int exitcode = 0;
  if (g_wrank == 0) {
    long passed = 0, failed = 0, na = 0;
    if (mismatch) {
      printf("FAIL internal: ranks ran different numbers of cases (%ld vs %ld)\n", -ncr[1], ncr[0]);
      failed = 1;
    } else {
      for (size_t i = 0; i < g_ncases; i++) {
        if (all[i] & F_FAIL)
          failed++;
        else if (all[i] & F_NA)
          na++;
        else
          passed++;
      }
    }
    if (anybad_all) failed++;
    if (na) printf("NOTE: %ld cases not applicable (rejected by the MPI library itself)\n", na);
    printf("TIME %.2f s, np=%d, mode=%s\n", MPI_Wtime() - t0, g_wsize, g_quick ? "quick" : "full");
    printf("CALLS engine_eligible=%ld user_op=%ld derived=%ld\n", g_calls[CAT_ELIG],
           g_calls[CAT_USER], g_calls[CAT_DERIVED]);
    printf("CALLS_OTHER user_op_derived=%ld zero_count=%ld intercomm=%ld invalid_args=%ld\n",
           g_calls[CAT_USER_DERIVED], g_calls[CAT_ZERO], g_calls[CAT_INTER], g_calls[CAT_INVALID]);
    printf("%ld passed, %ld failed\n", passed, failed);
    fflush(stdout);
    exitcode = failed ? 1 : 0;
  }
  PMPI_Bcast(&exitcode, 1, MPI_INT, 0, MPI_COMM_WORLD);

  if (c_inter != MPI_COMM_NULL) MPI_Comm_free(&c_inter);
  MPI_Comm_free(&c_half);
  MPI_Comm_free(&c_rev);
  MPI_Comm_free(&c_oe);
  free(all);
  free(g_flags);
  free(sbuf);
  free(scopy);
  free(rbuf);
  free(refbuf);
  free(bbuf);
  MPI_Finalize();
  return exitcode;
}
