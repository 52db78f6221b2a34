/* Load-generator accounting shared by the Cython load generator (fastpath/loadgen.pyx) and the
 * C clients of the peer systems (bench/clients/): the payload layout, per-publisher stream
 * counting (unique, duplicates, reordered) and a log-linear latency histogram. No allocation
 * per message; everything is fixed-size. */
#ifndef PELOTARI_LOADSTATS_H
#define PELOTARI_LOADSTATS_H

#include <stdint.h>
#include <string.h>
#include <time.h>

/* Payload: PUB_ID (2 bytes) COUNTER (6 bytes) SEND_TIME_NS (8 bytes), big-endian, then zeros.
 * 16 bytes, the smallest payload the bench uses. */
#define LS_STAMP_SIZE 16
#define LS_MAX_PUBLISHERS 64
#define LS_WINDOW_BITS 16                 /* reorder/duplicate window: 65,536 counters */
#define LS_WINDOW (1u << LS_WINDOW_BITS)
#define LS_SUB_BITS 4                     /* 16 sub-buckets per power of two: <= 6.25% error */
#define LS_BUCKETS (64 << LS_SUB_BITS)

static inline uint64_t ls_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void ls_put_be(uint8_t *p, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; i--) { p[i] = (uint8_t)v; v >>= 8; }
}

static inline uint64_t ls_get_be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

static inline void ls_stamp(uint8_t *payload, uint16_t pub_id, uint64_t counter, uint64_t now_ns) {
    ls_put_be(payload, pub_id, 2);
    ls_put_be(payload + 2, counter, 6);
    ls_put_be(payload + 8, now_ns, 8);
}

/* ---- latency histogram ------------------------------------------------------------------- */

typedef struct {
    uint64_t counts[LS_BUCKETS];
    uint64_t total;
    uint64_t max;
    uint64_t min;
    double sum;
} ls_histogram;

static inline void ls_hist_init(ls_histogram *h) { memset(h, 0, sizeof(*h)); h->min = UINT64_MAX; }

static inline int ls_bucket(uint64_t v) {
    if (v < (1u << LS_SUB_BITS)) return (int)v;
    int e = 63 - __builtin_clzll(v);                       /* floor(log2 v) >= LS_SUB_BITS */
    int sub = (int)((v >> (e - LS_SUB_BITS)) & ((1u << LS_SUB_BITS) - 1));
    return ((e - LS_SUB_BITS + 1) << LS_SUB_BITS) + sub;
}

/* The largest value that falls in bucket b (percentiles report this: never optimistic). */
static inline uint64_t ls_bucket_high(int b) {
    if (b < (1 << LS_SUB_BITS)) return (uint64_t)b;
    int e = (b >> LS_SUB_BITS) + LS_SUB_BITS - 1;
    uint64_t sub = (uint64_t)(b & ((1 << LS_SUB_BITS) - 1));
    uint64_t low = (1ull << e) | (sub << (e - LS_SUB_BITS));
    return low + (1ull << (e - LS_SUB_BITS)) - 1;
}

static inline void ls_hist_record(ls_histogram *h, uint64_t v) {
    int b = ls_bucket(v);
    if (b >= LS_BUCKETS) b = LS_BUCKETS - 1;
    h->counts[b]++;
    h->total++;
    h->sum += (double)v;
    if (v > h->max) h->max = v;
    if (v < h->min) h->min = v;
}

static inline void ls_hist_merge(ls_histogram *into, const ls_histogram *from) {
    for (int b = 0; b < LS_BUCKETS; b++) into->counts[b] += from->counts[b];
    into->total += from->total;
    into->sum += from->sum;
    if (from->max > into->max) into->max = from->max;
    if (from->min < into->min) into->min = from->min;
}

/* Value at quantile q (0..1): the upper bound of the bucket holding the ceil(q*total)-th value,
 * capped at the true maximum. 0 when empty. */
static inline uint64_t ls_hist_quantile(const ls_histogram *h, double q) {
    if (h->total == 0) return 0;
    uint64_t rank = (uint64_t)(q * (double)h->total);
    if ((double)rank < q * (double)h->total) rank++;
    if (rank < 1) rank = 1;
    uint64_t seen = 0;
    for (int b = 0; b < LS_BUCKETS; b++) {
        seen += h->counts[b];
        if (seen >= rank) {
            uint64_t v = ls_bucket_high(b);
            return v > h->max ? h->max : v;
        }
    }
    return h->max;
}

/* ---- stream counting --------------------------------------------------------------------- */

typedef struct {
    int started;
    uint64_t highest;                     /* highest counter seen */
    uint64_t unique;
    uint64_t duplicates;
    uint64_t reordered;                   /* arrived after a higher counter */
    uint64_t too_old;                     /* older than the window: counted as reordered, not unique-checked */
    uint8_t seen[LS_WINDOW / 8];          /* bit c % LS_WINDOW: counter c arrived */
} ls_stream;

typedef struct {
    ls_stream streams[LS_MAX_PUBLISHERS];
    uint64_t foreign;                     /* payloads whose PUB_ID is out of range */
    ls_histogram latency;
} ls_counter;

/* Initialise a counter whose memory is already all zero bytes (fresh anonymous pages, left
   untouched: most of a counter is windows of publishers that never send). */
static inline void ls_counter_init_zeroed(ls_counter *c) { c->latency.min = UINT64_MAX; }

/* Touch (fault in) what a trial of publisher 0 writes: its stream and the histogram, so that
   a fresh mapped counter's first messages do not wait for page faults (10,000 counters: tens
   of milliseconds). Values are unchanged. */
static inline void ls_counter_prefault(ls_counter *c) {
    volatile uint8_t *p = (volatile uint8_t *)&c->streams[0];
    for (size_t i = 0; i < sizeof(ls_stream); i += 4096) p[i] = p[i];
    p = (volatile uint8_t *)&c->latency;
    for (size_t i = 0; i < sizeof(ls_histogram); i += 4096) p[i] = p[i];
    p[sizeof(ls_histogram) - 1] = p[sizeof(ls_histogram) - 1];
    p = (volatile uint8_t *)&c->streams[0];
    p[sizeof(ls_stream) - 1] = p[sizeof(ls_stream) - 1];
}

static inline void ls_counter_init(ls_counter *c) {
    memset(c, 0, sizeof(*c));
    ls_counter_init_zeroed(c);
}

static inline void ls_stream_record(ls_stream *s, uint64_t counter) {
    uint32_t slot = (uint32_t)(counter & (LS_WINDOW - 1));
    uint8_t mask = (uint8_t)(1u << (slot & 7));
    if (!s->started) {
        s->started = 1;
        s->highest = counter;
        s->unique = 1;
        s->seen[slot >> 3] |= mask;
        return;
    }
    if (counter > s->highest) {
        /* Slots for counters highest+1 .. counter are reused: clear them first. */
        uint64_t gap = counter - s->highest;
        if (gap >= LS_WINDOW) {
            memset(s->seen, 0, sizeof(s->seen));
        } else {
            for (uint64_t c = s->highest + 1; c < counter; c++) {
                uint32_t k = (uint32_t)(c & (LS_WINDOW - 1));
                s->seen[k >> 3] &= (uint8_t)~(1u << (k & 7));
            }
        }
        s->highest = counter;
        s->seen[slot >> 3] |= mask;
        s->unique++;
        return;
    }
    if (s->highest - counter >= LS_WINDOW) {
        s->too_old++;
        s->reordered++;
        s->unique++;
        return;
    }
    if (s->seen[slot >> 3] & mask) {
        s->duplicates++;
        return;
    }
    s->seen[slot >> 3] |= mask;
    s->reordered++;
    s->unique++;
}

/* Account one received payload; returns its latency in ns, or -1 if it was too short or from
   an unknown publisher. */
static inline int64_t ls_counter_record(ls_counter *c, const uint8_t *payload, size_t len, uint64_t now_ns) {
    if (len < LS_STAMP_SIZE) { c->foreign++; return -1; }
    uint64_t pub = ls_get_be(payload, 2);
    if (pub >= LS_MAX_PUBLISHERS) { c->foreign++; return -1; }
    uint64_t counter = ls_get_be(payload + 2, 6);
    uint64_t sent = ls_get_be(payload + 8, 8);
    uint64_t latency = now_ns > sent ? now_ns - sent : 0;
    ls_stream_record(&c->streams[pub], counter);
    ls_hist_record(&c->latency, latency);
    return (int64_t)latency;
}

#endif
