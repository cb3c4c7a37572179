// GFSHIM_STATIC_TLS: the TLS model of the thread-locals on the hooks' pass-through path.
// Initial-exec where the shim is preloaded (static TLS, no __tls_get_addr call per access). Under
// SimGrid SMPI the shim is linked into a program that smpirun dlopens once per simulated rank,
// and every copy would take static TLS space that glibc keeps only a little of: the default
// model there.
#pragma once

#if defined(GFSHIM_SMPI)
#define GFSHIM_STATIC_TLS
#else
#define GFSHIM_STATIC_TLS __attribute__((tls_model("initial-exec")))
#endif
