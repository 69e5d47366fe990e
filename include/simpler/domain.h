/*
 * simpler/domain.h — collectives from a C host: a communication domain of `ranks` sim chips
 * (one rank per chip) that runs allreduce (sum), allgather and reduce-scatter of f32 or i32
 * vectors held in the caller's host memory (docs/c-abi.md §15, docs/comm.md §4).
 *
 * A SimplerDomain is a level-3 worker of its own: its chips, the collectives' chip code
 * (python/simpler/collectives/kernels/collective.c and orchestration.c, compiled with the
 * C compiler when the domain is made, through the kernel cache) and the two collective
 * callables (f32, i32). Each collective is one run on that worker: it copies the inputs in,
 * runs the kernels of every rank at once (one group task), and copies the outputs back only
 * when every rank succeeded, so a failed collective leaves the caller's outputs untouched.
 * Inputs and outputs may be the same memory (an in-place allreduce). Calls on one domain
 * from several threads run one after another.
 *
 * Same conventions as simpler/host.h: int32_t SimplerStatus results, simpler_last_error()
 * for the text (it names the argument that was wrong), opaque handles validated on every
 * call, a forked child refused.
 */
#ifndef SIMPLER_DOMAIN_H
#define SIMPLER_DOMAIN_H

#include "simpler/host.h"

#ifdef __cplusplus
extern "C" {
#define SIMPLER_DOMAIN_STATIC_ASSERT static_assert
#else
#define SIMPLER_DOMAIN_STATIC_ASSERT _Static_assert
#endif

typedef struct SimplerDomain SimplerDomain;

#define SIMPLER_DOMAIN_CONFIG_VERSION 1u

/* The most ranks (chips) one domain has. */
#define SIMPLER_DOMAIN_MAX_RANKS 64u

/* The longest wait of a collective, ms: below a chip's default op-execute timeout (45 s). */
#define SIMPLER_DOMAIN_MAX_TIMEOUT_MS 40000u

/*
 * How a domain is made. Zero (or NULL) means "the default" for every field after the header;
 * the same size/version rule as SimplerContextConfig. version must be 1.
 */
typedef struct SimplerDomainConfig {
    uint32_t size;                    /* sizeof(SimplerDomainConfig) */
    uint32_t version;                 /* SIMPLER_DOMAIN_CONFIG_VERSION */
    uint32_t ranks;                   /* chips, one rank each: 1..=SIMPLER_DOMAIN_MAX_RANKS (0: 2) */
    uint32_t reserved;                /* must be 0 */
    const SimplerContextConfig *chip; /* every chip's configuration (NULL: the defaults) */
    const char *cc;                   /* the C compiler command (NULL: $CC, else cc) */
    const char *cache_dir;            /* the kernel cache (NULL: $SIMPLER_CACHE_DIR, else
                                         $XDG_CACHE_HOME/simpler/kernels, else ~/.cache/...) */
} SimplerDomainConfig;

SIMPLER_DOMAIN_STATIC_ASSERT(sizeof(SimplerDomainConfig) == 40, "SimplerDomainConfig is 40 bytes");
SIMPLER_DOMAIN_STATIC_ASSERT(offsetof(SimplerDomainConfig, ranks) == 8, "DomainConfig.ranks");
SIMPLER_DOMAIN_STATIC_ASSERT(offsetof(SimplerDomainConfig, reserved) == 12, "DomainConfig.reserved");
SIMPLER_DOMAIN_STATIC_ASSERT(offsetof(SimplerDomainConfig, chip) == 16, "DomainConfig.chip");
SIMPLER_DOMAIN_STATIC_ASSERT(offsetof(SimplerDomainConfig, cc) == 24, "DomainConfig.cc");
SIMPLER_DOMAIN_STATIC_ASSERT(offsetof(SimplerDomainConfig, cache_dir) == 32,
                             "DomainConfig.cache_dir");

static inline SimplerDomainConfig simpler_domain_config_default(void) {
    SimplerDomainConfig c;
    unsigned char *p = (unsigned char *)&c;
    for (size_t i = 0; i < sizeof c; ++i) p[i] = 0;
    c.size = (uint32_t)sizeof c;
    c.version = SIMPLER_DOMAIN_CONFIG_VERSION;
    return c;
}

/* Starts the chips, compiles the chip code and registers the collectives. config may be
 * NULL (all defaults). A chip code that does not compile: INVALID_CALLABLE with the
 * compiler's text. *out is NULL on failure. */
int32_t simpler_domain_init(const SimplerDomainConfig *config, SimplerDomain **out);

/* The domain's rank count. */
int32_t simpler_domain_ranks(SimplerDomain *domain, uint32_t *out);

/*
 * The collectives. `inputs` and `outputs` are arrays of `ranks` pointers, rank order: rank r
 * reads inputs[r] and writes outputs[r], each aligned to its dtype (SIMPLER_DT_FLOAT32 or
 * SIMPLER_DT_INT32 of simpler/types.h). `count` is elements per rank (>= 1):
 *   allreduce       inputs[r]: count elements,       outputs[r]: count  (sum over ranks)
 *   allgather       inputs[r]: count elements,       outputs[r]: ranks*count (rank p's at p*count)
 *   reduce_scatter  inputs[r]: ranks*count elements, outputs[r]: count  (sum of the ranks' r-th blocks)
 * Sums run in rank order (every rank gets the same bits); int32 wraps. timeout_ms bounds each
 * wait of a rank for its peers (1..=SIMPLER_DOMAIN_MAX_TIMEOUT_MS; 0: 30 s); a wait that runs
 * out fails the collective with RUN_FAILED. Bad arguments: INVALID_ARGUMENT or NULL_POINTER
 * naming `dtype`, `count`, `timeout_ms`, `inputs`, `outputs`, `inputs[r]` or `outputs[r]`,
 * before anything runs.
 */
int32_t simpler_domain_allreduce(SimplerDomain *domain, uint32_t dtype, const void *const *inputs,
                                 void *const *outputs, uint64_t count, uint64_t timeout_ms);
int32_t simpler_domain_allgather(SimplerDomain *domain, uint32_t dtype, const void *const *inputs,
                                 void *const *outputs, uint64_t count, uint64_t timeout_ms);
int32_t simpler_domain_reduce_scatter(SimplerDomain *domain, uint32_t dtype,
                                      const void *const *inputs, void *const *outputs,
                                      uint64_t count, uint64_t timeout_ms);

/* Stops the chips and frees the handle (a collective running on another thread finishes
 * first); afterwards every entry on it returns SIMPLER_STATUS_INVALID_HANDLE. */
int32_t simpler_domain_destroy(SimplerDomain *domain);

#ifdef __cplusplus
}
#endif

#undef SIMPLER_DOMAIN_STATIC_ASSERT

#endif /* SIMPLER_DOMAIN_H */
