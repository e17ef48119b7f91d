/* Preloaded into hooprun by launcher_test.sh: pipe2 fails with EMFILE from its call number
 * HOOP_TEST_PIPE2_FAIL_AT on (1 the first), so that a rank's start fails at a chosen point. */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

int pipe2(int fds[2], int flags)
{
    static int calls;
    const char *at = getenv("HOOP_TEST_PIPE2_FAIL_AT");
    if (at != NULL && ++calls >= atoi(at)) {
        errno = EMFILE;
        return -1;
    }
    int (*real)(int[2], int) = (int (*)(int[2], int))dlsym(RTLD_NEXT, "pipe2");
    if (real == NULL) {
        errno = ENOSYS;
        return -1;
    }
    return real(fds, flags);
}
