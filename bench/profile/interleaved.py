"""Interleaved capacity comparison of fyrehose backbones at one fixed offered rate.

    .venv/bin/python bench/profile/interleaved.py RATE SUBSCRIBERS PAYLOAD ROUNDS CMD [CMD...]

Each CMD is a backbone command line with PORT where its UDP port goes (0: any; the one bound is
read back), e.g.
"/tmp/ref PORT --gso" (cc -O2 -o /tmp/ref bench/reference/fyrehose_ref.c) or
".venv/bin/python -m pelotari backbone --host 127.0.0.1 --port PORT --stats-interval 3600".
Round after round the backbones take turns (A B C A B C...): each is started alone on core 0,
the load generator on core 1 publishes RATE msgs/s for 3 s to SUBSCRIBERS subscribers, and the
delivered msgs/s is counted. Offer more than the backbones can take and this is their capacity;
taking turns puts the machine's drift on every backbone alike. Prints each trial as it ends (with
the server's and the load generator's CPU per published message, and the server's context
switches) and each backbone's median
delivered rate with its ratio to the first.
"""
import os
import resource
import shlex
import statistics
import subprocess
import sys
import threading
import time

import psutil

def _cpu_seconds(pid):
    """User + system CPU seconds of a running process (its threads included)."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def _context_switches(pid):
    """Voluntary + involuntary context switches of a running process, summed over its threads."""
    # by hand: psutil's num_ctx_switches() counts the main thread's only
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/status") as f:
            total += sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
    return total


def main(argv):
    if len(argv) < 5 or argv[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        rate, subs, payload, rounds = float(argv[0]), int(argv[1]), int(argv[2]), int(argv[3])
    except ValueError:
        print("interleaved.py: RATE SUBSCRIBERS PAYLOAD ROUNDS must be numbers", file=sys.stderr)
        return 2
    commands = argv[4:]
    os.sched_setaffinity(0, {1})
    from fastpath.loadgen import SubscriberGroup, publish_fyrehose

    delivered = {c: [] for c in commands}
    from pelotari.harness.procs import bound_port

    for rnd in range(rounds):
        for k, command in enumerate(commands):
            server = subprocess.Popen(["taskset", "-c", "0"] + shlex.split(command.replace("PORT", "0")),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                time.sleep(1.0)
                port = bound_port(server.pid)  # it bound any port: no number chosen for it
                group = SubscriberGroup("127.0.0.1", port, subs)
                try:
                    group.sign_on()
                except TimeoutError:
                    print(f"interleaved.py: backbone {chr(65 + k)} did not answer: {command}",
                          file=sys.stderr)
                    return 1
                counts = {}
                before = resource.getrusage(resource.RUSAGE_SELF)
                switches, server_cpu = _context_switches(server.pid), _cpu_seconds(server.pid)
                reader = threading.Thread(target=lambda: counts.update(group.measure(10, 0.5)))
                reader.start()
                sent = publish_fyrehose("127.0.0.1", port, payload_size=payload, duration=3,
                                        rate=rate)["sent"]
                reader.join()
                after = resource.getrusage(resource.RUSAGE_SELF)
                server_cpu = _cpu_seconds(server.pid) - server_cpu
                switches = _context_switches(server.pid) - switches
                group.sign_off()
            finally:
                server.terminate()
                server.wait()
            rate_out = counts["unique"] / (counts["active"] or 1)
            delivered[command].append(rate_out)
            client_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            print(f"round {rnd + 1}/{rounds} backbone {chr(65 + k)}: delivered {rate_out / 1e3:9.1f}k/s, "
                  f"lost {1 - counts['unique'] / max(sent * subs, 1):.2%}, µs CPU per message "
                  f"published: server {server_cpu / max(sent, 1) * 1e6:.2f}, "
                  f"load generator {client_cpu / max(sent, 1) * 1e6:.2f}; server context "
                  f"switches per 1,000 messages {switches / max(sent, 1) * 1e3:.1f}", flush=True)
    first = statistics.median(delivered[commands[0]])
    for k, command in enumerate(commands):
        med = statistics.median(delivered[command])
        print(f"{chr(65 + k)} median {med / 1e3:9.1f}k/s  ratio to A {med / first:.3f}  "
              f"rounds {[round(x / 1e3) for x in delivered[command]]}  {command}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
