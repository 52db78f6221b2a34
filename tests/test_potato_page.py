"""The potato page's server against strangers, on real sockets: its files, the Host and Origin
checks, the per-address and total limits, hellos that never come, garbage, oversize messages,
relayed signaling floods; and a real WebRTC offer (aiortc standing in for a page) answered."""
import asyncio
import json
import socket
import time

import aiohttp
import pytest

from pelotari.potato.node import Node
from pelotari.potato.page import CSP, PageServer
from pelotari.potato.transport import _aiortc, _CANDIDATE_HOSTS


async def served(browser_args=None, **limits):
    node = Node("A", "127.0.0.1", 0, transport="tcp")
    await node.start()
    node.add_browsers("127.0.0.1", **(browser_args or {}))
    pages = PageServer(node, "127.0.0.1", 0, **limits)
    await pages.start()
    return node, pages


async def stop(node, pages):
    await pages.close()
    await node.close()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def get(pages, path, headers=None, local="127.0.0.1"):
    conn = aiohttp.TCPConnector(local_addr=(local, 0), force_close=True)
    async with aiohttp.ClientSession(connector=conn) as s:
        async with s.get(f"http://127.0.0.1:{pages.port}{path}", headers=headers or {},
                         allow_redirects=False) as r:
            return r.status, dict(r.headers), await r.read()


async def offer_sdp(host="127.0.0.1", mdns=False):
    """A real data-channel offer from aiortc (what a page sends), on `host`; and its pc. mdns:
    its candidates' addresses hidden behind .local names, as a browser's are."""
    rtc = _aiortc()
    pc = rtc.RTCPeerConnection(rtc.RTCConfiguration(iceServers=[]))
    pc.channel = pc.createDataChannel("potato", ordered=True)
    token = _CANDIDATE_HOSTS.set([host])
    try:
        await pc.setLocalDescription(await pc.createOffer())
    finally:
        _CANDIDATE_HOSTS.reset(token)
    sdp = pc.localDescription.sdp
    if mdns:
        sdp = sdp.replace(f" {host} ", " 4f0c1a2e-9b7d-4e51-8a3c-2d6f0e9b1c57.local ")
    return sdp, pc


class Page:
    """A WebSocket to /signal, as a page opens it."""

    def __init__(self, session, ws):
        self.session, self.ws = session, ws

    @classmethod
    async def open(cls, pages, local="127.0.0.1", origin=True):
        conn = aiohttp.TCPConnector(local_addr=(local, 0), force_close=True)
        session = aiohttp.ClientSession(connector=conn)
        headers = {"Origin": f"http://127.0.0.1:{pages.port}"} if origin else {}
        try:
            ws = await session.ws_connect(f"http://127.0.0.1:{pages.port}/signal",
                                          headers=headers, autoping=True)
        except BaseException:
            await session.close()
            raise
        return cls(session, ws)

    async def hello(self, name, **offer):
        sdp, self.pc = await offer_sdp(**offer)
        await self.ws.send_json({"hello": name, "offer": sdp})
        return await self.ws.receive_json(timeout=10)

    async def close(self):
        await self.ws.close()
        await self.session.close()
        if getattr(self, "pc", None) is not None:
            await self.pc.close()


def test_the_page_is_served_with_a_strict_policy_and_nothing_else_is():
    async def main():
        node, pages = await served()
        try:
            status, headers, body = await get(pages, "/")
            assert status == 200 and b"<canvas" in body
            assert headers["Content-Security-Policy"] == CSP
            assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP
            for path in ("/core.js", "/page.js"):
                status, headers, _ = await get(pages, path)
                assert status == 200 and headers["Content-Type"].startswith("text/javascript")
            for path in ("/setup.py", "/../page.py", "/web/core.js", "/%2e%2e/page.py"):
                assert (await get(pages, path))[0] == 404
        finally:
            await stop(node, pages)
    run(main())


def test_a_host_header_naming_another_site_is_refused():
    # DNS rebinding: another site's name resolving to 127.0.0.1 would make the page (and its
    # WebSocket) same-origin with that site.
    async def main():
        node, pages = await served()
        try:
            assert (await get(pages, "/", {"Host": f"evil.example:{pages.port}"}))[0] == 421
            assert (await get(pages, "/", {"Host": f"localhost:{pages.port}"}))[0] == 200
            assert pages.stats["http_refused_host"] == 1
        finally:
            await stop(node, pages)
    run(main())


def test_a_websocket_from_another_sites_page_is_refused():
    async def main():
        node, pages = await served()
        try:
            conn = aiohttp.TCPConnector(force_close=True)
            async with aiohttp.ClientSession(connector=conn) as s:
                with pytest.raises(aiohttp.WSServerHandshakeError) as e:
                    await s.ws_connect(f"http://127.0.0.1:{pages.port}/signal",
                                       headers={"Origin": "http://evil.example"})
            assert e.value.status == 403 and pages.stats["signal_refused_origin"] == 1
            ok = await Page.open(pages)  # the page's own origin
            await ok.close()
        finally:
            await stop(node, pages)
    run(main())


def test_websockets_per_address_at_the_limit_and_one_past_it():
    async def main():
        node, pages = await served(max_per_host=4, hello_timeout=30)
        held = []
        try:
            for _ in range(4):
                held.append(await Page.open(pages))
            with pytest.raises(aiohttp.WSServerHandshakeError) as e:
                await Page.open(pages)
            assert e.value.status == 429 and pages.stats["signal_refused_per_host"] == 1
            other = await Page.open(pages, local="127.0.0.2")  # another address still gets in
            held.append(other)
            answer = await other.hello("P2")
            assert "answer" in answer and answer["pages"] == []
        finally:
            for p in held:
                await p.close()
            await stop(node, pages)
    run(main())


def test_a_page_that_never_says_hello_is_closed_and_frees_its_place():
    async def main():
        node, pages = await served(max_per_host=1, hello_timeout=0.5)
        try:
            silent = await Page.open(pages)
            msg = await silent.ws.receive(timeout=20)  # closed by the node, by event
            assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            assert pages.stats["signal_hello_timeout"] == 1
            await silent.close()
            for _ in range(200):  # (the handler's finally runs just after the close frame)
                if not pages._sockets:
                    break
                await asyncio.sleep(0.01)
            page = await Page.open(pages)  # its place is free again
            assert "answer" in await page.hello("P1")
            await page.close()
        finally:
            await stop(node, pages)
    run(main())


@pytest.mark.parametrize("hello", [
    "not json", "[1, 2]", '{"hello": "P1"}', '{"hello": "", "offer": "x"}',
    '{"hello": ["P1"], "offer": "x"}', '{"hello": "P1", "offer": 5}',
    '{"hello": "\\ud800", "offer": "x"}', '{"hello": "P1", "offer": "not an SDP"}',
    '{"hello": "A", "offer": "x"}',
])
def test_a_bad_hello_is_refused_in_one_message_and_the_socket_closed(hello):
    async def main():
        node, pages = await served()
        try:
            page = await Page.open(pages)
            await page.ws.send_str(hello)
            reply = await page.ws.receive_json(timeout=10)
            assert reply["hello"] == "A" and isinstance(reply["refused"], str)
            assert (await page.ws.receive(timeout=10)).type in (aiohttp.WSMsgType.CLOSE,
                                                                aiohttp.WSMsgType.CLOSED)
            await page.close()
            assert not node.browsers.peers() and not pages.pages
        finally:
            await stop(node, pages)
    run(main())


def test_an_oversize_or_binary_message_closes_that_socket_only():
    async def main():
        node, pages = await served(max_signal=4096)
        try:
            good = await Page.open(pages)
            assert "answer" in await good.hello("P1")
            big = await Page.open(pages)
            await big.ws.send_str("x" * 5000)
            assert (await big.ws.receive(timeout=10)).type in (aiohttp.WSMsgType.CLOSE,
                                                               aiohttp.WSMsgType.CLOSED)
            binary = await Page.open(pages)
            await binary.ws.send_bytes(b'{"hello": "P3"}')
            assert "refused" in await binary.ws.receive_json(timeout=10)
            assert "P1" in pages.pages
            for p in (good, big, binary):
                await p.close()
        finally:
            await stop(node, pages)
    run(main())


def test_relayed_signaling_names_its_sender_and_a_flood_of_it_is_bounded():
    async def main():
        node, pages = await served(signal_rate=10, signal_burst=20)
        try:
            p1, p2 = await Page.open(pages), await Page.open(pages, local="127.0.0.2")
            assert (await p1.hello("P1"))["pages"] == []
            assert (await p2.hello("P2"))["pages"] == ["P1"]
            # P2 pretends to be someone else: `from` is the node's word, not the page's.
            await p2.ws.send_json({"to": "P1", "offer": "v=0", "from": "Z"})  # malformed
            await p2.ws.send_json({"to": "P1", "offer": "v=0"})
            got = await p1.ws.receive_json(timeout=10)
            assert got == {"from": "P2", "offer": "v=0"}
            await p2.ws.send_json({"to": "nobody", "answer": "v=0"})
            await p2.ws.send_json({"to": "P2", "answer": "v=0"})  # to itself
            start = time.monotonic()
            for k in range(2000):
                await p2.ws.send_json({"to": "P1", "offer": f"flood {k}"})
            await p2.ws.send_json({"to": "P1", "refused": "x" * 101})  # too long a reason
            # The node keeps serving: a new page gets its answer while the flood is read.
            p3 = await Page.open(pages, local="127.0.0.3")
            assert (await p3.hello("P3"))["pages"] == ["P1", "P2"]
            for _ in range(500):
                if pages.stats["signal_dropped_rate"] + pages.stats["signal_relayed"] >= 2001:
                    break
                await asyncio.sleep(0.02)
            elapsed = time.monotonic() - start
            relayed = pages.stats["signal_relayed"]
            assert relayed <= 1 + 20 + 10 * elapsed + 1, (relayed, elapsed)
            assert pages.stats["signal_dropped_rate"] >= 2000 - relayed
            assert pages.stats["signal_dropped_malformed"] == 2
            assert pages.stats["signal_dropped_unknown_page"] == 2
            for p in (p1, p2, p3):
                await p.close()
        finally:
            await stop(node, pages)
    run(main())


def test_requests_from_one_address_past_its_bucket_get_429_and_others_are_served():
    async def main():
        node, pages = await served(http_rate=1, http_burst=5)
        try:
            got = [await get(pages, "/") for _ in range(8)]
            codes = [status for status, _, _ in got]
            assert codes[:5] == [200] * 5 and 429 in codes[5:]
            # (a browser shows the body: a person who reloaded too often learns why, and when)
            status, headers, body = got[codes.index(429)]
            assert headers["Retry-After"] == "1" and b"try again" in body
            assert (await get(pages, "/", local="127.0.0.2"))[0] == 200
        finally:
            await stop(node, pages)
    run(main())


def test_a_page_name_taken_by_a_tcp_peer_is_refused():
    # A name is one peer, whichever transport brought it.
    async def main():
        node, pages = await served()
        other = Node("P1", "127.0.0.2", 0, transport="tcp")
        await other.start()
        try:
            assert await other.connect("127.0.0.1", node.transport.port) == "A"
            page = await Page.open(pages)
            reply = await page.hello("P1")
            assert reply["refused"] == "duplicate"
            await page.close()
        finally:
            await other.close()
            await stop(node, pages)
    run(main())


@pytest.mark.parametrize("signaled_from,mdns", [("127.0.0.1", False), ("127.0.0.2", True)])
def test_the_node_answers_a_page_offer_and_the_data_channel_carries_potato(signaled_from, mdns):
    # With mdns the offer's candidates are .local names, as a browser's are: all dropped, and
    # ICE learns the page's address from its checks.
    async def main():
        node, pages = await served()
        try:
            page = await Page.open(pages, local=signaled_from)
            reply = await page.hello("P1", host=signaled_from, mdns=mdns)
            pc, channel = page.pc, page.pc.channel
            opened = asyncio.get_running_loop().create_future()
            got = asyncio.Queue()
            channel.on("open", lambda: opened.done() or opened.set_result(True))
            channel.on("message", got.put_nowait)
            rtc = _aiortc()
            await pc.setRemoteDescription(rtc.RTCSessionDescription(reply["answer"], "answer"))
            await asyncio.wait_for(opened, 15)
            for _ in range(500):
                if "P1" in node.peers():
                    break
                await asyncio.sleep(0.01)
            assert node.peers() == ["P1"]
            node.broadcast("hello page")
            while True:
                m = await asyncio.wait_for(got.get(), 10)
                if m != '{"ping": 1}':
                    break
            msg = json.loads(m)
            assert (msg["type"], msg["from"], msg["body"]) == ("broadcast", "A", "hello page")
            await page.close()
        finally:
            await stop(node, pages)
    run(main())


async def _slow_headers(pages, local):
    """A connection that starts a request and never finishes its headers (slowloris)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", pages.port, local_addr=(local, 0))
    writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-a: b\r\n")
    await writer.drain()
    return reader, writer


async def _closed_without_a_byte(reader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(100), 10) == b""
    except ConnectionResetError:
        return True


@pytest.mark.slow
def test_connections_held_with_slow_headers_are_bounded_and_closed():
    # 1,100 connections sending a header line every few seconds (from 127.0.10.x) ran a node
    # with the usual 1,024 descriptors out of them: the page, /signal and the node's own
    # listening socket got "Too many open files" (and 40,000 log lines in 10 s).
    async def main():
        node, pages = await served(max_connections=6, max_connections_per_host=3,
                                   idle_timeout=0.5)
        held = []
        try:
            for _ in range(3):
                held.append(await _slow_headers(pages, "127.0.0.41"))
            over, over_w = await _slow_headers(pages, "127.0.0.41")  # its address's 4th
            assert await _closed_without_a_byte(over)
            over_w.close()
            assert pages.stats["http_refused_connection"] == 1
            for _ in range(3):
                held.append(await _slow_headers(pages, "127.0.0.42"))
            # The server is full of idle connections: a page request closes the oldest.
            assert (await get(pages, "/", local="127.0.0.43"))[0] == 200
            assert pages.stats["http_closed_evicted"] == 1
            assert await _closed_without_a_byte(held[0][0])
            # The others are closed when they have no complete request within idle_timeout.
            for reader, _ in held[1:]:
                assert await asyncio.wait_for(reader.read(), 10) is not None
            for _ in range(200):
                if not pages._connections:
                    break
                await asyncio.sleep(0.01)
            assert not pages._connections and not pages._handlers
            assert (await get(pages, "/", local="127.0.0.41"))[0] == 200
        finally:
            for _, w in held:
                w.close()
            await stop(node, pages)
    run(main())


def test_websockets_are_never_closed_for_new_connections():
    async def main():
        node, pages = await served(max_connections=2, max_connections_per_host=2)
        try:
            p1, p2 = await Page.open(pages), await Page.open(pages, local="127.0.0.2")
            reader, writer = await _slow_headers(pages, "127.0.0.3")
            assert await _closed_without_a_byte(reader)
            writer.close()
            assert pages.stats["http_refused_connection"] == 1
            assert not p1.ws.closed and not p2.ws.closed
            for p in (p1, p2):
                await p.close()
        finally:
            await stop(node, pages)
    run(main())


def test_a_page_websocket_outlives_the_idle_timeout():
    async def main():
        node, pages = await served(idle_timeout=0.1, hello_timeout=5)
        try:
            page = await Page.open(pages)
            assert "answer" in await page.hello("P1")
            with pytest.raises(asyncio.TimeoutError):
                await page.ws.receive(timeout=0.3)  # nothing comes, and it is not closed
            assert not page.ws.closed and "P1" in pages.pages
            await page.close()
        finally:
            await stop(node, pages)
    run(main())


async def _until(predicate, what):
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(what)


def test_a_page_link_goes_with_its_websocket():
    # Links outlived their WebSocket: one address that said hello and closed, again and
    # again, held 47 links in 4 s (max_per_host bounded only its open WebSockets), so two
    # addresses filled the 64 places and real pages were refused (max_peers); and a page that
    # reloaded could not say hello under its name until its old link timed out (duplicate).
    async def main():
        node, pages = await served(browser_args={"handshake_timeout": 60}, hello_timeout=5)
        sdp, pc = await offer_sdp()
        await pc.close()
        try:
            for k in range(6):  # more than max_per_host (4), one after another
                page = await Page.open(pages, local="127.0.0.9")
                await page.ws.send_json({"hello": "P1", "offer": sdp})  # the same name
                assert "answer" in await page.ws.receive_json(timeout=10), k
                assert len(node.browsers._peers) == 1
                await page.close()
                await _until(lambda: not node.browsers._peers, "the link outlived its socket")
            assert node.browsers.stats["closed_signaling"] == 6
        finally:
            await stop(node, pages)
    run(main())


def test_a_page_whose_link_does_not_open_loses_its_websocket():
    # A page that said hello and never brought its link up kept its WebSocket (and its place
    # among max_pages and max_per_host) for good.
    async def main():
        node, pages = await served(browser_args={"handshake_timeout": 0.3}, hello_timeout=5)
        sdp, pc = await offer_sdp()
        await pc.close()
        try:
            page = await Page.open(pages)
            await page.ws.send_json({"hello": "P1", "offer": sdp})  # its pc is gone: no ICE
            assert "answer" in await page.ws.receive_json(timeout=10)
            msg = await page.ws.receive(timeout=10)  # closed by the node, by event
            assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            assert pages.stats["signal_closed_link"] == 1
            await page.close()
            await _until(lambda: not pages.pages and not pages._sockets, "the page stayed")
        finally:
            await stop(node, pages)
    run(main())


def _ice_of(sdp):
    """(ufrag, pwd) of an SDP."""
    import re
    return (re.search(r"^a=ice-ufrag:(\S+)", sdp, re.M)[1],
            re.search(r"^a=ice-pwd:(\S+)", sdp, re.M)[1])


def ice_check(answer: str, offer: str) -> bytes:
    """A STUN binding request with the credentials of a signaled pair (what the offerer's
    checks are; whoever signaled knows them, and UDP lets it send one from any address)."""
    from aioice import stun

    ufrag, pwd = _ice_of(answer)
    msg = stun.Message(message_method=stun.Method.BINDING, message_class=stun.Class.REQUEST)
    msg.attributes["USERNAME"] = f"{ufrag}:{_ice_of(offer)[0]}"
    msg.attributes["PRIORITY"] = 1
    msg.attributes["ICE-CONTROLLING"] = 1
    msg.add_message_integrity(pwd.encode())
    msg.add_fingerprint()
    return bytes(msg)


def ice_address(answer: str) -> tuple[str, int]:
    (line,) = [x for x in answer.splitlines() if x.startswith("a=candidate:")]
    fields = line.split()
    return fields[4], int(fields[5])


def udp(host):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, 0))
    return sock


def replies(sock, timeout) -> list[bytes]:
    """What came to sock: waiting up to `timeout` for the first datagram, then what is there."""
    got = []
    sock.settimeout(timeout)
    try:
        while True:
            got.append(sock.recv(2048))
            sock.settimeout(0)
    except (socket.timeout, BlockingIOError):
        pass
    return got


def test_ice_checks_are_answered_only_on_the_address_that_signaled():
    # The attack review: a page knows the node's ICE credentials (its answer), and a STUN check
    # can carry any source address. The node answered checks from anywhere, and learned each
    # source as a peer-reflexive candidate that it then checked itself: for one 88-byte check
    # spoofed from a third party, the third party got 5 datagrams, 416 bytes.
    async def main():
        node, pages = await served(browser_args={"handshake_timeout": 30})
        third, own = udp("127.0.0.66"), udp("127.0.0.2")
        others = [udp("127.0.0.2") for _ in range(12)]
        try:
            page = await Page.open(pages, local="127.0.0.2")
            reply = await page.hello("P1")  # (its candidates, on 127.0.0.1, dropped)
            check = ice_check(reply["answer"], page.pc.localDescription.sdp)
            ice = ice_address(reply["answer"])
            third.sendto(check, ice)
            own.sendto(check, ice)  # the page's own address: answered
            assert await asyncio.to_thread(replies, own, 10)
            assert await asyncio.to_thread(replies, third, 0.3) == []
            assert node.browsers.stats["ice_checks_dropped"] == 1
            # From the page's address, at most max_candidates (8) addresses are learned.
            for sock in others:
                sock.sendto(check, ice)
            own.sendto(check, ice)  # (known: answered, after the others were read)
            assert await asyncio.to_thread(replies, own, 10)
            answered = [s for s in others if await asyncio.to_thread(replies, s, 0)]
            assert len(answered) == 8 - 1, len(answered)
            assert node.browsers.stats["ice_checks_dropped"] == 1 + len(others) - len(answered)
            await page.close()
        finally:
            for sock in [third, own, *others]:
                sock.close()
            await stop(node, pages)
    run(main())


@pytest.mark.parametrize("change,refused", [
    ("no fingerprint", "bad_sdp"),  # was answered, and aiortc's AssertionError was logged
    ("mid of 33", "bad_sdp"),  # was answered with the mid twice: 10,904 bytes for 5,905
    ("mid of 32", None),
])
def test_offers_are_screened_before_aiortc_takes_them(change, refused, caplog):
    import re

    async def main():
        node, pages = await served(browser_args={"handshake_timeout": 0.2})
        sdp, pc = await offer_sdp()
        await pc.close()
        if change == "no fingerprint":
            sdp = re.sub(r"^a=fingerprint:.*\r\n", "", sdp, flags=re.M)
        else:
            mid = "m" * int(change.split()[-1])
            sdp = re.sub(r"^a=mid:.*$", f"a=mid:{mid}", sdp, flags=re.M)
            sdp = re.sub(r"^a=group:BUNDLE .*$", f"a=group:BUNDLE {mid}", sdp, flags=re.M)
        try:
            page = await Page.open(pages)
            await page.ws.send_json({"hello": "P1", "offer": sdp})
            reply = await page.ws.receive_json(timeout=10)
            assert reply.get("refused") == refused
            if refused is None:
                assert len(reply["answer"]) <= len(sdp) + 200
            # (the link, if any, is dropped at its handshake timeout: aiortc has run by then)
            msg = await page.ws.receive(timeout=10)
            assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            await page.close()
        finally:
            await stop(node, pages)
    with caplog.at_level("ERROR"):
        run(main())
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


def test_a_page_cannot_keep_a_connect_target_out_by_taking_its_name():
    # The attack review: with B down for a moment, a page on A named itself "B"; A's
    # --connect to B was then refused `duplicate` for as long as the page stayed. The peers a
    # node connects to are sure of their place: the page gives the name up.
    async def main():
        node, pages = await served(browser_args={"handshake_timeout": 30}, hello_timeout=5)
        b = Node("B", "127.0.0.2", 0, transport="tcp")
        await b.start()
        try:
            page = await Page.open(pages, local="127.0.0.9")
            assert "answer" in await page.hello("B")
            assert await node.connect("127.0.0.2", b.transport.port) == "B"
            msg = await page.ws.receive(timeout=10)  # the page's link and socket are gone
            assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            assert node.browsers.stats["closed_evicted"] == 1
            await _until(lambda: node.peers() == ["B"] and not node.browsers._peers, "B")
            await page.close()
        finally:
            await b.close()
            await stop(node, pages)
    run(main())


@pytest.mark.parametrize("value,says", [
    ("localhost", "port"),  # was served on 9466, the metrics server's default port
    ("[::1]:8080", "the page server listens on IPv4"),  # was: "the metrics server ..."
])
def test_http_addresses_the_cli_refuses_say_what_is_wrong(value, says):
    import click

    from pelotari.cli.potato import node as command

    (http,) = [p for p in command.params if p.name == "http"]
    with pytest.raises(click.BadParameter) as e:
        http.type.convert(value, http, None)
    assert says in e.value.message and "metrics" not in e.value.message
    assert http.type.convert("8080", http, None) == ("127.0.0.1", 8080)
    assert http.type.convert("localhost:0", http, None) == ("127.0.0.1", 0)


async def _websocket_that_never_reads(pages, local, name, sdp):
    """A WebSocket to /signal that says hello and then reads nothing (a small receive buffer)."""
    import base64
    import os

    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.bind((local, 0))
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", pages.port))
    key = base64.b64encode(os.urandom(16)).decode()
    await loop.sock_sendall(sock, (
        f"GET /signal HTTP/1.1\r\nHost: 127.0.0.1:{pages.port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ).encode())
    assert (await loop.sock_recv(sock, 12)).startswith(b"HTTP/1.1 101")
    hello = json.dumps({"hello": name, "offer": sdp}).encode()
    mask = os.urandom(4)
    await loop.sock_sendall(sock, bytes([0x81, 0x80 | 126]) + len(hello).to_bytes(2, "big") + mask
                            + bytes(b ^ mask[i % 4] for i, b in enumerate(hello)))
    return sock


def test_a_page_that_does_not_read_gets_no_more_than_a_bounded_backlog():
    # The attack review: relayed signaling for a page that never read its WebSocket piled up
    # in the node's memory (311 KB after 20 s from one address, and growing) — aiohttp waits
    # for the buffer to drain only every 64 KB, and our 1 s wait gave up on that too.
    async def main():
        node, pages = await served(browser_args={"handshake_timeout": 60}, hello_timeout=30,
                                   signal_rate=1000, signal_burst=1000,
                                   signal_byte_rate=1e9, signal_byte_burst=1e9)
        sdp, pc = await offer_sdp()
        await pc.close()
        target = await _websocket_that_never_reads(pages, "127.0.0.50", "T", sdp)
        try:
            await _until(lambda: "T" in pages.pages, "the target's hello")
            sender = await Page.open(pages, local="127.0.0.51")
            assert (await sender.hello("S"))["pages"] == ["T"]
            for _ in range(200):  # 6 MB for a page that reads nothing
                await sender.ws.send_json({"to": "T", "offer": "x" * 30000})
            await _until(lambda: pages.stats["signal_relayed"] + pages.stats["signal_dropped_send"]
                         >= 200, "the flood was read")
            buffered = pages._transports["T"].get_write_buffer_size()
            assert buffered <= 65536, buffered
            assert pages.stats["signal_dropped_send"] > 0
            await sender.close()
        finally:
            target.close()
            await stop(node, pages)
    run(main())


@pytest.mark.slow
def test_the_server_closes_at_once_with_a_page_that_does_not_read():
    # A page that reads nothing and pings (each ping is answered: the answers pile up in our
    # buffer): closing its WebSocket waited for that buffer to drain, and Ctrl-C with it.
    async def main():
        node, pages = await served(browser_args={"handshake_timeout": 60}, hello_timeout=30)
        sdp, pc = await offer_sdp()
        await pc.close()
        target = await _websocket_that_never_reads(pages, "127.0.0.50", "T", sdp)
        loop = asyncio.get_running_loop()
        try:
            await _until(lambda: "T" in pages.pages, "the target's hello")
            ping = bytes([0x89, 0x80 | 125]) + bytes(4) + b"p" * 125  # (masked with zeros)
            for _ in range(1000):  # (the kernel's send buffer takes megabytes first)
                try:
                    await asyncio.wait_for(loop.sock_sendall(target, ping * 100), 1.0)
                except asyncio.TimeoutError:
                    break  # the node stopped reading: its pongs wait in its buffer
            else:
                raise AssertionError("the pongs did not pile up")
            other = await Page.open(pages, local="127.0.0.51")
            assert (await other.hello("S"))["pages"] == ["T"]
            await other.ws.send_json({"to": "T", "offer": "v=0"})  # (dropped: T's backlog)
            await asyncio.wait_for(stop(node, pages), 10)
            assert pages.stats["signal_dropped_send"] == 1
            await other.close()
        finally:
            target.close()
    run(main())


async def linked_page(pages, node, name, local="127.0.0.1"):
    """A page (aiortc) whose data channel to the node is open."""
    page = await Page.open(pages, local=local)
    reply = await page.hello(name, host=local)
    opened = asyncio.get_running_loop().create_future()
    page.pc.channel.on("open", lambda: opened.done() or opened.set_result(True))
    await page.pc.setRemoteDescription(_aiortc().RTCSessionDescription(reply["answer"], "answer"))
    await asyncio.wait_for(opened, 15)
    await _until(lambda: name in node.peers(), "the page's link")
    return page


@pytest.mark.slow
def test_a_page_sending_a_message_without_end_is_dropped():
    # The attack review: aiortc keeps every fragment of a data channel message until the last
    # one comes, without limit (and its sender does not heed our receive window): a page that
    # skipped its own size check sent a 40 MB message, and the node grew by 35 MB, the link
    # still up. More than 2 MiB waiting to be reassembled now ends the link.
    async def main():
        node, pages = await served()
        try:
            page = await linked_page(pages, node, "P1")
            page.pc.channel.transport._remote_max_message_size = None  # (its own check)
            page.pc.channel.send(b"x" * (3 << 20))
            await _until(lambda: "P1" not in node.peers(), "the link stayed")
            assert node.browsers.stats["closed_oversize"] == 1
            await page.close()
        finally:
            await stop(node, pages)
    run(main())


@pytest.mark.slow
def test_a_page_sending_a_message_in_endless_tiny_fragments_is_dropped():
    # The attack review: 1-byte fragments of a message that never ends (60 to an SCTP packet)
    # — aiortc scans every fragment it holds for each one that comes: 3 s of them kept the
    # node at 100 % CPU for 10 s more, requests to the page server waiting up to 0.6 s.
    from struct import pack

    from aiortc.rtcsctptransport import SCTP_DATA_FIRST_FRAG, WEBRTC_BINARY, DataChunk, crc32c

    async def main():
        node, pages = await served()
        try:
            page = await linked_page(pages, node, "P1")
            sctp = page.pc.channel.transport
            first, sent = True, 0
            while "P1" in node.peers() and sent < 200_000:
                chunks = b""
                for _ in range(60):
                    chunk = DataChunk(flags=SCTP_DATA_FIRST_FRAG if first else 0)
                    chunk.tsn, chunk.stream_id = sctp._local_tsn, page.pc.channel.id
                    chunk.stream_seq, chunk.protocol, chunk.user_data = 0, WEBRTC_BINARY, b"x"
                    sctp._local_tsn = (sctp._local_tsn + 1) % (1 << 32)
                    chunks += bytes(chunk)
                    first = False
                head = pack("!HHL", sctp._local_port, sctp._remote_port,
                            sctp._remote_verification_tag)
                try:
                    await sctp.transport._send_data(
                        head + pack("<L", crc32c(head + bytes(4) + chunks)) + chunks)
                except ConnectionError:  # (the node closed the link)
                    break
                sent += 60
                await asyncio.sleep(0.002)
            await _until(lambda: "P1" not in node.peers(), "the link stayed")
            assert node.browsers.stats["closed_oversize"] == 1
            assert sent < 20_000, sent
            await page.close()
        finally:
            await stop(node, pages)
    run(main())


def test_requests_pipelined_past_the_bucket_get_one_refusal_and_the_connection_ends():
    # Each 38-byte request pipelined behind an empty bucket got its own 429 (230 bytes, to the
    # address that asked: six times what it sent).
    async def main():
        node, pages = await served(http_rate=0.001, http_burst=1)
        try:
            assert (await get(pages, "/favicon.ico", local="127.0.0.77"))[0] == 204
            reader, writer = await asyncio.open_connection("127.0.0.1", pages.port,
                                                           local_addr=("127.0.0.77", 0))
            request = b"GET /favicon.ico HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            writer.write(request * 20)
            got = await asyncio.wait_for(reader.read(), 10)  # to the end: it is closed
            assert got.count(b"HTTP/1.1 429") == 1 and len(got) < len(request) * 20, got
            writer.close()
        finally:
            await stop(node, pages)
    run(main())


def test_sockets_that_never_say_hello_cannot_keep_a_real_page_out():
    # Every place held by sockets that said nothing: the oldest of them makes room. Once the
    # places are pages that said hello, one more is refused (503).
    async def main():
        node, pages = await served(max_pages=4, hello_timeout=30)
        held = []
        try:
            for k in range(4):
                held.append(await Page.open(pages, local=f"127.0.0.{10 + k}"))
            real = await Page.open(pages, local="127.0.0.20")
            held.append(real)
            assert "answer" in await real.hello("P1")
            assert pages.stats["signal_evicted_silent"] == 1
            msg = await held[0].ws.receive(timeout=10)  # the oldest silent one was closed
            assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED,
                                aiohttp.WSMsgType.ERROR)
            for k in range(3):  # the three other silent ones say hello: all places are pages
                assert "answer" in await held[1 + k].hello(f"Q{k}")
            with pytest.raises(aiohttp.WSServerHandshakeError) as e:
                await Page.open(pages, local="127.0.0.21")
            assert e.value.status == 503 and pages.stats["signal_refused_busy"] == 1
        finally:
            for p in held:
                await p.close()
            await stop(node, pages)
    run(main())


@pytest.mark.parametrize("garbage", [b"\x00" * 5000, bytes(range(256)) * 8,
                                     b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n"],
                         ids=["zeros", "random", "long-line"])
def test_garbage_on_the_page_port_gets_a_short_answer_that_quotes_none_of_it(garbage):
    # aiohttp's own 400 quoted the garbage back: 5,000 bytes in, 20,205 out.
    async def main():
        node, pages = await served()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", pages.port)
            writer.write(garbage)
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(), 10)  # (closed after it)
            writer.close()
            assert answer.startswith(b"HTTP/1.") and b" 400 " in answer.split(b"\r\n")[0]
            assert len(answer) <= 256 and b"\\x" not in answer and b"aaaa" not in answer
            assert pages.stats["http_error_400"] == 1
        finally:
            await stop(node, pages)
    run(main())
