/*
 * quorumlock-testbed fake wall clock: an LD_PRELOAD shim for redis-server.
 *
 * Interposes clock_gettime (CLOCK_REALTIME and CLOCK_REALTIME_COARSE only;
 * every other clock id passes through untouched), gettimeofday and time.
 *
 *     fake = real + offset + drift
 *
 * where drift integrates (rate - 1) over CLOCK_MONOTONIC time since the
 * shim was loaded. A rate change re-anchors (the fake clock stays
 * continuous); an offset change steps the clock by the difference.
 *
 * The settings come from the control file named by the environment variable
 * QUORUMLOCK_FAKECLOCK: one line "<rate> <offset_ms>", e.g. "1.5 0" or
 * "1.0 -300". The file is re-read at most once per millisecond of
 * CLOCK_MONOTONIC, lazily, from whichever thread reads the wall clock.
 *   - missing or unopenable file: rate 1, offset 0;
 *   - empty or malformed content (or rate outside (0, 1000], or
 *     |offset_ms| > 1e12): ignored, the previous setting stays.
 *
 * Constraints (libfaketime hangs Debian's jemalloc-linked redis-server):
 *   - no allocation, no dlsym: the real clocks and the file are reached with
 *     raw syscalls only (syscall(2) does not allocate and never re-enters
 *     these functions);
 *   - no locks that can block: readers use a double-buffered seqlock, the
 *     single refresher is elected with a non-blocking atomic flag, so a
 *     signal handler reading the clock cannot deadlock;
 *   - errno is preserved unless the interposed call itself fails;
 *   - all arithmetic saturates, nothing can trap.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

#define NS_PER_SEC INT64_C(1000000000)
#define NS_PER_MS INT64_C(1000000)
#define REFRESH_PERIOD_NS NS_PER_MS
#define MAX_RATE 1000.0
#define MAX_OFFSET_MS INT64_C(1000000000000)
/* Bound on |drift| so that real + offset + drift cannot overflow. */
#define MAX_DRIFT_NS INT64_C(4000000000000000000)
#define CONTROL_ENV "QUORUMLOCK_FAKECLOCK"

/* ---- control file path, set once by the constructor ---- */

static char control_path[4096];
/* 1 once control_path holds a usable path (release/acquire with it). */
static atomic_int control_enabled;

__attribute__((constructor)) static void fakeclock_init(void) {
    /* Constructors run before main, single-threaded. */
    const char *path = getenv(CONTROL_ENV);
    if (path == NULL || path[0] == '\0') {
        return;
    }
    size_t len = strlen(path);
    if (len >= sizeof control_path) {
        return;
    }
    memcpy(control_path, path, len + 1);
    atomic_store_explicit(&control_enabled, 1, memory_order_release);
}

/* ---- published parameters: double-buffered seqlock ---- */

/*
 * A reader computes fake_ns = real_ns + base_ns + excess * (mono_ns -
 * anchor_mono_ns), where excess = rate - 1 and base_ns = offset + drift at
 * the anchor. All-zero means the real clock.
 */
struct slot {
    atomic_uint seq; /* odd while being written */
    _Atomic int64_t anchor_mono_ns;
    _Atomic int64_t base_ns;
    _Atomic uint64_t excess_bits; /* the bits of a double */
};

static struct slot slots[2];
static atomic_uint current_slot;

/* ---- refresher state, owned by whoever holds `refreshing` ---- */

static atomic_flag refreshing = ATOMIC_FLAG_INIT;
static _Atomic int64_t last_refresh_mono_ns = INT64_MIN;
static struct {
    int64_t anchor_mono_ns;
    int64_t drift_ns; /* drift at the anchor */
    double rate;
    int64_t offset_ns;
} writer = {0, 0, 1.0, 0};

/* ---- raw clocks ---- */

static int raw_clock_gettime(clockid_t id, struct timespec *ts) {
    return (int)syscall(SYS_clock_gettime, id, ts);
}

static int64_t timespec_ns(const struct timespec *ts) {
    return (int64_t)ts->tv_sec * NS_PER_SEC + (int64_t)ts->tv_nsec;
}

static int64_t raw_ns(clockid_t id) {
    struct timespec ts;
    if (raw_clock_gettime(id, &ts) != 0) {
        return 0;
    }
    return timespec_ns(&ts);
}

static int64_t sat_add(int64_t a, int64_t b) {
    int64_t sum;
    if (__builtin_add_overflow(a, b, &sum)) {
        return b > 0 ? INT64_MAX : INT64_MIN;
    }
    return sum;
}

/* (double) nanoseconds clamped into [-MAX_DRIFT_NS, MAX_DRIFT_NS]. */
static int64_t clamp_drift(double ns) {
    if (!(ns == ns)) {
        return 0;
    }
    if (ns > (double)MAX_DRIFT_NS) {
        return MAX_DRIFT_NS;
    }
    if (ns < -(double)MAX_DRIFT_NS) {
        return -MAX_DRIFT_NS;
    }
    return (int64_t)ns;
}

static uint64_t double_bits(double value) {
    uint64_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

static double bits_double(uint64_t bits) {
    double value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

/* ---- control file parsing (no libc number parsing: strtod may allocate) ---- */

static const char *skip_blanks(const char *p) {
    while (*p == ' ' || *p == '\t') {
        p++;
    }
    return p;
}

static int is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* Parses a decimal number with optional sign, fraction and exponent. */
static const char *parse_double(const char *p, double *out) {
    int negative = 0;
    if (*p == '+' || *p == '-') {
        negative = *p == '-';
        p++;
    }
    double value = 0.0;
    int digits = 0;
    int scale = 0; /* decimal exponent adjustment from the digits */
    while (is_digit(*p)) {
        if (digits < 19) {
            value = value * 10.0 + (double)(*p - '0');
        } else {
            scale++;
        }
        digits++;
        p++;
    }
    if (*p == '.') {
        p++;
        while (is_digit(*p)) {
            if (digits < 19) {
                value = value * 10.0 + (double)(*p - '0');
                scale--;
            }
            digits++;
            p++;
        }
    }
    if (digits == 0) {
        return NULL;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        int exp_negative = 0;
        if (*p == '+' || *p == '-') {
            exp_negative = *p == '-';
            p++;
        }
        if (!is_digit(*p)) {
            return NULL;
        }
        int exponent = 0;
        while (is_digit(*p)) {
            if (exponent < 10000) {
                exponent = exponent * 10 + (*p - '0');
            }
            p++;
        }
        scale += exp_negative ? -exponent : exponent;
    }
    /* Bounded loops; values outside double range end up 0 or inf. */
    for (; scale > 0 && value < 1e308; scale--) {
        value *= 10.0;
    }
    for (; scale < 0 && value > 0.0; scale++) {
        value /= 10.0;
    }
    if (scale > 0 && value != 0.0) {
        value = __builtin_inf();
    }
    *out = negative ? -value : value;
    return p;
}

static const char *parse_i64(const char *p, int64_t *out) {
    int negative = 0;
    if (*p == '+' || *p == '-') {
        negative = *p == '-';
        p++;
    }
    if (!is_digit(*p)) {
        return NULL;
    }
    int64_t value = 0;
    while (is_digit(*p)) {
        if (value > MAX_OFFSET_MS) {
            return NULL; /* out of range; also keeps the next step in range */
        }
        value = value * 10 + (*p - '0');
        p++;
    }
    *out = negative ? -value : value;
    return p;
}

/* Parses "<rate> <offset_ms>" plus optional trailing blanks/newlines. */
static int parse_control(const char *text, double *rate, int64_t *offset_ms) {
    const char *p = skip_blanks(text);
    p = parse_double(p, rate);
    if (p == NULL || (*p != ' ' && *p != '\t')) {
        return 0;
    }
    p = parse_i64(skip_blanks(p), offset_ms);
    if (p == NULL) {
        return 0;
    }
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') {
        p++;
    }
    if (*p != '\0') {
        return 0;
    }
    if (!(*rate > 0.0 && *rate <= MAX_RATE)) {
        return 0;
    }
    if (*offset_ms > MAX_OFFSET_MS || *offset_ms < -MAX_OFFSET_MS) {
        return 0;
    }
    return 1;
}

enum read_result { READ_MISSING, READ_MALFORMED, READ_OK };

static enum read_result read_control(double *rate, int64_t *offset_ms) {
    char buf[512];
    long fd = syscall(SYS_openat, AT_FDCWD, control_path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        return READ_MISSING;
    }
    size_t len = 0;
    int failed = 0;
    for (;;) {
        if (len == sizeof buf - 1) {
            failed = 1; /* too long to be ours */
            break;
        }
        long n = syscall(SYS_read, (int)fd, buf + len, sizeof buf - 1 - len);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            failed = 1;
            break;
        }
        if (n == 0) {
            break;
        }
        len += (size_t)n;
    }
    syscall(SYS_close, (int)fd);
    if (failed) {
        return READ_MALFORMED;
    }
    buf[len] = '\0';
    if (memchr(buf, '\0', len) != NULL) {
        return READ_MALFORMED;
    }
    return parse_control(buf, rate, offset_ms) ? READ_OK : READ_MALFORMED;
}

/* ---- publishing ---- */

static void publish(int64_t anchor_mono_ns, int64_t base_ns, double excess) {
    unsigned next = 1u - atomic_load_explicit(&current_slot, memory_order_relaxed);
    struct slot *s = &slots[next];
    unsigned seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&s->anchor_mono_ns, anchor_mono_ns, memory_order_relaxed);
    atomic_store_explicit(&s->base_ns, base_ns, memory_order_relaxed);
    atomic_store_explicit(&s->excess_bits, double_bits(excess), memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq + 2, memory_order_release);
    atomic_store_explicit(&current_slot, next, memory_order_release);
}

/* Re-reads the control file if the last read is at least REFRESH_PERIOD_NS
 * old and no other thread is reading it right now. */
static void maybe_refresh(int64_t mono_ns) {
    if (!atomic_load_explicit(&control_enabled, memory_order_acquire)) {
        return;
    }
    int64_t last = atomic_load_explicit(&last_refresh_mono_ns, memory_order_relaxed);
    if (last != INT64_MIN && mono_ns - last < REFRESH_PERIOD_NS) {
        return;
    }
    if (atomic_flag_test_and_set_explicit(&refreshing, memory_order_acquire)) {
        return;
    }
    last = atomic_load_explicit(&last_refresh_mono_ns, memory_order_relaxed);
    if (last == INT64_MIN || mono_ns - last >= REFRESH_PERIOD_NS) {
        atomic_store_explicit(&last_refresh_mono_ns, mono_ns, memory_order_relaxed);
        double rate = 1.0;
        int64_t offset_ms = 0;
        enum read_result result = read_control(&rate, &offset_ms);
        if (result != READ_MALFORMED) {
            int64_t offset_ns = offset_ms * NS_PER_MS;
            if (rate != writer.rate || offset_ns != writer.offset_ns) {
                /* Drift accumulated under the old rate up to now. */
                int64_t drift = clamp_drift(
                    (double)writer.drift_ns +
                    (writer.rate - 1.0) * (double)(mono_ns - writer.anchor_mono_ns));
                writer.anchor_mono_ns = mono_ns;
                writer.drift_ns = drift;
                writer.rate = rate;
                writer.offset_ns = offset_ns;
                publish(mono_ns, sat_add(offset_ns, drift), rate - 1.0);
            }
        }
    }
    atomic_flag_clear_explicit(&refreshing, memory_order_release);
}

/* The fake time for the real reading `real_ns` taken at `mono_ns`. */
static int64_t fake_ns(int64_t real_ns, int64_t mono_ns) {
    for (;;) {
        unsigned index = atomic_load_explicit(&current_slot, memory_order_acquire);
        struct slot *s = &slots[index & 1u];
        unsigned seq1 = atomic_load_explicit(&s->seq, memory_order_acquire);
        int64_t anchor = atomic_load_explicit(&s->anchor_mono_ns, memory_order_relaxed);
        int64_t base = atomic_load_explicit(&s->base_ns, memory_order_relaxed);
        uint64_t bits = atomic_load_explicit(&s->excess_bits, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        unsigned seq2 = atomic_load_explicit(&s->seq, memory_order_relaxed);
        if ((seq1 & 1u) != 0 || seq1 != seq2) {
            /* The refresher (another thread) is rewriting this slot, which
             * means a newer one has been published: start over. */
            continue;
        }
        double excess = bits_double(bits);
        int64_t drift = excess == 0.0 ? 0 : clamp_drift(excess * (double)(mono_ns - anchor));
        return sat_add(sat_add(real_ns, base), drift);
    }
}

/* Fills `ts` with the fake wall clock; `id` is CLOCK_REALTIME(_COARSE). */
static int fake_clock_gettime(clockid_t id, struct timespec *ts) {
    int saved_errno = errno;
    struct timespec real;
    if (raw_clock_gettime(id, &real) != 0) {
        return -1;
    }
    int64_t mono = raw_ns(CLOCK_MONOTONIC);
    maybe_refresh(mono);
    int64_t fake = fake_ns(timespec_ns(&real), mono);
    int64_t sec = fake / NS_PER_SEC;
    int64_t nsec = fake % NS_PER_SEC;
    if (nsec < 0) {
        nsec += NS_PER_SEC;
        sec -= 1;
    }
    ts->tv_sec = (time_t)sec;
    ts->tv_nsec = (long)nsec;
    errno = saved_errno;
    return 0;
}

/* ---- interposed functions ---- */

EXPORT int clock_gettime(clockid_t id, struct timespec *ts) {
    if (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE) {
        return fake_clock_gettime(id, ts);
    }
    return raw_clock_gettime(id, ts);
}

EXPORT int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    if (tz != NULL) {
        /* Obsolete; glibc fills in zeros too. */
        struct timezone *zone = tz;
        zone->tz_minuteswest = 0;
        zone->tz_dsttime = 0;
    }
    /* tv is declared nonnull by glibc, as it is for the real function. */
    struct timespec ts;
    if (fake_clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return -1;
    }
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = (suseconds_t)(ts.tv_nsec / 1000);
    return 0;
}

EXPORT time_t time(time_t *tloc) {
    struct timespec ts;
    if (fake_clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return (time_t)-1;
    }
    if (tloc != NULL) {
        *tloc = ts.tv_sec;
    }
    return ts.tv_sec;
}
