/* RDMA device selection: HOOP_IB_HCA and HOOP_IB_GID_INDEX parsing (prefixes, exact names,
 * exclusion, ports, bad input), the GID choice, and discovery over a test double of the verbs table
 * (fake devices, ports and GID tables; no RDMA hardware or library needed). */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "transport/ibv_dev.h"

static hoop__ibv_hca_t parse_ok(const char *spec)
{
    hoop__ibv_hca_t h;
    char err[256] = "";
    if (hoop__ibv_hca_parse(spec, &h, err, sizeof(err)) != 0)
        fail_msg("\"%s\": %s", spec ? spec : "(unset)", err);
    return h;
}

/* Parses a bad spec; the sentence must name the variable and contain want. */
static void parse_bad(const char *spec, const char *want)
{
    hoop__ibv_hca_t h;
    char err[256] = "";
    assert_int_equal(hoop__ibv_hca_parse(spec, &h, err, sizeof(err)), -1);
    if (strstr(err, "HOOP_IB_HCA") == NULL || strstr(err, want) == NULL)
        fail_msg("\"%s\": said \"%s\", wanted \"%s\"", spec, err, want);
    assert_int_equal(h.n, 0);
}

static void hca_empty_selects_all(void **state)
{
    (void)state;
    const char *specs[] = {NULL, "", "  "};
    for (int i = 0; i < 3; i++) {
        hoop__ibv_hca_t h = parse_ok(specs[i]);
        assert_int_equal(h.n, 0);
        assert_true(hoop__ibv_hca_match(&h, "mlx5_0", 1));
        assert_true(hoop__ibv_hca_match(&h, "rxe0", 2));
    }
}

static void hca_prefixes(void **state)
{
    (void)state;
    hoop__ibv_hca_t h = parse_ok("mlx5");
    assert_int_equal(h.n, 1);
    assert_false(h.exclude);
    assert_false(h.exact);
    assert_string_equal(h.e[0].name, "mlx5");
    assert_int_equal(h.e[0].port, 0);
    assert_true(hoop__ibv_hca_match(&h, "mlx5_0", 1));
    assert_true(hoop__ibv_hca_match(&h, "mlx5_11", 2));
    assert_true(hoop__ibv_hca_match(&h, "mlx5", 1));
    assert_false(hoop__ibv_hca_match(&h, "mlx4_0", 1));
    assert_false(hoop__ibv_hca_match(&h, "rxe0", 1));

    /* A prefix that is a whole name still takes longer ones: mlx5_1 is also mlx5_10. */
    h = parse_ok("mlx5_1,rxe");
    assert_int_equal(h.n, 2);
    assert_true(hoop__ibv_hca_match(&h, "mlx5_1", 1));
    assert_true(hoop__ibv_hca_match(&h, "mlx5_10", 1));
    assert_false(hoop__ibv_hca_match(&h, "mlx5_0", 1));
    assert_true(hoop__ibv_hca_match(&h, "rxe0", 1));
    assert_false(hoop__ibv_hca_match(&h, "siw0", 1));
}

static void hca_exact(void **state)
{
    (void)state;
    hoop__ibv_hca_t h = parse_ok("=mlx5_1,rxe0");
    assert_true(h.exact);
    assert_false(h.exclude);
    assert_true(hoop__ibv_hca_match(&h, "mlx5_1", 1));
    assert_false(hoop__ibv_hca_match(&h, "mlx5_10", 1));
    assert_false(hoop__ibv_hca_match(&h, "mlx5", 1));
    assert_true(hoop__ibv_hca_match(&h, "rxe0", 3));
    assert_false(hoop__ibv_hca_match(&h, "rxe01", 1));
}

static void hca_exclude(void **state)
{
    (void)state;
    hoop__ibv_hca_t h = parse_ok("^mlx5_1");
    assert_true(h.exclude);
    assert_false(h.exact);
    assert_false(hoop__ibv_hca_match(&h, "mlx5_1", 1));
    assert_false(hoop__ibv_hca_match(&h, "mlx5_10", 1)); /* a prefix, even when excluding */
    assert_true(hoop__ibv_hca_match(&h, "mlx5_0", 1));
    assert_true(hoop__ibv_hca_match(&h, "rxe0", 1));

    h = parse_ok("^=mlx5_1");
    assert_true(h.exclude);
    assert_true(h.exact);
    assert_false(hoop__ibv_hca_match(&h, "mlx5_1", 1));
    assert_true(hoop__ibv_hca_match(&h, "mlx5_10", 1));

    /* Excluding one port keeps the device's others. */
    h = parse_ok("^=mlx5_0:1,siw");
    assert_false(hoop__ibv_hca_match(&h, "mlx5_0", 1));
    assert_true(hoop__ibv_hca_match(&h, "mlx5_0", 2));
    assert_false(hoop__ibv_hca_match(&h, "siw", 1));
    assert_true(hoop__ibv_hca_match(&h, "siw0", 1)); /* exact: siw is not siw0 */
}

static void hca_ports(void **state)
{
    (void)state;
    hoop__ibv_hca_t h = parse_ok("mlx5_0:1,mlx5_1:2,rxe0");
    assert_int_equal(h.n, 3);
    assert_int_equal(h.e[0].port, 1);
    assert_int_equal(h.e[1].port, 2);
    assert_int_equal(h.e[2].port, 0);
    assert_true(hoop__ibv_hca_match(&h, "mlx5_0", 1));
    assert_false(hoop__ibv_hca_match(&h, "mlx5_0", 2));
    assert_false(hoop__ibv_hca_match(&h, "mlx5_1", 1));
    assert_true(hoop__ibv_hca_match(&h, "mlx5_1", 2));
    assert_true(hoop__ibv_hca_match(&h, "rxe0", 1));
    assert_true(hoop__ibv_hca_match(&h, "rxe0", 2));

    h = parse_ok("=dev:255");
    assert_int_equal(h.e[0].port, 255);

    /* Blanks around entries are what people type; they go. */
    h = parse_ok(" ^ mlx5_0:1 , mlx5_1 ");
    assert_true(h.exclude);
    assert_int_equal(h.n, 2);
    assert_string_equal(h.e[0].name, "mlx5_0");
    assert_string_equal(h.e[1].name, "mlx5_1");
}

static void hca_bad(void **state)
{
    (void)state;
    parse_bad("^", "no device after '^'");
    parse_bad("=", "no device after '='");
    parse_bad("^=", "no device after '^='");
    parse_bad("mlx5_0,,mlx5_1", "entry 2 is empty");
    parse_bad("mlx5_0,", "entry 2 is empty");
    parse_bad(",mlx5_0", "entry 1 is empty");
    parse_bad("mlx5_0:", "port \"\" of mlx5_0 is not a port number (1-255)");
    parse_bad("mlx5_0:0", "port \"0\" of mlx5_0");
    parse_bad("mlx5_0:256", "port \"256\" of mlx5_0");
    parse_bad("mlx5_0:x", "port \"x\" of mlx5_0");
    parse_bad("mlx5_0:1:2", "port \"1:2\" of mlx5_0");
    parse_bad("mlx5_0:-1", "port \"-1\"");
    parse_bad(":1", "entry 1 has a port but no device name");
    parse_bad("=^mlx5_0", "\"^mlx5_0\" is not a device name");
    parse_bad("mlx5_0,^mlx5_1", "\"^mlx5_1\" is not a device name");
    parse_bad("mlx5 0", "\"mlx5 0\" is not a device name");
    parse_bad("mlx5_0;mlx5_1", "is not a device name");

    char name[200];
    memset(name, 'a', 70);
    name[70] = '\0';
    parse_bad(name, "longer than 63 characters");

    char many[400] = "";
    for (int i = 0; i <= HOOP__IBV_HCA_MAX; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%sd%d", i ? "," : "", i);
    parse_bad(many, "more than 32 entries");
}

static hoop__ibv_gid_t gid(const char *text, hoop__ibv_gid_type_t type)
{
    hoop__ibv_gid_t g;
    memset(&g, 0, sizeof(g));
    g.type = type;
    if (text != NULL) assert_int_equal(inet_pton(AF_INET6, text, g.raw), 1);
    return g;
}

static void gid_choice(void **state)
{
    (void)state;
    char err[256];
    /* What rxe shows: a link-local RoCE v2 entry, then the IPv4 one. */
    hoop__ibv_gid_t rxe[] = {gid("fe80::fcc9:74ff:fe58:d048", HOOP__IBV_GID_ROCE_V2),
                             gid("::ffff:10.11.0.1", HOOP__IBV_GID_ROCE_V2)};
    assert_int_equal(hoop__ibv_gid_pick(rxe, 2, 1, -1, err, sizeof(err)), 1);
    assert_int_equal(hoop__ibv_gid_pick(rxe, 2, 1, 0, err, sizeof(err)), 0);

    /* A ConnectX port: v1 and v2 of each address; v2 of the IPv4 address wins, then a global v6. */
    hoop__ibv_gid_t cx[] = {gid("fe80::1", HOOP__IBV_GID_ROCE_V1),
                            gid("fe80::1", HOOP__IBV_GID_ROCE_V2),
                            gid("2001:db8::5", HOOP__IBV_GID_ROCE_V1),
                            gid("2001:db8::5", HOOP__IBV_GID_ROCE_V2),
                            gid("::ffff:192.168.1.5", HOOP__IBV_GID_ROCE_V1),
                            gid("::ffff:192.168.1.5", HOOP__IBV_GID_ROCE_V2)};
    assert_int_equal(hoop__ibv_gid_pick(cx, 6, 1, -1, err, sizeof(err)), 5);
    assert_int_equal(hoop__ibv_gid_pick(cx, 5, 1, -1, err, sizeof(err)), 3);
    assert_int_equal(hoop__ibv_gid_pick(cx, 3, 1, -1, err, sizeof(err)), 1);
    assert_int_equal(hoop__ibv_gid_pick(cx, 1, 1, -1, err, sizeof(err)), 0); /* v1 only: taken */

    /* Empty entries are skipped; all empty is an error that says what to do. */
    hoop__ibv_gid_t holes[] = {gid(NULL, HOOP__IBV_GID_ROCE_V2), gid(NULL, HOOP__IBV_GID_OTHER),
                               gid("::ffff:10.0.0.2", HOOP__IBV_GID_ROCE_V2)};
    assert_int_equal(hoop__ibv_gid_pick(holes, 3, 1, -1, err, sizeof(err)), 2);
    err[0] = '\0';
    assert_int_equal(hoop__ibv_gid_pick(holes, 2, 1, -1, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "no GID on the port"));
    assert_non_null(strstr(err, "IP address"));

    /* HOOP_IB_GID_INDEX must name a filled entry inside the table. */
    err[0] = '\0';
    assert_int_equal(hoop__ibv_gid_pick(holes, 3, 1, 0, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "HOOP_IB_GID_INDEX=0 names an empty GID table entry"));
    err[0] = '\0';
    assert_int_equal(hoop__ibv_gid_pick(holes, 3, 1, 3, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "HOOP_IB_GID_INDEX=3, but the port's GID table has 3 entries"));

    /* InfiniBand: index 0, whatever else is there. */
    hoop__ibv_gid_t ib[] = {gid("fe80::2:c903:0:1", HOOP__IBV_GID_IB),
                            gid("::ffff:10.0.0.9", HOOP__IBV_GID_ROCE_V2)};
    assert_int_equal(hoop__ibv_gid_pick(ib, 2, 0, -1, err, sizeof(err)), 0);

    char text[64];
    hoop__ibv_gid_str(rxe[1].raw, text, sizeof(text));
    assert_string_equal(text, "::ffff:10.11.0.1");
    assert_string_equal(hoop__ibv_gid_type_str(HOOP__IBV_GID_ROCE_V2), "RoCE v2");
    assert_int_equal(hoop__ibv_mtu_bytes(IBV_MTU_1024), 1024);
    assert_int_equal(hoop__ibv_mtu_bytes(IBV_MTU_4096), 4096);
    assert_int_equal(hoop__ibv_mtu_bytes(0), 0);
}

/* ---- discovery over a test double of the verbs table: two RoCE devices, one with a port down */

typedef struct {
    struct ibv_device dev;
    const char *name;
    int nports;
    enum ibv_port_state state[2];
    int ngid;
    hoop__ibv_gid_t gids[3];
} fake_dev_t;

typedef struct {
    struct ibv_context ctx; /* first: the table's functions get &ctx back */
    fake_dev_t *fd;
} fake_ctx_t;

static fake_dev_t fakes[2];
static struct ibv_device *fake_list[3];
static fake_ctx_t fake_ctx[2];

static struct ibv_device **double_get_device_list(int *n)
{
    *n = 2;
    fake_list[0] = &fakes[0].dev;
    fake_list[1] = &fakes[1].dev;
    fake_list[2] = NULL;
    return fake_list;
}

static void double_free_device_list(struct ibv_device **l) { (void)l; }

static fake_dev_t *fake_of(struct ibv_device *d)
{
    return d == &fakes[0].dev ? &fakes[0] : &fakes[1];
}

static const char *double_get_device_name(struct ibv_device *d) { return fake_of(d)->name; }

static struct ibv_context *double_open_device(struct ibv_device *d)
{
    fake_ctx_t *c = &fake_ctx[fake_of(d) == &fakes[0] ? 0 : 1];
    memset(c, 0, sizeof(*c));
    c->ctx.device = d;
    c->fd = fake_of(d);
    return &c->ctx;
}

static int double_close_device(struct ibv_context *c)
{
    (void)c;
    return 0;
}

static int double_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
    memset(a, 0, sizeof(*a));
    a->phys_port_cnt = (uint8_t)((fake_ctx_t *)c)->fd->nports;
    return 0;
}

static int double_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a)
{
    fake_dev_t *fd = ((fake_ctx_t *)c)->fd;
    memset(a, 0, sizeof(*a));
    a->state = fd->state[port - 1];
    a->link_layer = IBV_LINK_LAYER_ETHERNET;
    a->active_mtu = IBV_MTU_1024;
    a->gid_tbl_len = fd->ngid;
    return 0;
}

static int double_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index,
                               struct ibv_gid_entry *e, uint32_t flags, size_t size)
{
    (void)flags;
    (void)size;
    fake_dev_t *fd = ((fake_ctx_t *)c)->fd;
    const hoop__ibv_gid_t *g = &fd->gids[index];
    static const uint8_t zero[16];
    if (memcmp(g->raw, zero, 16) == 0) return ENODATA;
    memset(e, 0, sizeof(*e));
    memcpy(e->gid.raw, g->raw, 16);
    e->gid_index = index;
    e->port_num = port;
    e->gid_type = g->type == HOOP__IBV_GID_ROCE_V2 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
    return 0;
}

static const char *double_port_state_str(enum ibv_port_state s)
{
    return s == IBV_PORT_ACTIVE ? "PORT_ACTIVE" : "PORT_DOWN";
}

static hoop__ibv_t double_table(void)
{
    hoop__ibv_t v;
    memset(&v, 0, sizeof(v));
    v.get_device_list = double_get_device_list;
    v.free_device_list = double_free_device_list;
    v.get_device_name = double_get_device_name;
    v.open_device = double_open_device;
    v.close_device = double_close_device;
    v.query_device = double_query_device;
    v.query_port = double_query_port;
    v.query_gid_ex = double_query_gid_ex;
    v.port_state_str = double_port_state_str;

    memset(fakes, 0, sizeof(fakes));
    fakes[0].name = "roce_a";
    fakes[0].nports = 2;
    fakes[0].state[0] = IBV_PORT_ACTIVE;
    fakes[0].state[1] = IBV_PORT_DOWN;
    fakes[0].ngid = 2;
    fakes[0].gids[0] = gid("fe80::1", HOOP__IBV_GID_ROCE_V2);
    fakes[0].gids[1] = gid("::ffff:10.1.0.1", HOOP__IBV_GID_ROCE_V2);
    fakes[1].name = "roce_b";
    fakes[1].nports = 1;
    fakes[1].state[0] = IBV_PORT_ACTIVE;
    fakes[1].ngid = 3;
    fakes[1].gids[0] = gid("fe80::2", HOOP__IBV_GID_ROCE_V1);
    fakes[1].gids[1] = gid("fe80::2", HOOP__IBV_GID_ROCE_V2);
    fakes[1].gids[2] = gid("::ffff:10.2.0.1", HOOP__IBV_GID_ROCE_V2);
    return v;
}

static int discover(const hoop__ibv_t *v, const char *spec, int gid_index, hoop__ibv_port_t *out,
                    char *err)
{
    hoop__ibv_hca_t h = parse_ok(spec);
    err[0] = '\0';
    return hoop__ibv_discover(v, &h, gid_index, out, 8, NULL, err, 256);
}

static void discovery(void **state)
{
    (void)state;
    hoop__ibv_t v = double_table();
    hoop__ibv_port_t p[8];
    char err[256], desc[160];

    /* Every active port, each with its IPv4 RoCE v2 GID; roce_a:2 is down. */
    assert_int_equal(discover(&v, NULL, -1, p, err), 2);
    assert_string_equal(p[0].dev, "roce_a");
    assert_int_equal(p[0].port, 1);
    assert_int_equal(p[0].gid_index, 1);
    assert_int_equal(p[0].mtu, 1024);
    assert_true(p[0].ethernet);
    assert_false(p[0].iwarp);
    hoop__ibv_port_str(&p[0], desc, sizeof(desc));
    assert_string_equal(desc, "roce_a:1 RoCE v2 GID 1 ::ffff:10.1.0.1 MTU 1024");
    assert_string_equal(p[1].dev, "roce_b");
    assert_int_equal(p[1].gid_index, 2);

    assert_int_equal(discover(&v, "^roce_a", -1, p, err), 1);
    assert_string_equal(p[0].dev, "roce_b");

    /* HOOP_IB_GID_INDEX applies to every port; where it names an empty entry the port is out. */
    assert_int_equal(discover(&v, NULL, 1, p, err), 2);
    assert_int_equal(p[0].gid_index, 1);
    assert_int_equal(p[1].gid_index, 1);
    assert_int_equal(discover(&v, NULL, 2, p, err), 1);
    assert_string_equal(p[0].dev, "roce_b");

    /* Nothing usable: the sentence lists each port and why. */
    assert_int_equal(discover(&v, "=roce_a:2,roce_c", -1, p, err), 0);
    assert_string_equal(err, "no usable RDMA port among roce_a:1 (HOOP_IB_HCA), roce_a:2 "
                             "(PORT_DOWN), roce_b:1 (HOOP_IB_HCA)");
    assert_int_equal(discover(&v, "=roce_a", 2, p, err), 0);
    assert_string_equal(err, "no usable RDMA port among roce_a:1 (HOOP_IB_GID_INDEX=2, but the "
                             "port's GID table has 2 entries), roce_a:2 (PORT_DOWN), roce_b:1 "
                             "(HOOP_IB_HCA)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hca_empty_selects_all),
        cmocka_unit_test(hca_prefixes),
        cmocka_unit_test(hca_exact),
        cmocka_unit_test(hca_exclude),
        cmocka_unit_test(hca_ports),
        cmocka_unit_test(hca_bad),
        cmocka_unit_test(gid_choice),
        cmocka_unit_test(discovery),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
