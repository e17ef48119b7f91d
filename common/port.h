/* The draw of rank 0's port (src/base/port.h, the library's own) under the names hooprun and the
 * tests use: one draw for all, so that the library and the programs beside it pick alike. */
#ifndef HOOP_COMMON_PORT_H
#define HOOP_COMMON_PORT_H

#include "../src/base/port.h"

typedef hoop__port_draw_t port_draw_t;

static inline void port_draw_start(port_draw_t *d, int tries) { hoop__port_draw_start(d, tries); }
static inline int port_draw_next(port_draw_t *d) { return hoop__port_draw_next(d); }

#endif
