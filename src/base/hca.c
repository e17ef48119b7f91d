/* HOOP_IB_HCA's list (hca.h), parsed where the configuration is read, so that a malformed one
 * fails init on every rank as any other setting does, whether or not the build has verbs. */
#include "base/hca.h"

#include <stdio.h>
#include <string.h>

#include "base/log.h"

static int name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

static int blank(char c) { return c == ' ' || c == '\t'; }

/* One entry, [b, e) with blanks around it already trimmed. */
static int parse_entry(const char *spec, int idx, const char *b, const char *e, hoop__ibv_hca_t *h,
                       char *err, size_t errlen)
{
    if (b == e) {
        hoop__say(err, errlen,
                  "HOOP_IB_HCA=\"%s\": entry %d is empty (a device name, or name:port)", spec, idx);
        return -1;
    }
    if (h->n == HOOP__IBV_HCA_MAX) {
        hoop__say(err, errlen, "HOOP_IB_HCA=\"%s\": more than %d entries", spec, HOOP__IBV_HCA_MAX);
        return -1;
    }
    const char *colon = memchr(b, ':', (size_t)(e - b));
    const char *ne = colon != NULL ? colon : e;
    int nlen = (int)(ne - b);
    if (nlen == 0) {
        hoop__say(err, errlen, "HOOP_IB_HCA=\"%s\": entry %d has a port but no device name", spec,
                  idx);
        return -1;
    }
    for (const char *c = b; c < ne; c++) {
        if (!name_char(*c)) {
            hoop__say(err, errlen,
                      "HOOP_IB_HCA=\"%s\": \"%.*s\" is not a device name (letters, digits, '_', "
                      "'-', '.'; '^' and '=' only at the start of the list)",
                      spec, nlen, b);
            return -1;
        }
    }
    if (nlen >= HOOP__IBV_NAME_MAX) {
        hoop__say(err, errlen,
                  "HOOP_IB_HCA=\"%s\": device name \"%.*s\" is longer than %d characters", spec,
                  nlen, b, HOOP__IBV_NAME_MAX - 1);
        return -1;
    }
    int port = 0;
    if (colon != NULL) {
        const char *p = colon + 1;
        int plen = (int)(e - p);
        long v = 0;
        int ok = plen > 0 && plen <= 3;
        for (const char *c = p; ok && c < e; c++) {
            if (*c < '0' || *c > '9')
                ok = 0;
            else
                v = v * 10 + (*c - '0');
        }
        if (!ok || v < 1 || v > 255) {
            hoop__say(err, errlen,
                      "HOOP_IB_HCA=\"%s\": port \"%.*s\" of %.*s is not a port number (1-255)",
                      spec, plen, p, nlen, b);
            return -1;
        }
        port = (int)v;
    }
    memcpy(h->e[h->n].name, b, (size_t)nlen);
    h->e[h->n].name[nlen] = '\0';
    h->e[h->n].port = port;
    h->n++;
    return 0;
}

int hoop__ibv_hca_parse(const char *spec, hoop__ibv_hca_t *h, char *err, size_t errlen)
{
    memset(h, 0, sizeof(*h));
    if (spec == NULL) return 0;
    const char *s = spec;
    while (blank(*s)) s++;
    if (*s == '\0') return 0;
    if (*s == '^') {
        h->exclude = 1;
        s++;
    }
    if (*s == '=') {
        h->exact = 1;
        s++;
    }
    const char *end = s + strlen(s);
    while (end > s && blank(end[-1])) end--;
    if (s == end) {
        hoop__say(err, errlen, "HOOP_IB_HCA=\"%s\": no device after '%s'", spec,
                  h->exclude && h->exact ? "^="
                  : h->exclude           ? "^"
                                         : "=");
        memset(h, 0, sizeof(*h));
        return -1;
    }
    int idx = 1;
    for (const char *b = s;; idx++) {
        const char *comma = memchr(b, ',', (size_t)(end - b));
        const char *e = comma != NULL ? comma : end;
        const char *tb = b, *te = e;
        while (tb < te && blank(*tb)) tb++;
        while (te > tb && blank(te[-1])) te--;
        if (parse_entry(spec, idx, tb, te, h, err, errlen) != 0) {
            memset(h, 0, sizeof(*h));
            return -1;
        }
        if (comma == NULL) break;
        b = comma + 1;
    }
    return 0;
}

int hoop__ibv_hca_match(const hoop__ibv_hca_t *h, const char *dev, int port)
{
    if (h->n == 0) return 1;
    int hit = 0;
    for (int i = 0; i < h->n && !hit; i++) {
        const char *name = h->e[i].name;
        int same = h->exact ? strcmp(dev, name) == 0 : strncmp(dev, name, strlen(name)) == 0;
        hit = same && (h->e[i].port == 0 || h->e[i].port == port);
    }
    return h->exclude ? !hit : hit;
}
