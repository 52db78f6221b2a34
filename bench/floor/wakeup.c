/* Wake-up stalls: how late this machine wakes a sleeping thread, with nothing else running.
 * Sleeps NAP microseconds over and over for SECONDS and counts the naps that overslept by at
 * least 0.5, 1, 2 and 4 ms. On a virtual machine an idle vCPU halts, and its wake-up waits for
 * the host to run it again: every hop of a pub/sub path (publisher -> server -> subscriber)
 * sleeps between messages, so a stall here delays every message behind it. Prints one JSON
 * object.
 *
 *   wakeup SECONDS NAP_US
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s SECONDS NAP_US\n", argv[0]);
        return 2;
    }
    double seconds = atof(argv[1]);
    long nap_us = atol(argv[2]);
    if (!(seconds > 0 && seconds <= 600) || nap_us < 1 || nap_us > 1000000) {
        fprintf(stderr, "0 < SECONDS <= 600, 1 <= NAP_US <= 1000000\n");
        return 2;
    }
    static const uint64_t late_ns[4] = {500000, 1000000, 2000000, 4000000};
    uint64_t late[4] = {0, 0, 0, 0}, naps = 0, worst = 0, total_late = 0;
    struct timespec nap = {nap_us / 1000000, (nap_us % 1000000) * 1000};
    uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9);
    for (;;) {
        uint64_t before = now_ns();
        if (before >= end) break;
        nanosleep(&nap, NULL);
        uint64_t slept = now_ns() - before;
        uint64_t over = slept > (uint64_t)nap_us * 1000 ? slept - (uint64_t)nap_us * 1000 : 0;
        naps++;
        if (over > worst) worst = over;
        for (int i = 0; i < 4; i++)
            if (over >= late_ns[i]) late[i]++;
        if (over >= late_ns[1]) total_late += over;
    }
    printf("{\"seconds\": %.3f, \"nap_us\": %ld, \"naps\": %llu, \"late_500us\": %llu, "
           "\"late_1ms\": %llu, \"late_2ms\": %llu, \"late_4ms\": %llu, "
           "\"late_1ms_total_us\": %.1f, \"worst_us\": %.1f}\n",
           (now_ns() - start) / 1e9, nap_us, (unsigned long long)naps,
           (unsigned long long)late[0], (unsigned long long)late[1],
           (unsigned long long)late[2], (unsigned long long)late[3], total_late / 1e3,
           worst / 1e3);
    return 0;
}
