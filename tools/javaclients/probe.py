#!/usr/bin/env python3
"""Wire probe for the Java bully clients (our own test tool, stdlib only).

  probe.py send  SRC_IP DST_IP DST_PORT MSG [MSG...] [--wait S] [--gap S] [--close]
      connect from SRC_IP, write each MSG (gap seconds apart), read for up to S
      seconds (default 3), print every chunk and whether/when the peer closed.
      --close: half-close (shutdown write) after sending.
  probe.py listen IP PORT [--secs S] [--reply TAG=MSG ...] [--close-after-reply]
      accept connections, log each chunk (decoded), optionally answer a tag
      with MSG on the same connection; runs S seconds (default 30).

MSG syntax: tag,field,field...  e.g.  1,127.0.0.9,4000   (Entry)
  3|5|9|10|11,ip,port,id          8,ip,port,id,text       13|12,ip,port,id,time|now|now+N
  6,ip,port,srcid,searchid,destid 7,ip,port,id,searchid    2,id,ip:port:id,...  4,ip:port:id,...
  raw:HEX  (any bytes)
"""
import socket, struct, sys, time, select

T0 = time.time()


def ts():
    return "%7.3f" % (time.time() - T0)


def ipb(s):
    return socket.inet_aton(s)


def peer(s):
    ip, port, pid = s.split(":")
    return ipb(ip) + struct.pack(">HH", int(port), int(pid))


def tval(s):
    now = int(time.time() * 1000)
    if s == "now":
        return now
    if s.startswith("now+") or s.startswith("now-"):
        return now + int(s[3:])
    return int(s)


def build(spec):
    if spec.startswith("raw:"):
        return bytes.fromhex(spec[4:])
    f = spec.split(",")
    tag = int(f[0])
    ver = 0 if tag == 1 else 1
    h = bytes([tag, ver])
    if tag == 1:
        return h + ipb(f[1]) + struct.pack(">H", int(f[2]))
    if tag == 2:
        slots = [peer(x) for x in f[2:]] + [bytes(8)] * 4
        return h + struct.pack(">H", int(f[1])) + b"".join(slots[:4])
    if tag == 4:
        slots = [peer(x) for x in f[1:]] + [bytes(8)] * 4
        return h + b"".join(slots[:4])
    p = ipb(f[1]) + struct.pack(">HH", int(f[2]), int(f[3]))
    if tag in (3, 5, 9, 10, 11):
        return h + p
    if tag == 6:
        return h + ipb(f[1]) + struct.pack(">HHHH", int(f[2]), int(f[3]), int(f[4]), int(f[5]))
    if tag == 7:
        return h + p + struct.pack(">H", int(f[4]))
    if tag == 8:
        t = ",".join(f[4:]).encode()
        return h + p + struct.pack(">H", len(t)) + t
    if tag in (12, 13):
        return h + p + struct.pack(">q", tval(f[4]))
    raise SystemExit("unknown tag in " + spec)


def decode(b):
    """best-effort decode of a chunk that starts at a message boundary"""
    out = []
    while b:
        tag = b[0]
        def pr(x):
            return "%s:%d:%d" % (socket.inet_ntoa(x[0:4]), *struct.unpack(">HH", x[4:8]))
        try:
            if tag == 1 and len(b) >= 8:
                out.append("Entry v%d %s:%d" % (b[1], socket.inet_ntoa(b[2:6]), struct.unpack(">H", b[6:8])[0])); b = b[8:]
            elif tag == 2 and len(b) >= 36:
                out.append("EntryResponse v%d id=%d [%s]" % (b[1], struct.unpack(">H", b[2:4])[0], " ".join(pr(b[4 + 8 * i:12 + 8 * i]) for i in range(4)))); b = b[36:]
            elif tag == 4 and len(b) >= 34:
                out.append("NodeResponse v%d [%s]" % (b[1], " ".join(pr(b[2 + 8 * i:10 + 8 * i]) for i in range(4)))); b = b[34:]
            elif tag in (3, 5, 9, 10, 11) and len(b) >= 10:
                n = {3: "NodeRequest", 5: "IAmAlive", 9: "AreYouAlive", 10: "IAmLeader", 11: "TellMeYourTime"}[tag]
                out.append("%s v%d %s" % (n, b[1], pr(b[2:10]))); b = b[10:]
            elif tag == 6 and len(b) >= 14:
                out.append("NodeSearch v%d %s:%d src=%d search=%d dest=%d" % (b[1], socket.inet_ntoa(b[2:6]), *struct.unpack(">HHHH", b[6:14]))); b = b[14:]
            elif tag == 7 and len(b) >= 12:
                out.append("IAmFound v%d %s searchId=%d" % (b[1], pr(b[2:10]), struct.unpack(">H", b[10:12])[0])); b = b[12:]
            elif tag == 8 and len(b) >= 12:
                n = struct.unpack(">H", b[10:12])[0]
                out.append("Text v%d %s len=%d %r" % (b[1], pr(b[2:10]), n, bytes(b[12:12 + n]))); b = b[12 + n:]
            elif tag in (12, 13) and len(b) >= 18:
                t = struct.unpack(">q", b[10:18])[0]
                out.append("%s v%d %s time=%d (now%+d ms)" % ("HereIsMyTime" if tag == 12 else "HereIsYourNewTime", b[1], pr(b[2:10]), t, t - int(time.time() * 1000))); b = b[18:]
            else:
                out.append("?? %s" % b.hex()); b = b""
        except Exception as e:
            out.append("?? %s (%s)" % (b.hex(), e)); b = b""
    return " | ".join(out)


def opt(args, name, default, conv=float):
    if name in args:
        i = args.index(name)
        v = conv(args[i + 1])
        del args[i:i + 2]
        return v
    return default


def cmd_send(args):
    wait = opt(args, "--wait", 3.0)
    gap = opt(args, "--gap", 0.0)
    half = "--close" in args
    if half:
        args.remove("--close")
    src, dst, port = args[0], args[1], int(args[2])
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(5)
    s.connect((dst, port))
    print(ts(), "connected %s -> %s:%d" % (s.getsockname(), dst, port))
    for m in args[3:]:
        data = build(m)
        s.sendall(data)
        print(ts(), "sent", len(data), "B:", decode(data))
        if gap:
            time.sleep(gap)
    if half:
        s.shutdown(socket.SHUT_WR)
        print(ts(), "half-closed (FIN sent)")
    end = time.time() + wait
    buf = b""
    eof = False
    while time.time() < end:
        r, _, _ = select.select([s], [], [], max(0, end - time.time()))
        if not r:
            break
        try:
            d = s.recv(65536)
        except ConnectionResetError:
            print(ts(), "RESET by peer"); return
        if not d:
            print(ts(), "EOF: peer closed the connection"); eof = True; break
        buf += d
        print(ts(), "recv %d B: %s" % (len(d), d.hex()))
        print(ts(), "   =", decode(buf))
        buf = b""
    if not eof:
        print(ts(), "no EOF within %.1fs: peer keeps the connection open" % wait)
    s.close()


def cmd_listen(args):
    secs = opt(args, "--secs", 30.0)
    replies = {}
    while "--reply" in args:
        i = args.index("--reply")
        k, v = args[i + 1].split("=", 1)
        replies[int(k)] = v
        del args[i:i + 2]
    close_after = "--close-after-reply" in args
    if close_after:
        args.remove("--close-after-reply")
    ip, port = args[0], int(args[1])
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((ip, port))
    ls.listen(64)
    print(ts(), "listening on %s:%d" % (ip, port), flush=True)
    conns = {}
    end = time.time() + secs
    while time.time() < end:
        r, _, _ = select.select([ls] + list(conns), [], [], max(0, end - time.time()))
        for s in r:
            if s is ls:
                c, a = ls.accept()
                conns[c] = a
                print(ts(), "accept from %s:%d" % a, flush=True)
                continue
            try:
                d = s.recv(65536)
            except ConnectionResetError:
                d = None
            a = conns[s]
            if not d:
                print(ts(), "%s:%d %s" % (a[0], a[1], "closed (EOF)" if d == b"" else "RESET"), flush=True)
                del conns[s]
                s.close()
                continue
            print(ts(), "%s:%d recv %d B: %s" % (a[0], a[1], len(d), decode(d)), flush=True)
            if d[0] in replies:
                out = build(replies[d[0]])
                s.sendall(out)
                print(ts(), "%s:%d replied: %s" % (a[0], a[1], decode(out)), flush=True)
                if close_after:
                    s.close(); del conns[s]
                    print(ts(), "%s:%d we closed" % a, flush=True)
    for s, a in conns.items():
        print(ts(), "%s:%d still open at end" % a, flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("send", "listen"):
        print(__doc__); sys.exit(2)
    (cmd_send if sys.argv[1] == "send" else cmd_listen)(sys.argv[2:])
