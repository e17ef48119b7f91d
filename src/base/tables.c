#include "base/tables.h"

const char *hoop__error_string(hoop_result_t r)
{
    switch (r) {
    case HOOP_OK: return "success";
    case HOOP_ERR_INVALID_ARGUMENT: return "invalid argument";
    case HOOP_ERR_SYSTEM: return "system error";
    case HOOP_ERR_TIMEOUT: return "timed out";
    case HOOP_ERR_PEER_LOST: return "peer lost";
    case HOOP_ERR_MISMATCH: return "ranks disagree (mismatched calls or settings)";
    case HOOP_ERR_AUTH: return "authentication failed";
    case HOOP_ERR_UNSUPPORTED: return "unsupported";
    case HOOP_ERR_ABORTED: return "communicator aborted";
    case HOOP_ERR_NO_MEMORY: return "out of memory";
    case HOOP_ERR_INTERNAL: return "internal error";
    }
    return "unknown error";
}

const char *hoop__error_name(hoop_result_t r)
{
    switch (r) {
    case HOOP_OK: return "HOOP_OK";
    case HOOP_ERR_INVALID_ARGUMENT: return "HOOP_ERR_INVALID_ARGUMENT";
    case HOOP_ERR_SYSTEM: return "HOOP_ERR_SYSTEM";
    case HOOP_ERR_TIMEOUT: return "HOOP_ERR_TIMEOUT";
    case HOOP_ERR_PEER_LOST: return "HOOP_ERR_PEER_LOST";
    case HOOP_ERR_MISMATCH: return "HOOP_ERR_MISMATCH";
    case HOOP_ERR_AUTH: return "HOOP_ERR_AUTH";
    case HOOP_ERR_UNSUPPORTED: return "HOOP_ERR_UNSUPPORTED";
    case HOOP_ERR_ABORTED: return "HOOP_ERR_ABORTED";
    case HOOP_ERR_NO_MEMORY: return "HOOP_ERR_NO_MEMORY";
    case HOOP_ERR_INTERNAL: return "HOOP_ERR_INTERNAL";
    }
    return "unknown";
}

const char *hoop__dtype_name(hoop_dtype_t dt)
{
    static const char *const names[] = {"int8",   "uint8",   "int32",    "uint32",  "int64",
                                        "uint64", "float16", "bfloat16", "float32", "float64"};
    _Static_assert(sizeof(names) / sizeof(names[0]) == HOOP_DTYPE_COUNT, "a dtype without a name");
    return (unsigned)dt < HOOP_DTYPE_COUNT ? names[dt] : "invalid-dtype";
}

const char *hoop__op_name(hoop_op_t op)
{
    static const char *const names[] = {"sum", "prod", "min", "max", "avg"};
    _Static_assert(sizeof(names) / sizeof(names[0]) == HOOP_OP_COUNT, "an op without a name");
    return (unsigned)op < HOOP_OP_COUNT ? names[op] : "invalid-op";
}

size_t hoop__dtype_size(hoop_dtype_t dt)
{
    static const unsigned char sizes[] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
    _Static_assert(sizeof(sizes) == HOOP_DTYPE_COUNT, "a dtype without a size");
    return (unsigned)dt < HOOP_DTYPE_COUNT ? sizes[dt] : 0;
}
