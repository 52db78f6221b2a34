/* The ZeroMQ peer: an XSUB/XPUB proxy (libzmq's zmq_proxy), what a ZeroMQ user deploys as a
 * pub/sub hub. Publishers connect to XSUB_PORT, subscribers to XPUB_PORT.
 *   zmq_proxy XSUB_PORT XPUB_PORT */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <zmq.h>

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: zmq_proxy XSUB_PORT XPUB_PORT\n"); return 2; }
    void *ctx = zmq_ctx_new();
    void *xsub = zmq_socket(ctx, ZMQ_XSUB), *xpub = zmq_socket(ctx, ZMQ_XPUB);
    int hwm = 0;
    zmq_setsockopt(xsub, ZMQ_RCVHWM, &hwm, sizeof(hwm));
    zmq_setsockopt(xpub, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    char url[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%s", argv[1]);
    if (zmq_bind(xsub, url) != 0) { perror("bind xsub"); return 1; }
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%s", argv[2]);
    if (zmq_bind(xpub, url) != 0) { perror("bind xpub"); return 1; }
    fprintf(stderr, "zmq_proxy listening on 127.0.0.1:%s (XSUB) and :%s (XPUB)\n", argv[1], argv[2]);
    zmq_proxy(xsub, xpub, NULL);  /* returns when a signal interrupts it */
    return 0;
}
