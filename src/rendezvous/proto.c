/* The wire of the tcp store: encoding and checking requests and replies (the layout is in proto.h).
 * Pure functions over bytes, so that the server's parser can be fuzzed. */
#include <string.h>

#include "rendezvous/proto.h"

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

long hoop__store_parse(const uint8_t *buf, size_t len, hoop__store_req_t *req)
{
    if (len == 0) return 0;
    if (buf == NULL) return -1;
    const uint8_t op = buf[0];
    if (op != 'S' && op != 'W' && op != 'C') return -1;
    if (len < 5) return 0;
    const uint32_t keylen = get_u32(buf + 1);
    if (keylen == 0 || keylen > HOOP__STORE_MAX_KEY) return -1;
    if (len < HOOP__STORE_REQ_HDR) return 0;
    const uint32_t vallen = get_u32(buf + 5);
    if (vallen > HOOP__STORE_MAX_VALUE) return -1;
    if (op == 'W' && vallen != HOOP__STORE_HOLD_LEN) return -1;
    const size_t total = (size_t)HOOP__STORE_REQ_HDR + keylen + vallen;
    if (len < total) return 0;
    /* A hold the server would not grant is no request of this build's clients. */
    if (op == 'W' && get_u32(buf + HOOP__STORE_REQ_HDR + keylen) > HOOP__STORE_MAX_HOLD_MS)
        return -1;
    /* Keys are C strings on every client. */
    if (memchr(buf + HOOP__STORE_REQ_HDR, '\0', keylen) != NULL) return -1;
    if (req != NULL) {
        req->op = op;
        req->key = (const char *)(buf + HOOP__STORE_REQ_HDR);
        req->keylen = keylen;
        req->val = buf + HOOP__STORE_REQ_HDR + keylen;
        req->vallen = vallen;
    }
    return (long)total;
}

size_t hoop__store_req_len(const uint8_t *hdr)
{
    return (size_t)HOOP__STORE_REQ_HDR + get_u32(hdr + 1) + get_u32(hdr + 5);
}

uint32_t hoop__store_hold_ms(const hoop__store_req_t *req) { return get_u32(req->val); }

void hoop__store_hold_encode(uint8_t *out, uint32_t ms) { put_u32(out, ms); }

size_t hoop__store_req_encode(uint8_t *out, uint8_t op, const char *key, size_t keylen,
                              size_t vallen)
{
    out[0] = op;
    put_u32(out + 1, (uint32_t)keylen);
    put_u32(out + 5, (uint32_t)vallen);
    memcpy(out + HOOP__STORE_REQ_HDR, key, keylen);
    return HOOP__STORE_REQ_HDR + keylen;
}

void hoop__store_rep_encode(uint8_t *out, uint8_t status, uint32_t vallen)
{
    out[0] = status;
    put_u32(out + 1, vallen);
}

int hoop__store_rep_check(uint8_t op, const uint8_t *rep, uint32_t *vallen)
{
    /* A server with a key speaks first: its hello starts "HOOPAUTH". */
    if (memcmp(rep, "HOOPA", HOOP__STORE_REP_HDR) == 0) return HOOP__STORE_REP_AUTH;
    const uint32_t rlen = get_u32(rep + 1);
    const uint8_t status = rep[0];
    const int ok = status == HOOP__STORE_REP_OK, missing = status == HOOP__STORE_REP_MISSING;
    const int claim_ok = op == 'C' && (status == HOOP__STORE_REP_TAKEN || (ok && rlen == 0));
    if ((op == 'C' && !claim_ok) || (op != 'C' && !ok && !missing) ||
        rlen > HOOP__STORE_MAX_VALUE || (missing && rlen != 0) || (op == 'S' && (!ok || rlen != 0)))
        return HOOP__STORE_REP_INVALID;
    *vallen = rlen;
    return HOOP__STORE_REP_VALID;
}
