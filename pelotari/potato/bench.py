"""Measuring potato with real processes: the seed's A-G mesh and a 20-client mesh, over WebRTC
and TCP — set-up time, election time (p50/p99), and the CPU cost of relaying a message.

Each measurement is a JSON-lines record (kind "potato-mesh"); `pelotari trend` plots them
(potato-mesh.png) and sums them up per mesh and transport.
Clients listen on 127.0.0.k (k = 1, 2, ...), one port for all.
"""
import random
import time
from collections.abc import Callable

from pelotari.harness.procs import Children, JsonProcess, wait_all

EXAMPLE = [("A", "B"), ("A", "C"), ("B", "D"), ("C", "D"), ("C", "E"), ("D", "E"), ("D", "F"),
           ("D", "G"), ("E", "G")]


def _client(name: str, host: str, port: int, transport: str, connect=(),
            http: str | None = None) -> JsonProcess:
    """One `pelotari potato node --json` process; `.name` is its client's name."""
    args = ["potato", "node", "--name", name, "--listen", f"{host}:{port}", "--transport",
            transport, "--json"] + (["--http", http] if http else [])
    for h, p in connect:
        args += ["--connect", f"{h}:{p}"]
    proc = JsonProcess(args)
    proc.name = name
    return proc


def random_edges(n: int, degree: float, seed: int) -> list[tuple[str, str]]:
    """A connected random mesh of n clients named c0.. with about `degree` peers each."""
    from pelotari.potato.simulate import random_mesh
    return sorted(random_mesh(n, degree, random.Random(seed)))


def run_mesh(edges, transport: str, port: int = 34440, elections: int = 20,
             broadcasts: int = 200, label: str = "") -> dict:
    """Start the mesh, measure set-up, elections and the relay cost; one record. The clients
    are stopped however it ends (Children)."""
    names = sorted({n for e in edges for n in e})
    host = {n: f"127.0.0.{k + 1}" for k, n in enumerate(names)}
    started = time.monotonic()
    clients: dict[str, JsonProcess] = {}
    with Children():
        for n in names:  # each connects to its peers that started before it
            earlier = [a if b == n else b for a, b in edges if n in (a, b) and
                       (a if b == n else b) in clients]
            clients[n] = _client(n, host[n], port, transport, [(host[m], port) for m in earlier])
            if not wait_all([clients[n]], lambda c=clients[n]: any(
                    e["event"] == "listening" for e in c.events), 20):
                raise RuntimeError(f"{n} did not start")
        degree = {n: sum(n in e for e in edges) for n in names}
        everyone = list(clients.values())

        def connected():
            return all(len({e["peer"] for e in c.events if e["event"] == "peer_up"})
                       >= degree[c.name] for c in everyone)
        if not wait_all(everyone, connected, 60):
            raise RuntimeError("the mesh did not connect")
        setup = time.monotonic() - started
        origin = clients[names[0]]
        took = []
        for _ in range(elections):
            mark = {c: len(c.events) for c in everyone}
            t0 = time.time()
            origin.command("propose")
            ok = wait_all(everyone, lambda: any(e["event"] == "election_result"
                                             for e in origin.events[mark[origin]:]), 5)
            result = [e for e in origin.events[mark[origin]:] if e["event"] == "election_result"]
            if not ok or not result:
                raise RuntimeError("an election did not end")
            nxt = result[-1]["next"]
            wait_all(everyone, lambda: all(any(e["event"] == "frame" and e.get("frame") == nxt
                                            for e in c.events[mark[c]:]) for c in everyone), 5)
            took.append((result[-1]["time"] - t0) * 1000)
        cpu0 = sum(c.cpu() for c in everyone)
        mark = {c: len(c.events) for c in everyone}
        for k in range(broadcasts):
            origin.command(f"broadcast relay-cost {k}")
        wait_all(everyone, lambda: all(sum(1 for e in c.events[mark[c]:] if e["event"] == "message")
                                    >= broadcasts for c in everyone if c is not origin), 60)
        cpu = sum(c.cpu() for c in everyone) - cpu0
        took.sort()
        return {"kind": "potato-mesh", "where": "processes", "mesh": label,
                "transport": transport, "nodes": len(names), "edges": len(edges),
                "setup_s": setup, "elections": len(took),
                "election_p50_ms": took[len(took) // 2],
                "election_p99_ms": took[min(len(took) - 1, int(len(took) * 0.99))],
                "broadcasts": broadcasts,
                "cpu_us_per_delivery": cpu / (broadcasts * (len(names) - 1)) * 1e6}


def run_mixed_all(progress: Callable[[str], None] = lambda s: None, port: int = 34440,
                  transport: str = "tcp") -> list[dict]:
    """The A-G mesh with 3 pages, and 16 Python clients with 4 pages (2 on c0, 2 on c8)."""
    out = []
    big = (random_edges(16, 4, 0), {"p0": "c0", "p1": "c0", "p2": "c8", "p3": "c8"})
    for label, (edges, pages) in (("A-G, 3 pages", MIXED_EXAMPLE),
                                  ("16 clients + 4 pages", big)):
        r = run_mixed(edges, pages, transport=transport, port=port, label=label)
        out.append(r)
        progress(f"{label} over {transport}: set-up {r['setup_s']:.2f} s, page to first peer "
                 f"{r['page_first_peer_ms_p50']:.0f} ms, election p50 "
                 f"{r['election_p50_ms']:.1f} ms p99 {r['election_p99_ms']:.1f} ms, "
                 f"{r['frames_agreed']}/{r['elections']} frames taken by every client, node "
                 f"CPU {r['node_cpu_pct_per_page']:.1f} % per page")
    return out


def run(progress: Callable[[str], None] = lambda s: None, port: int = 34440) -> list[dict]:
    """The A-G mesh and a 20-client mesh (degree 4), over WebRTC and TCP, on `port`."""
    out = []
    for label, edges in (("A-G", EXAMPLE), ("20 clients", random_edges(20, 4, 0))):
        for transport in ("webrtc", "tcp"):
            r = run_mesh(edges, transport, port=port, label=label)
            out.append(r)
            progress(f"{label} over {transport}: set-up {r['setup_s']:.2f} s, election "
                     f"p50 {r['election_p50_ms']:.1f} ms p99 {r['election_p99_ms']:.1f} ms, "
                     f"{r['cpu_us_per_delivery']:.0f} µs CPU per delivery")
    return out


# ---- mixed meshes: pages in headless chromium beside Python clients ----------------------------

# The seed's A-G with 3 of the 7 clients as pages. A page links only to the node that served it
# and to that node's other pages, so B is A's page, F and G are D's, and G's link to E becomes
# a link to F (the one change to the drawing: E-G cannot exist with G a page of D).
MIXED_EXAMPLE = ([("A", "C"), ("C", "D"), ("C", "E"), ("D", "E")], {"B": "A", "F": "D", "G": "D"})


def _chromium():
    """Playwright and Debian's chromium, or RuntimeError saying what is missing."""
    import shutil

    path = shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if path is None or sync_playwright is None:
        raise RuntimeError("a mixed run needs Debian's chromium and Playwright for Python "
                           "(`bash tools/run test` installs both)")
    return sync_playwright, path


def _page_wait(page, condition: str, timeout: float) -> bool:
    """Wait until `condition` (JS on `s`, the page's window.potato.state()) holds."""
    try:
        page.wait_for_function(f"(() => {{ const s = window.potato.state(); "
                               f"return {condition}; }})()", timeout=timeout * 1000)
        return True
    except Exception:  # Playwright's TimeoutError
        return False


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


def run_mixed(edges, pages: dict[str, str], transport: str = "tcp", port: int = 34440,
              elections: int = 20, label: str = "", idle_s: float = 5.0) -> dict:
    """Python clients joined by `edges`, and pages (name -> the Python client that serves
    it) in headless chromium; set-up, page load to first peer, elections from the first page
    (propose to result, and whether every client took the frame), and the CPU of the nodes
    that serve pages, idle, before and after the pages came. One record; every process (the
    browser too) is stopped however it ends."""
    sync_playwright, chromium = _chromium()
    names = sorted({n for e in edges for n in e} | set(pages.values()))
    host = {n: f"127.0.0.{k + 1}" for k, n in enumerate(names)}
    servers = sorted(set(pages.values()))
    page_names = sorted(pages)
    started = time.monotonic()
    clients: dict[str, JsonProcess] = {}
    with Children():
        for n in names:
            earlier = [a if b == n else b for a, b in edges if n in (a, b) and
                       (a if b == n else b) in clients]
            proc = _client(n, host[n], port, transport, [(host[m], port) for m in earlier],
                           http=f"{host[n]}:{port + 1}" if n in servers else None)
            clients[n] = proc
            if not wait_all([proc], lambda c=proc: any(e["event"] == "listening"
                                                       for e in c.events), 20):
                raise RuntimeError(f"{n} did not start")
        everyone = list(clients.values())
        degree = {n: sum(n in e for e in edges) for n in names}

        def python_connected():
            return all(len({e["peer"] for e in c.events if e["event"] == "peer_up"
                            and e["peer"] in clients}) >= degree[c.name] for c in everyone)
        if not wait_all(everyone, python_connected, 60):
            raise RuntimeError("the Python clients did not connect")
        python_setup = time.monotonic() - started
        served = [clients[s] for s in servers]
        cpu0 = sum(c.cpu() for c in served)
        wait_all(everyone, lambda: False, idle_s)  # (reading their output meanwhile)
        idle_before = (sum(c.cpu() for c in served) - cpu0) / idle_s
        pages_started = time.monotonic()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, headless=True)
            opened = {}
            for p in page_names:
                ctx = browser.new_context(bypass_csp=True)  # (wait_for_function evaluates)
                page = ctx.new_page()
                page.goto(f"http://{host[pages[p]]}:{port + 1}/?name={p}&auto=0")
                opened[p] = page
            want = {p: {pages[p]} | {q for q in page_names if pages[q] == pages[p] and q != p}
                    for p in page_names}
            for p, page in opened.items():
                cond = " && ".join(f"s.peers.includes({q!r})" for q in sorted(want[p]))
                if not _page_wait(page, cond, 60):
                    raise RuntimeError(f"page {p} did not link to {', '.join(sorted(want[p]))}")
            # (the idle CPU window between the two is not set-up)
            setup = python_setup + time.monotonic() - pages_started
            first_peer = [opened[p].evaluate("window.potato.state().firstPeerMs")
                          for p in page_names]
            cpu0 = sum(c.cpu() for c in served)
            wait_all(everyone, lambda: False, idle_s)
            idle_after = (sum(c.cpu() for c in served) - cpu0) / idle_s
            origin = opened[page_names[0]]
            took, agreed, won = [], 0, 0
            for k in range(elections):
                mark = {c: len(c.events) for c in everyone}
                origin.evaluate("window.potato.propose()")
                if not _page_wait(origin, f"s.results.length >= {k + 1}", 10):
                    raise RuntimeError("an election did not end")
                result = origin.evaluate("window.potato.state().results")[k]
                took.append(result["ms"])
                nxt = result["next"]
                if not result["won"]:
                    continue
                won += 1
                py = wait_all(everyone, lambda: all(any(
                    e["event"] == "frame" and e.get("frame") == nxt for e in c.events[mark[c]:])
                    for c in everyone), 5)
                br = all(_page_wait(pg, f"s.frame === {nxt!r}", 5) for pg in opened.values())
                agreed += py and br
            browser.close()
        return {"kind": "potato-mixed", "where": "processes", "mesh": label,
                "transport": transport, "python_clients": len(names), "pages": len(pages),
                "edges": len(edges) + len(pages) + sum(len(w) - 1 for w in want.values()) // 2,
                "setup_s": setup, "page_first_peer_ms_p50": _percentile(first_peer, 0.5),
                "page_first_peer_ms_max": max(first_peer), "elections": len(took),
                "election_p50_ms": _percentile(took, 0.5),
                "election_p99_ms": _percentile(took, 0.99),
                "elections_won": won, "frames_agreed": agreed,
                "node_cpu_idle_pct": 100 * idle_before / len(served),
                "node_cpu_pct_per_page": 100 * (idle_after - idle_before) / len(pages)}
