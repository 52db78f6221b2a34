"""Load-generator agents, run as separate processes pinned to the client cores.

    python -m pelotari.harness.agent sub --host H --port P --subscribers N
    python -m pelotari.harness.agent pub --host H --port P --pub-id K

Each prints {"ready": true} once signed on, then reads one JSON command per stdin line and
answers with JSON lines on stdout; `sub` answers "measure" with {"armed": true} at once and its
counts when the trial ends. bench/clients/peer_client.c speaks the same protocol for the peers. EOF or {"cmd": "quit"} ends it. Every
answer carries the agent's CPU seconds for that command, so the runner can tell a run whose
clients were the bottleneck.
"""
import argparse
import json
import resource
import sys


def cpu_seconds() -> float:
    """User + system CPU seconds used by this process so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def answer(record) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def open_files(needed: int) -> None:
    """Raise this process's open-file limit to `needed` (within the hard limit), or say why a
    group of that many sockets cannot be opened here."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        try:  # root (CAP_SYS_RESOURCE) may raise the hard limit too
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, needed))
            return
        except (ValueError, OSError):
            raise OSError(f"{needed} file descriptors needed, the hard limit is {hard} "
                          f"(ulimit -Hn)") from None
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def run_sub(args) -> None:
    from fastpath.loadgen import SubscriberGroup

    open_files(args.subscribers + 64)  # the sockets, and what Python holds besides
    group = SubscriberGroup(args.host, args.port, args.subscribers, pack=args.pack, gro=args.gro)
    try:
        group.sign_on()
        answer({"ready": True})
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd.get("cmd") == "quit":
                break
            before = cpu_seconds()
            result = group.measure(cmd.get("max_duration", 30.0), cmd.get("idle", 0.5),
                                   cmd.get("timeline", 0.0),
                                   ready=lambda: answer({"armed": True}))
            result["cpu"] = cpu_seconds() - before
            result.pop("subscribers", None)
            answer(result)
    finally:
        group.sign_off()


def run_pub(args) -> None:
    from fastpath.loadgen import publish_fyrehose

    answer({"ready": True})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("cmd") == "quit":
            break
        before = cpu_seconds()
        result = publish_fyrehose(args.host, args.port, payload_size=cmd["payload_size"],
                                  duration=cmd["duration"], rate=cmd.get("rate", 0.0),
                                  pub_id=args.pub_id, batch=cmd.get("batch", 64),
                                  pack=args.pack, max_frames=args.pack_frames,
                                  interval=cmd.get("interval", 0.0))
        result["cpu"] = cpu_seconds() - before
        answer(result)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pelotari.harness.agent")
    parser.add_argument("role", choices=["sub", "pub"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--subscribers", type=int, default=1)
    parser.add_argument("--pub-id", type=int, default=0)
    parser.add_argument("--pack", type=int, default=0,
                        help="packing extension: largest packed datagram in bytes (0: off)")
    parser.add_argument("--pack-frames", type=int, default=1024,
                        help="most frames per packed PUSH (the backbone's --max-pack-frames)")
    parser.add_argument("--gro", action="store_true",
                        help="subscribers set UDP_GRO: a GSO run arrives as one read (sub only)")
    parser.add_argument("--system", default="fyrehose", choices=["fyrehose"],
                        help="only fyrehose: the peers' agent is bench/clients/peer_client.c")
    args = parser.parse_args(argv)
    try:
        (run_sub if args.role == "sub" else run_pub)(args)
    except (TimeoutError, OSError, ValueError) as exc:
        answer({"error": str(exc)})
        sys.exit(1)


if __name__ == "__main__":
    main()
