/*
 * wcmp: compares two raw float32 weight files (ddp_train --dump-weights).
 *
 *   wcmp A B --tol T        exit 0 if max|a - b| <= T * max|b| (same length, no NaN or infinity)
 *   wcmp A B --differ T     exit 0 if max|a - b| > T * max|b| (a control: the files really differ)
 *   wcmp A B --exact        exit 0 if every value has the same bits
 *
 * The difference is measured against the largest weight, not element by element: training leaves
 * weights near zero whose relative error means nothing, while the scale of the largest weight is
 * what float32 rounding errors are proportional to. Prints the figures either way.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *load(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "wcmp: cannot open %s\n", path);
        exit(2);
    }
    size_t cap = 1024, len = 0;
    float *v = malloc(cap * sizeof(float));
    size_t got;
    while (v != NULL && (got = fread(v + len, sizeof(float), cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            float *w = realloc(v, 2 * cap * sizeof(float));
            if (w == NULL) free(v);
            v = w;
            cap *= 2;
        }
    }
    int tail = fgetc(f) != EOF;
    fclose(f);
    if (v == NULL || tail) {
        fprintf(stderr, "wcmp: cannot read %s (out of memory, or not a whole number of floats)\n",
                path);
        exit(2);
    }
    *n = len;
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 4 || (strcmp(argv[3], "--exact") != 0 && argc != 5) ||
        (strcmp(argv[3], "--tol") != 0 && strcmp(argv[3], "--differ") != 0 &&
         strcmp(argv[3], "--exact") != 0)) {
        fprintf(stderr, "usage: wcmp A B --tol T | --differ T | --exact\n");
        return 2;
    }
    double tol = argc == 5 ? strtod(argv[4], NULL) : 0.0;
    size_t na, nb;
    float *a = load(argv[1], &na), *b = load(argv[2], &nb);
    if (na != nb || na == 0) {
        fprintf(stderr, "wcmp: %s has %zu values, %s has %zu\n", argv[1], na, argv[2], nb);
        return 1;
    }
    double max_diff = 0, max_b = 0;
    size_t at = 0, bits_differ = 0;
    for (size_t k = 0; k < na; k++) {
        if (!isfinite(a[k]) || !isfinite(b[k])) {
            fprintf(stderr, "wcmp: value %zu is not finite (%g, %g)\n", k, (double)a[k],
                    (double)b[k]);
            return 1;
        }
        double d = fabs((double)a[k] - (double)b[k]);
        if (d > max_diff) {
            max_diff = d;
            at = k;
        }
        if (fabs((double)b[k]) > max_b) max_b = fabs((double)b[k]);
        bits_differ += memcmp(&a[k], &b[k], sizeof(float)) != 0;
    }
    double rel = max_b > 0 ? max_diff / max_b : max_diff;
    printf("wcmp: %zu values, %zu differ in their bits; max |a-b| = %.3e at %zu, max |b| = %.3e, "
           "relative %.3e\n",
           na, bits_differ, max_diff, at, max_b, rel);
    free(a);
    free(b);
    if (strcmp(argv[3], "--exact") == 0) return bits_differ == 0 ? 0 : 1;
    if (strcmp(argv[3], "--tol") == 0) return rel <= tol ? 0 : 1;
    return rel > tol ? 0 : 1;
}
