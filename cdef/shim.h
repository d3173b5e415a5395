/* cdef/shim.h - the foundation's C shim (csrc/plb_batch.c, plb_wait.c, plb_log.c). */

struct plb_batch {
    uint8_t *buf;
    size_t used;
    uint32_t *start;
    uint32_t *len;
    uint32_t *tag;
    uint64_t *lost;
    uint32_t n;
    int err;
    size_t byte_limit;
    int full;
    ...;
};
struct plb_rb_collect_ctx {
    struct plb_batch *batch;
    uint32_t ring;
};
struct plb_batch *plb_batch_new(uint32_t ncap, size_t cap);
void plb_batch_free(struct plb_batch *b);
void plb_batch_reset(struct plb_batch *b);
int plb_ringbuf_collect(void *ctx, void *data, size_t size);
void plb_perfbuf_collect(void *ctx, int cpu, void *data, uint32_t size);
void plb_perfbuf_collect_lost(void *ctx, int cpu, unsigned long long cnt);

struct plb_waiter {
    int epfd;
    int evfd;
};
int plb_waiter_init(struct plb_waiter *w, int fd);
int plb_waiter_add(struct plb_waiter *w, int fd);
int plb_waiter_add_writable(struct plb_waiter *w, int fd);
int plb_waiter_wait(struct plb_waiter *w, int timeout_ms);
void plb_waiter_wake(struct plb_waiter *w);
void plb_waiter_close(struct plb_waiter *w);
int plb_fill_hole(void *addr, size_t len);

extern "Python+C" void plb_py_log(int level, const char *msg);
void plb_log_install(int max_level);
const char *plb_package_version(void);
const char *plb_libbpf_release(void);

/* errno values the Python layer compares against (from <errno.h>). */
#define PLB_BATCH_FULL ...
#define ECANCELED ...
#define EINTR ...
#define ENOENT ...
#define EINVAL ...
#define ENOMEM ...
#define E2BIG ...
#define EBADF ...
#define EAGAIN ...
#define EOPNOTSUPP ...
#define ESRCH ...
