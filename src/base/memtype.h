/* Memory types: where a buffer lives. Here, below every layer, so that the transports (which say
 * which types they move) and the runtime's memory layer (which copies and reduces in them) name
 * them alike without including each other. */
#ifndef HOOP_MEMTYPE_H
#define HOOP_MEMTYPE_H

typedef enum {
    HOOP__MEM_HOST = 0, /* zero: a call or transfer built without saying lives in host memory */
    HOOP__MEM_CUDA,     /* CUDA device memory, through the CUDA module (runtime/mem_cuda.c) */
    HOOP__MEM_COUNT
} hoop__mem_type_t;

/* "host", "cuda"; "unknown" for a value that is no memory type. */
static inline const char *hoop__mem_type_name(int type)
{
    static const char *const names[HOOP__MEM_COUNT] = {"host", "cuda"};
    return type >= 0 && type < HOOP__MEM_COUNT ? names[type] : "unknown";
}

#endif
