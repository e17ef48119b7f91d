/* The verbs registration cache (src/transport/ibv_mr.h) on this host's real /proc/self/pagemap,
 * with a test double of the verbs table for registering (no RDMA device needed; the double's
 * ibv_reg_mr pins nothing, so the pages are touched first as the kernel would fault them in): a
 * reuse of the same pages hits; munmap + mmap at the same address, MADV_DONTNEED and a page copied
 * on write are found stale; an entry in use that went stale is left alone; eviction; "off".
 * Skipped where the frames cannot be read (not CAP_SYS_ADMIN). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "transport/ibv_mr.h"

#define BYTES (1u << 20)

/* The double: every registration a fresh struct, counted. */
static int regs, deregs;
static struct ibv_mr *fake_reg(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    (void)pd;
    (void)access;
    struct ibv_mr *mr = calloc(1, sizeof(*mr));
    if (mr == NULL) return NULL;
    mr->addr = addr;
    mr->length = len;
    mr->lkey = (uint32_t)++regs;
    return mr;
}
static int fake_dereg(struct ibv_mr *mr)
{
    deregs++;
    free(mr);
    return 0;
}

static hoop__ibv_t table = {.reg_mr = fake_reg, .dereg_mr = fake_dereg};

static void *map(void *at)
{
    void *p = mmap(at, BYTES, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (at != NULL ? MAP_FIXED : 0), -1, 0);
    assert_true(p != MAP_FAILED);
    memset(p, 0x5a, BYTES); /* present, as a registration leaves them */
    return p;
}

static int setup(void **state)
{
    static hoop__ibv_mrc_t c;
    static char probe[4096] __attribute__((aligned(4096)));
    probe[0] = 1;
    const char *why;
    char err[200];
    regs = deregs = 0;
    assert_int_equal(hoop__ibv_mrc_init(&c, &table, NULL, NULL, probe, &why, err, sizeof(err)), 0);
    assert_true(c.on);
    *state = &c;
    return 0;
}

static int teardown(void **state)
{
    hoop__ibv_mrc_fini(*state);
    assert_int_equal(regs, deregs); /* nothing left registered */
    return 0;
}

static void hit_then_stale(void **state)
{
    hoop__ibv_mrc_t *c = *state;
    uint8_t *b = map(NULL);
    int ref;
    struct ibv_mr *m1 = hoop__ibv_mrc_get(c, b + 100, 300007, IBV_ACCESS_REMOTE_WRITE, &ref);
    assert_non_null(m1);
    assert_true(ref >= 0);
    hoop__ibv_mrc_put(c, m1, ref);
    /* the same pages, a sub-range and a send (less access): hits */
    struct ibv_mr *m2 = hoop__ibv_mrc_get(c, b + 4096, 5000, 0, &ref);
    assert_ptr_equal(m2, m1);
    hoop__ibv_mrc_put(c, m2, ref);
    assert_int_equal(c->hits, 1);
    /* unmapped and mapped again at the same address: stale */
    assert_int_equal(munmap(b, BYTES), 0);
    assert_ptr_equal(map(b), b);
    struct ibv_mr *m3 = hoop__ibv_mrc_get(c, b + 100, 300007, IBV_ACCESS_REMOTE_WRITE, &ref);
    assert_int_equal(c->stale, 1);
    assert_int_equal(c->hits, 1);
    hoop__ibv_mrc_put(c, m3, ref);
    /* dropped by MADV_DONTNEED, then written again (new zeroed pages): stale */
    assert_int_equal(madvise(b, BYTES, MADV_DONTNEED), 0);
    memset(b, 7, BYTES);
    struct ibv_mr *m4 = hoop__ibv_mrc_get(c, b + 100, 300007, IBV_ACCESS_REMOTE_WRITE, &ref);
    assert_int_equal(c->stale, 2);
    hoop__ibv_mrc_put(c, m4, ref);
    /* not present at all (dropped, not touched again): stale, never a match of zeros */
    assert_int_equal(madvise(b, BYTES, MADV_DONTNEED), 0);
    struct ibv_mr *m5 = hoop__ibv_mrc_get(c, b + 100, 10, 0, &ref);
    assert_int_equal(c->stale, 3);
    hoop__ibv_mrc_put(c, m5, ref);
    munmap(b, BYTES);
}

static void stale_in_use_gets_its_own(void **state)
{
    hoop__ibv_mrc_t *c = *state;
    uint8_t *b = map(NULL);
    int r1, r2;
    struct ibv_mr *m1 = hoop__ibv_mrc_get(c, b, BYTES, 0, &r1);
    assert_true(r1 >= 0);
    assert_int_equal(madvise(b, BYTES, MADV_DONTNEED), 0);
    memset(b, 1, BYTES);
    struct ibv_mr *m2 = hoop__ibv_mrc_get(c, b, BYTES, 0, &r2);
    assert_int_equal(r2, -1); /* its own, the entry still in use */
    assert_ptr_not_equal(m2, m1);
    assert_int_equal(c->transient, 1);
    hoop__ibv_mrc_put(c, m2, r2);
    hoop__ibv_mrc_put(c, m1, r1);
    munmap(b, BYTES);
}

static void eviction_keeps_entries_in_use(void **state)
{
    hoop__ibv_mrc_t *c = *state;
    uint8_t *b = mmap(NULL, (MRC_MAX + 4) * 8192, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(b != MAP_FAILED);
    memset(b, 3, (MRC_MAX + 4) * 8192);
    int ref0;
    struct ibv_mr *m0 = hoop__ibv_mrc_get(c, b, 4096, 0, &ref0); /* held throughout */
    for (int i = 1; i < MRC_MAX + 4; i++) {
        int ref;
        struct ibv_mr *m = hoop__ibv_mrc_get(c, b + (size_t)i * 8192, 4096, 0, &ref);
        assert_non_null(m);
        assert_true(ref >= 0);
        hoop__ibv_mrc_put(c, m, ref);
    }
    assert_ptr_equal(c->ent[ref0].mr, m0); /* never evicted while in use */
    hoop__ibv_mrc_put(c, m0, ref0);
    munmap(b, (MRC_MAX + 4) * 8192);
}

static void off_and_bad_mode(void **state)
{
    (void)state;
    hoop__ibv_mrc_t c;
    const char *why;
    char err[200] = "";
    char probe[64] = {1};
    assert_int_equal(hoop__ibv_mrc_init(&c, &table, NULL, "off", probe, &why, err, sizeof(err)), 0);
    assert_false(c.on);
    assert_string_equal(why, "HOOP_IB_REG_CACHE=off");
    int ref;
    struct ibv_mr *m = hoop__ibv_mrc_get(&c, probe, sizeof(probe), 0, &ref);
    assert_int_equal(ref, -1);
    hoop__ibv_mrc_put(&c, m, ref);
    hoop__ibv_mrc_fini(&c);
    assert_int_equal(hoop__ibv_mrc_init(&c, &table, NULL, "yes", probe, &why, err, sizeof(err)),
                     -1);
    assert_non_null(strstr(err, "HOOP_IB_REG_CACHE=yes"));
}

int main(void)
{
    hoop__ibv_mrc_t c;
    const char *why;
    char err[200], probe[64] = {1};
    if (hoop__ibv_mrc_init(&c, &table, NULL, NULL, probe, &why, err, sizeof(err)) != 0 || !c.on) {
        printf("SKIP: no registration cache here: %s\n", why != NULL ? why : err);
        return 77;
    }
    hoop__ibv_mrc_fini(&c);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(hit_then_stale, setup, teardown),
        cmocka_unit_test_setup_teardown(stale_in_use_gets_its_own, setup, teardown),
        cmocka_unit_test_setup_teardown(eviction_keeps_entries_in_use, setup, teardown),
        cmocka_unit_test(off_and_bad_mode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
