/* The tables behind hoop.h's types: each result code's sentence, each dtype's name and size, each
 * op's name. Here, on the ground floor, so that every layer names them without calling an entry
 * point; api.c's hoop_error_string, hoop_dtype_name, hoop_dtype_size and hoop_op_name return
 * these. */
#ifndef HOOP_TABLES_H
#define HOOP_TABLES_H

#include <stddef.h>

#include "hoop.h"

/* Static strings, never NULL: "unknown error", "invalid-dtype", "invalid-op" outside the enums. */
const char *hoop__error_string(hoop_result_t r);
/* The code's name in hoop.h ("HOOP_ERR_TIMEOUT"), for what tools read (the flight recorder's
 * dump); "unknown" outside the enum. */
const char *hoop__error_name(hoop_result_t r);
const char *hoop__dtype_name(hoop_dtype_t dt);
const char *hoop__op_name(hoop_op_t op);
/* Bytes per element; 0 for a value that is no dtype. */
size_t hoop__dtype_size(hoop_dtype_t dt);

#endif
