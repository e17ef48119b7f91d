/* Filling the PMIx function table (pmix_sym.h) from libpmix.so.2 at run time. */
#include "rendezvous/pmix_sym.h"

#include <dlfcn.h>
#include <string.h>

#include "base/log.h"

static const struct {
    const char *name;
    size_t off; /* of the pointer in hoop__pmix_t */
} syms[] = {
    {"PMIx_Init", offsetof(hoop__pmix_t, init)},
    {"PMIx_Finalize", offsetof(hoop__pmix_t, finalize)},
    {"PMIx_Put", offsetof(hoop__pmix_t, put)},
    {"PMIx_Commit", offsetof(hoop__pmix_t, commit)},
    {"PMIx_Fence", offsetof(hoop__pmix_t, fence)},
    {"PMIx_Get", offsetof(hoop__pmix_t, get)},
    {"PMIx_Error_string", offsetof(hoop__pmix_t, error_string)},
};

int hoop__pmix_load(hoop__pmix_t *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof(*t));
    dlerror();
    /* RTLD_LOCAL: its plugins find it on their own. Where the program already loaded libpmix
     * (Open MPI does), this is the same copy, whose PMIx_Init counts its callers. RTLD_NODELETE:
     * PMIx_Finalize leaves state (and may leave a thread winding down) that an unmapped library
     * would turn into lost memory or a crash; a later PMIx_Init in the same copy works again. */
    void *lib = dlopen(HOOP__PMIX_SONAME, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (lib == NULL) {
        const char *why = dlerror();
        if (why == NULL || strstr(why, "No such file") != NULL)
            hoop__say(err, errlen, HOOP__PMIX_SONAME " not found: install PMIx (Debian: libpmix2)");
        else
            hoop__say(err, errlen, "cannot load " HOOP__PMIX_SONAME ": %s", why);
        return -1;
    }
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *p = dlsym(lib, syms[i].name);
        if (p == NULL) {
            hoop__say(err, errlen, HOOP__PMIX_SONAME " has no %s: PMIx 3 or later is needed",
                      syms[i].name);
            dlclose(lib);
            memset(t, 0, sizeof(*t));
            return -1;
        }
        /* POSIX makes a data pointer from dlsym and a function pointer the same size and form. */
        memcpy((char *)t + syms[i].off, &p, sizeof(p));
    }
    t->lib = lib;
    return 0;
}

void hoop__pmix_unload(hoop__pmix_t *t)
{
    if (t->lib != NULL) dlclose(t->lib);
    memset(t, 0, sizeof(*t));
}
