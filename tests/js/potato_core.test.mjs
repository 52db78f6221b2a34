// The browser's potato core (pelotari/potato/web/core.js) against the shared vectors
// (tests/vectors/potato.json, read by the Python suite too) and the rules of
// tests/test_potato_core.py and tests/test_potato_picture.py, ported. Run: node --test tests/js/
import assert from "node:assert/strict";
import fs from "node:fs";
import { describe, test } from "node:test";

import {
  BadField, HEIGHT, INITIAL, MAX_LINE_WIDTH, MAX_POINTS, MAX_STROKES, NotJson, PotatoError,
  PotatoNode, TooLarge, WIDTH, compareNames, decode, defaultConfig, defaultLimits, encode, frameId,
  isName, newIdentifier, requestBody, responseBody, sha1Hex, strokes,
} from "../../pelotari/potato/web/core.js";
import { LinkSpec, Simulator } from "./sim.mjs";

const VECTORS = JSON.parse(fs.readFileSync(new URL("../vectors/potato.json", import.meta.url),
  "utf8"));
const WORKED = VECTORS.worked_example;

// ---- helpers: the Python suite's -------------------------------------------------------------

/** A simulated mesh: nodes named in edges, each peered with its neighbours (tests' mesh()). */
function mesh(edges, { frames = {}, delays = [], config = defaultConfig() } = {}) {
  const sim = new Simulator(new LinkSpec(WORKED.link_delay_s));
  const names = [...new Set(edges.flat())].sort();
  for (const n of names) {
    sim.add(n, (now) => new PotatoNode(n, now, config, frames[n] ?? WORKED.default_frame));
  }
  for (const [a, b] of edges) {
    sim.nodes.get(a).core.peerUp(b, 0.0);
    sim.nodes.get(b).core.peerUp(a, 0.0);
  }
  for (const [a, b, d] of delays) sim.link(a, b, new LinkSpec(d), false);
  return sim;
}

const core = (sim, name) => sim.nodes.get(name).core;
const example = () => mesh(WORKED.edges, { frames: WORKED.frames, delays: WORKED.slow_links_s });
const bytes = (text) => new TextEncoder().encode(text);

function events(n, kind = null) {
  const out = [];
  for (let ev = n.nextEvent(); ev !== null; ev = n.nextEvent()) {
    if (!kind || ev.kind === kind) out.push(ev);
  }
  return out;
}

function request(parent, next, origin = "Z", participants = []) {
  return encode({ type: "indirect_election_request", identifier: newIdentifier(), sender: origin,
    visited: [], to: null, body: { parent, next, originator: origin,
      direct_participants: participants } });
}

function frameBroadcast(body, sender = "Z") {
  return encode({ type: "broadcast", identifier: newIdentifier(), sender, visited: [sender],
    to: null, body });
}

/** A client on `frame` with two peers: P hands it messages, Q shows what it relays. */
function listener(frame = "F0", config = defaultConfig()) {
  const n = new PotatoNode("A", 0.0, config, frame);
  n.peerUp("P", 0.0);
  n.peerUp("Q", 0.0);
  events(n);
  return n;
}

const camel = (s) => s.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
const limitsOf = (v) => Object.fromEntries(Object.entries(v.limits ?? {})
  .map(([k, x]) => [camel(k), x]));

function dataOf(v) {
  if (v.data_hex !== undefined) return Uint8Array.from(Buffer.from(v.data_hex, "hex"));
  if (v.data_parts !== undefined) {
    return v.data_parts.map((p) => (typeof p === "string" ? p : p[0].repeat(p[1]))).join("");
  }
  return v.data;
}

function outcome(fn) {
  try {
    fn();
    return [true, undefined];
  } catch (e) {
    if (!(e instanceof PotatoError)) throw e;
    return [false, e.reason];
  }
}

// ---- 1. the seed's worked example ------------------------------------------------------------

describe("the seed's worked example (vectors: worked_example)", () => {
  test("votes, result, and every node on the new frame", () => {
    assert.deepEqual([WORKED.default_frame, WORKED.link_delay_s], ["F0", 0.001]);
    const sim = example();
    const next = sim.do(WORKED.proposer, (c, now) => c.propose(now));
    sim.run(0.5);
    const votes = Object.fromEntries(Object.keys(WORKED.votes)
      .map((n) => [n, sim.events(n, "VoteCast").map((e) => e.vote)]));
    assert.deepEqual(votes, Object.fromEntries(Object.entries(WORKED.votes)
      .map(([n, v]) => [n, [v]])));
    const results = sim.events(WORKED.proposer, "ElectionResult");
    assert.equal(results.length, 1);
    const [r] = results;
    assert.deepEqual([r.yes, r.no, r.won], [WORKED.result.yes, WORKED.result.no,
      WORKED.result.won]);
    assert.equal(core(sim, "B").stats.sent_direct_election_response, 1);
    for (const n of "ABCDEFG") {
      assert.equal(core(sim, n).frame, next, n);
      assert.equal(sim.events(n, "FrameChanged").length, 1, n);
    }
  });

  test("responses carry the counts of the table; D abstains to C", () => {
    const sim = example();
    const seen = [];
    sim.spy = (src, dst, text) => {
      const msg = JSON.parse(text);
      if (msg.type.endsWith("_response")) {
        seen.push([src, msg.to, msg.body.vote, msg.body.yes, msg.body.no]);
      }
    };
    sim.do("A", (c, now) => c.propose(now));
    sim.run(0.5);
    const answers = new Map(seen.filter((s) => s[2] !== "ABSTAIN")
      .map(([a, b, , y, n]) => [`${a}>${b}`, [y, n]]));
    for (const r of WORKED.responses) {
      assert.deepEqual(answers.get(`${r.from}>${r.to}`), [r.yes, r.no], JSON.stringify(r));
    }
    for (const r of WORKED.abstentions) {
      assert.ok(seen.some((s) => JSON.stringify(s) ===
        JSON.stringify([r.from, r.to, "ABSTAIN", 0, 0])), JSON.stringify(r));
    }
  });

  test("every delivery in Python's order, and every node's stats by Python's names", () => {
    const sim = example();
    const trace = [];
    sim.spy = (src, dst, text) => {
      const msg = JSON.parse(text);
      const vote = msg.body !== null && typeof msg.body === "object" && !Array.isArray(msg.body)
        ? msg.body.vote ?? null : null;
      trace.push([sim.now, src, dst, msg.type, vote]);
    };
    sim.do("A", (c, now) => c.propose(now));
    sim.run(0.5);
    assert.deepEqual(trace, WORKED.deliveries);
    for (const n of "ABCDEFG") assert.deepEqual(core(sim, n).stats, WORKED.stats[n], n);
  });
});

// ---- 2. the picture rules --------------------------------------------------------------------

/** A generated stroke list (tests/test_potato_picture.py's recipe()). */
function recipe(r) {
  const out = [];
  for (let i = 0; i < r.strokes; i++) {
    const p = [];
    for (let j = 0; j < r.points_each; j++) {
      if (r.wide_coordinates) p.push(1000 + (i + j) % 24, 700 + (i + j) % 68);
      else p.push((i * 7 + j) % 1024, (i * 3 + j) % 768);
    }
    out.push({ c: "#000000", w: r.width ?? 1, p });
  }
  return out;
}

describe("the picture rules (vectors: pictures, picture_recipes)", () => {
  test("the limits are the vectors'", () => {
    const lim = VECTORS.picture_limits;
    assert.deepEqual([WIDTH, HEIGHT, MAX_STROKES, MAX_POINTS, MAX_LINE_WIDTH],
      [lim.width, lim.height, lim.max_strokes, lim.max_points, lim.max_line_width]);
  });
  const cases = [...VECTORS.pictures.map((v) => [v.why, v.strokes, v.ok, v.reason]),
    ...VECTORS.picture_recipes.map((r) => [r.why, recipe(r), r.ok, r.reason])];
  for (const [why, value, ok, reason] of cases) {
    test(why, () => {
      if (ok) assert.equal(strokes(value), value);
      else assert.deepEqual(outcome(() => strokes(value)), [false, reason]);
    });
  }
  test("the largest picture fits a message with room for visited", () => {
    const big = VECTORS.picture_recipes.find((r) => r.wide_coordinates);
    const body = { frame: "f".repeat(40), parent: "e".repeat(40), strokes: recipe(big) };
    const visited = Array.from({ length: 190 }, (_, k) => `v${String(k).padStart(99, "0")}`);
    const text = encode({ type: "broadcast", identifier: "i".repeat(32), sender: "n".repeat(100),
      visited, to: null, body });
    assert.ok(JSON.stringify(recipe(big)).length <= 44802);
    assert.ok(bytes(text).length <= defaultLimits().maxMessage);
    assert.deepEqual(decode(text).body.strokes, body.strokes);
  });
  test("a float with an integral value is no coordinate, as in Python", () => {
    const msg = decode('{"type":"broadcast","identifier":"x","from":"Z","visited":[],' +
      '"body":[{"c":"#000000","w":1,"p":[1.0,2]}]}');
    assert.deepEqual(outcome(() => strokes(msg.body)), [false, "bad_picture"]);
    assert.deepEqual(outcome(() => strokes([{ c: "#000000", w: 1, p: [1, 2] }])),
      [true, undefined]);
  });
});

// ---- 3. decoding: the shared vectors -----------------------------------------------------------

describe("decode (vectors: decode)", () => {
  for (const v of VECTORS.decode) {
    test(v.why, () => {
      const data = dataOf(v);
      const inputs = typeof data === "string" ? [data, bytes(data)] : [data];
      if (v.bytes !== undefined) assert.equal(bytes(data).length, v.bytes);
      for (const input of inputs) {
        let msg;
        const got = outcome(() => {
          msg = decode(input, limitsOf(v));
        });
        assert.deepEqual(got, [v.ok, v.reason], typeof input);
        if (v.ok && v.encoded !== undefined) assert.equal(encode(msg), v.encoded);
      }
    });
  }

  test("a node counts each bad message by reason and relays none", () => {
    for (const v of VECTORS.decode.filter((x) => !x.ok && !x.limits)) {
      const n = listener();
      n.receive("P", dataOf(v), 0.0);
      assert.equal(n.stats[`dropped_${v.reason}`], 1, v.why);
      assert.deepEqual(n.messagesToSend(), [], v.why);
    }
  });

  test("a string with a raw lone surrogate is not JSON (no UTF-8 carries it)", () => {
    for (const text of ['{"type":"broadcast","identifier":"x","from":"\ud800","visited":[]}',
      '{"type":"broadcast","identifier":"x","from":"Z","visited":[],"body":"\udc00"}']) {
      assert.throws(() => decode(text), NotJson);
    }
  });

  test("bytes as an ArrayBuffer or a view into a larger buffer", () => {
    const text = '{"type":"broadcast","identifier":"x","from":"Z","visited":[]}';
    const b = bytes(`xx${text}yy`);
    assert.equal(decode(b.subarray(2, b.length - 2)).identifier, "x");
    assert.equal(decode(bytes(text).buffer).sender, "Z");
  });

  test("a message encodes with Python's key order and omits to and body when null", () => {
    const m = { type: "direct", identifier: "i", sender: "A", visited: ["B"], to: "C", body: "x" };
    assert.equal(encode(m), '{"type":"direct","identifier":"i","from":"A","to":"C",' +
      '"visited":["B"],"body":"x"}');
    assert.equal(encode({ ...m, to: null, body: null }),
      '{"type":"direct","identifier":"i","from":"A","visited":["B"]}');
    assert.deepEqual(decode(encode(m)), m);
  });

  test("request and response bodies, checked", () => {
    const lim = defaultLimits();
    assert.deepEqual(requestBody({ parent: "P", next: "N", originator: "O",
      direct_participants: ["B"] }, lim), { parent: "P", next: "N", originator: "O",
      directParticipants: ["B"], deadlineMs: null });
    const body = { parent: "P", next: "N" };
    assert.throws(() => responseBody({ ...body, vote: "YES", yes: 10n ** 309n, no: 0 }, lim),
      BadField);
    assert.throws(() => responseBody({ ...body, vote: "NO", yes: 5, no: 0 }, lim), BadField);
    assert.equal(responseBody({ ...body, vote: "YES", yes: 2, no: 1 }, lim).yes, 2);
    assert.deepEqual(responseBody({ ...body, vote: "NO" }, lim),
      { parent: "P", next: "N", vote: "NO", yes: 0, no: 1 });
  });

  test("limits at and one past (test_limits_at_and_one_past)", () => {
    const lim = { maxVisited: 3, maxMessage: 200 };
    const ok = { type: "broadcast", identifier: "x", sender: "Z", visited: ["a", "b", "c"],
      to: null, body: null };
    assert.deepEqual(decode(encode(ok), lim).visited, ["a", "b", "c"]);
    assert.throws(() => decode(encode({ ...ok, visited: ["a", "b", "c", "d"] }), lim), TooLarge);
    assert.throws(() => decode(encode({ ...ok, visited: [], body: "y".repeat(300) }), lim),
      TooLarge);
  });
});

describe("names and identifiers", () => {
  test("a name is 1..100 code points, well formed", () => {
    const e = "\u{1F600}";
    assert.ok(isName(e.repeat(100)) && !isName(e.repeat(101)));
    assert.ok(isName("n".repeat(100)) && !isName("n".repeat(101)) && !isName(""));
    assert.ok(!isName("\ud800") && !isName("a\udcff") && isName("\u00e9\u{1F600}"));
    assert.ok(!isName(5) && !isName(null) && !isName(["A"]));
  });

  test("names sort by code point, as Python's sorted()", () => {
    const names = ["\u{1F600}", "\uFF21", "b", "B", "\u00e9", "a", "\u{10000}", "\uE000", "ab"];
    const byCodePoint = [...names].sort((x, y) => {
      const a = Array.from(x, (c) => c.codePointAt(0));
      const b = Array.from(y, (c) => c.codePointAt(0));
      for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] - b[i];
      return a.length - b.length;
    });
    assert.deepEqual([...names].sort(compareNames), byCodePoint);
    assert.deepEqual(byCodePoint.slice(-4), ["\uE000", "\uFF21", "\u{10000}", "\u{1F600}"]);
  });

  test("a peer list is sent in code point order", () => {
    const a = new PotatoNode("A", 0.0);
    for (const p of ["\u{1F600}", "\uFF21", "b"]) a.peerUp(p, 0.0);
    a.broadcast("x", 0.0);
    assert.deepEqual(a.messagesToSend().map(([p]) => p), ["b", "\uFF21", "\u{1F600}"]);
  });

  for (const v of VECTORS.frame_ids) {
    test(`frame id (vectors: frame_ids): ${v.name.slice(0, 12)}, ${v.now_ms}`, () => {
      assert.equal(frameId(v.name, v.now_ms, v.random), v.id);
    });
  }

  test("frame id is SHA-1 of time-name-random; SHA-1 itself", () => {
    assert.match(frameId("A"), /^[0-9a-f]{40}$/);
    assert.notEqual(frameId("A", 1), frameId("A", 1));
    assert.equal(sha1Hex(bytes("abc")), "a9993e364706816aba3e25717850c26c9cd0d89d");
    assert.equal(sha1Hex(bytes("")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    assert.equal(sha1Hex(bytes("a".repeat(1000000))), "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
  });

  test("a message identifier is 32 hex digits, a UUID4's", () => {
    const ids = new Set(Array.from({ length: 100 }, newIdentifier));
    assert.equal(ids.size, 100);
    for (const id of ids) assert.match(id, /^[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}$/);
  });
});

// ---- 4. the core's rules ---------------------------------------------------------------------

/** Steps on a listener (vectors: internal_vote, taking_frames). */
function runSteps(scenario) {
  const n = listener(scenario.frame);
  for (const step of scenario.steps) {
    const what = `${scenario.why}: ${JSON.stringify(step)}`;
    const before = { ...n.stats };
    if (step.request) n.receive("P", request(...step.request, step.origin ?? "Z"), step.at);
    else if (step.frame_broadcast) {
      n.receive("P", frameBroadcast(step.frame_broadcast, step.origin ?? "Z"), step.at);
    } else if (step.timer) n.handleTimer(step.at);
    else if (step.propose) n.propose(step.at);
    const evs = events(n);
    if (step.vote !== undefined) {
      const [parent, next] = step.request;
      assert.deepEqual(evs.filter((e) => e.kind === "VoteCast" && e.parent === parent &&
        e.next === next).map((e) => e.vote), step.vote, what);
    }
    if (step.refused !== undefined) {
      const taken = evs.filter((e) => e.kind === "FrameChanged");
      if (step.refused === null) {
        assert.equal(taken.length, 1, what);
        assert.deepEqual([taken[0].frame, taken[0].by, taken[0].via],
          [step.frame_broadcast.frame, step.origin ?? "Z", "P"], what);
      } else {
        assert.equal(taken.length, 0, what);
        const key = `frame_refused_${step.refused}`;
        assert.equal((n.stats[key] ?? 0) - (before[key] ?? 0), 1, what);
      }
    }
    if (step.delivered) assert.equal(evs.filter((e) => e.kind === "Delivered").length, 1, what);
    if (step.frame !== undefined) assert.equal(n.frame, step.frame, what);
  }
  return n;
}

describe("internal votes (vectors: internal_vote)", () => {
  for (const s of VECTORS.internal_vote) test(s.why, () => runSteps(s));
});

describe("taking a frame (vectors: taking_frames)", () => {
  for (const s of VECTORS.taking_frames) test(s.why, () => runSteps(s));

  test("a refused frame broadcast is still relayed", () => {
    const n = listener();
    n.receive("P", frameBroadcast({ frame: "F1", parent: "F0" }), 0.0);
    assert.equal(n.frame, "F0");
    assert.equal(n.stats.frame_refused_no_election, 1);
    assert.deepEqual(n.messagesToSend().map(([p]) => p), ["Q"]);
  });

  test("seen elections and the frame history are bounded", () => {
    const n = new PotatoNode("A", 0.0, { maxSeenElections: 3, maxElections: 2, frameHistory: 2,
      requestBurst: 100 }, "F0");
    n.peerUp("P", 0.0);
    for (let k = 0; k < 5; k++) n.receive("P", request("F0", `n${k}`), 0.0);
    assert.deepEqual([...n._seen.keys()], [["F0", "n2"], ["F0", "n3"], ["F0", "n4"]]
      .map((k) => JSON.stringify(k)));
    n.receive("P", frameBroadcast({ frame: "n3", parent: "F0" }), 1.0);
    n.receive("P", request("n3", "n4"), 1.0);
    n.receive("P", frameBroadcast({ frame: "n4", parent: "n3" }), 2.0);
    assert.equal(n.frame, "n4");
    assert.deepEqual([...n._history.keys()], ["n3", "n4"]);
    assert.throws(() => new PotatoNode("A", 0.0, { maxSeenElections: 0 }), RangeError);
    assert.throws(() => new PotatoNode("A", 0.0, { maxSeenElections: 3, maxElections: 4 }),
      RangeError);
  });

  test("an election on itself is malformed, and a frame is not its own parent", () => {
    const req = '{"type": "indirect_election_request", "identifier": "1", "from": "Z", ' +
      '"visited": [], "body": {"parent": "f3", "next": "f3", "originator": "Z", ' +
      '"direct_participants": []}}';
    assert.throws(() => decode(req), { name: "BadField", message: /own parent/ });
    assert.equal(decode(req.replace('"next": "f3"', '"next": "f4"')).body.next, "f4");
    const n = listener();
    n.receive("P", request("f3", "f3", "P"), 0.0);
    assert.equal(n.stats.dropped_bad_field, 1);
    assert.deepEqual(n.messagesToSend(), []);
    n._seen.set(JSON.stringify(["f3", "f3"]), "P"); // even had it been heard
    n.receive("P", frameBroadcast({ frame: "f3", parent: "f3" }, "P"), 0.0);
    assert.equal(n.frame, "F0");
    assert.equal(n.stats.frame_refused_malformed, 1);
  });
});

describe("relay (test_potato_core.py)", () => {
  test("a broadcast reaches everybody once and loops die", () => {
    const sim = mesh(WORKED.edges);
    const ident = sim.do("A", (c, now) => c.broadcast({ hello: 1 }, now));
    sim.run(0.1);
    for (const n of "BCDEFG") {
      const got = sim.events(n, "Delivered").filter((e) => e.identifier === ident);
      assert.equal(got.length, 1);
      assert.deepEqual(got[0].body, { hello: 1 });
    }
    assert.ok([..."ABCDEFG"].reduce((s, n) => s + (core(sim, n).stats.duplicate ?? 0), 0) >= 1);
  });

  test("a direct message is relayed to a non-peer and delivered once", () => {
    const sim = mesh(WORKED.edges);
    sim.do("F", (c, now) => c.sendDirect("A", "kaixo", now));
    sim.run(0.1);
    assert.deepEqual(sim.events("A", "Delivered").map((e) => [e.type, e.sender, e.body]),
      [["direct", "F", "kaixo"]]);
    for (const n of "BCDEG") assert.equal(sim.events(n, "Delivered").length, 0);
  });

  test("a direct message to a peer goes to it alone", () => {
    const a = new PotatoNode("A", 0.0);
    for (const p of "BCD") a.peerUp(p, 0.0);
    a.sendDirect("B", "x", 0.0);
    assert.deepEqual(a.messagesToSend().map(([p]) => p), ["B"]);
  });

  test("a direct message with no peers is undeliverable", () => {
    const lone = new PotatoNode("L", 0.0);
    const id = lone.sendDirect("X", "x", 0.0);
    assert.deepEqual(lone.nextEvent(), { kind: "Undeliverable", to: "X", identifier: id });
    assert.throws(() => lone.sendDirect("", "x", 0.0), RangeError);
  });

  test("hops count links for direct and broadcast alike", () => {
    const sim = mesh([["A", "B"], ["B", "C"], ["C", "D"]]);
    sim.do("D", (c, now) => c.sendDirect("A", "x", now));
    sim.do("A", (c, now) => c.broadcast("y", now));
    sim.run(1.0);
    const [direct] = sim.events("A", "Delivered");
    const [bcast] = sim.events("D", "Delivered").filter((e) => e.type === "broadcast");
    assert.deepEqual([direct.hops, direct.via, bcast.hops, bcast.via], [3, "B", 3, "C"]);
  });

  test("a delivered message names the peer that handed it over", () => {
    const n = listener();
    n.receive("P", encode({ type: "broadcast", identifier: "id1", sender: "Forged",
      visited: ["Forged"], to: null, body: "hi" }), 0.0);
    const [ev] = events(n, "Delivered");
    assert.deepEqual([ev.sender, ev.via, ev.body], ["Forged", "P", "hi"]);
  });

  test("a message from no peer is dropped; our own message back is not taken", () => {
    const n = listener();
    n.receive("X", frameBroadcast({ a: 1 }), 0.0);
    assert.equal(n.stats.dropped_not_a_peer, 1);
    n.receive("P", encode({ type: "broadcast", identifier: "mine", sender: "A", visited: ["A"],
      to: null, body: 1 }), 0.0);
    assert.equal(n.stats.own_message_back, 1);
    n.receive("P", encode({ type: "broadcast", identifier: "mine", sender: "Z", visited: [],
      to: null, body: 1 }), 0.0);
    assert.equal(n.stats.duplicate, 1);
  });

  test("cache entries live five seconds each under constant traffic", () => {
    const n = new PotatoNode("A", 0.0, { maxCache: 1000 });
    n.peerUp("B", 0.0);
    for (let k = 0; k < 100; k++) {
      const t = k * 0.1;
      n.receive("B", encode({ type: "broadcast", identifier: `id${k}`, sender: "Z",
        visited: ["B"], to: null, body: null }), t);
      if (n.getTimer() !== null && n.getTimer() <= t) n.handleTimer(t);
    }
    assert.ok(n._cache.size <= 51);
  });

  test("the cache keeps at most maxCache identifiers, oldest forgotten first", () => {
    const n = new PotatoNode("A", 0.0, { maxCache: 3 });
    for (let k = 0; k < 5; k++) n.broadcast(k, 0.0);
    assert.equal(n._cache.size, 3);
    assert.equal(n.stats.cache_evicted, 2);
  });
});

describe("elections (test_potato_core.py)", () => {
  test("a silent direct participant counts as ABSTAIN after 300 ms", () => {
    const sim = mesh([["A", "B"], ["A", "C"]]);
    sim.crash("C");
    sim.do("A", (c, now) => c.propose(now));
    sim.run(0.29);
    assert.equal(sim.events("A", "ElectionResult").length, 0);
    sim.run(0.31);
    const [r] = sim.events("A", "ElectionResult");
    assert.deepEqual([r.yes, r.no, r.abstained], [2.5, 0, ["C"]]);
    assert.equal(core(sim, "A").stats.abstained_timeout, 1);
  });

  test("a disconnected peer counts as ABSTAIN at once", () => {
    const sim = mesh([["A", "B"], ["A", "C"]]);
    sim.crash("C");
    sim.do("A", (c, now) => c.propose(now));
    sim.run(0.01);
    sim.do("A", (c, now) => c.peerDown("C", now));
    const [r] = sim.events("A", "ElectionResult");
    assert.deepEqual(r.abstained, ["C"]);
    assert.ok(sim.now < 0.02);
  });

  test("one election at a time, and NO while ours is open", () => {
    const sim = mesh([["A", "B"]]);
    assert.notEqual(sim.do("A", (c, now) => c.propose(now)), null);
    assert.equal(sim.do("A", (c, now) => c.propose(now)), null);
    sim.do("B", (c, now) => c.propose(now));
    sim.run(0.5);
    assert.deepEqual(sim.events("A", "VoteCast").map((e) => [e.originator, e.vote]),
      [["B", "NO"]]);
  });

  test("a winning frame ends the other elections", () => {
    const sim = mesh([["A", "B"], ["B", "C"]], { delays: [["B", "C", 0.2], ["C", "B", 0.2]] });
    sim.do("A", (c, now) => c.propose(now));
    sim.run(1.0);
    assert.equal(core(sim, "C").frame, core(sim, "A").frame);
    assert.deepEqual([...core(sim, "B")._votes.values()].filter((v) => !v.done), []);
  });

  test("a direct participant answers before the originator stops waiting", () => {
    const sim = mesh([["A", "B"], ["B", "C"]], { delays: [["B", "C", 0.4], ["C", "B", 0.4]] });
    sim.do("A", (c, now) => c.propose(now));
    sim.run(1.0);
    const [r] = sim.events("A", "ElectionResult");
    assert.deepEqual([r.yes, r.abstained], [2.5, []]);
  });

  test("a forged request does not bind the parent for ever", () => {
    const sim = mesh([["A", "B"], ["B", "C"]]);
    sim.do("B", (c, now) => c.receive("A", request("F0", "junk", "A"), now));
    sim.run(1.0);
    sim.do("A", (c, now) => c.propose(now));
    sim.run(2.0);
    const [r] = sim.events("A", "ElectionResult");
    assert.ok(r.won);
    assert.equal(r.no, 0);
  });

  test("indirect requests carry what is left of the budget, less the hop margin", () => {
    const n = listener();
    n.peerUp("R", 0.0);
    const direct = encode({ type: "direct_election_request", identifier: "d", sender: "P",
      visited: [], to: null, body: { parent: "F0", next: "F1", originator: "P",
        direct_participants: ["A", "Q"] } });
    n.receive("P", direct, 0.0);
    const [[to, text]] = n.messagesToSend();
    assert.equal(to, "R");
    assert.equal(JSON.parse(text).body.deadline_ms, 280); // 300 - 10 (ours) - 10 (its)
    assert.ok(Math.abs(n.getTimer() - 0.29) < 1e-12);
    const withDeadline = (next, ms) => request("F0", next).replace('"direct_participants":[]',
      `"direct_participants":[],"deadline_ms":${ms}`);
    n.receive("P", withDeadline("F2", 20), 0.0); // 10 ms left to ask: asked, with 10
    assert.deepEqual(n.messagesToSend().map(([p, t]) => [p, JSON.parse(t).body.deadline_ms]),
      [["Q", 10], ["R", 10]]);
    n.receive("P", withDeadline("F3", "19000000000000000000000"), 0.0); // any integer: exact
    assert.deepEqual(n.messagesToSend().map(([, t]) => t.match(/"deadline_ms":(\d+)/)[1]),
      ["18999999999999999999990", "18999999999999999999990"]);
    n.receive("P", withDeadline("F4", 19), 0.0); // 9 ms: below minBudgetMs, answered at once
    assert.deepEqual(n.messagesToSend().map(([p, t]) => [p, JSON.parse(t).body.vote]),
      [["P", "NO"]]);
  });

  test("an election request flood from one peer spreads a bounded number", () => {
    const n = new PotatoNode("A", 0.0, { maxElections: 64 });
    for (const p of ["Z", "B", "C", "D"]) n.peerUp(p, 0.0);
    for (let k = 0; k < 1000; k++) n.receive("Z", request("F0", `n${k}`), 0.0);
    const spread = n.messagesToSend().filter(([, d]) => d.includes("indirect_election_request"))
      .length;
    assert.equal(spread, 3 * n.config.requestBurst);
    assert.equal(n.stats.abstained_limit, 1000 - n.config.requestBurst);
    assert.ok([...n._votes.values()].slice(0, 1).every((v) => !v.done));
  });

  test("the request bucket refills at requestRate per second", () => {
    const n = new PotatoNode("A", 0.0, { requestBurst: 2, requestRate: 8.0 });
    n.peerUp("Z", 0.0);
    for (let k = 0; k < 3; k++) n.receive("Z", request("F0", `a${k}`), 0.0);
    assert.equal(n.stats.abstained_limit, 1);
    n.receive("Z", request("F0", "b0"), 0.124); // 0.992 tokens
    assert.equal(n.stats.abstained_limit, 2);
    n.receive("Z", request("F0", "b1"), 0.25); // 0.992 + 1.008
    assert.equal(n.stats.abstained_limit, 2);
    n.peerDown("Z", 0.25); // the bucket goes with the peer
    n.peerUp("Z", 0.25);
    n.receive("Z", request("F0", "b2"), 0.25);
    n.receive("Z", request("F0", "b3"), 0.25);
    assert.equal(n.stats.abstained_limit, 2);
  });

  test("open elections are never forgotten", () => {
    const n = new PotatoNode("A", 0.0, { maxElections: 4, requestBurst: 100 });
    for (const p of ["Z", "B"]) n.peerUp(p, 0.0);
    for (let k = 0; k < 10; k++) n.receive("Z", request("F0", `n${k}`), 0.0);
    assert.equal(n._votes.size, 3);
    assert.equal(n.stats.abstained_limit, 7);
  });

  test("strangers filling the election table cannot stop our proposal", () => {
    const n = new PotatoNode("A", 0.0, { maxElections: 4, requestBurst: 100 });
    for (const p of ["Z", "B"]) n.peerUp(p, 0.0);
    for (let k = 0; k < 3; k++) n.receive("Z", request("F0", `n${k}`), 0.0);
    assert.deepEqual([n._votes.size, n.stats.abstained_limit], [3, undefined]);
    n.receive("Z", request("F0", "n3"), 0.0);
    assert.deepEqual([n._votes.size, n.stats.abstained_limit], [3, 1]);
    assert.notEqual(n.propose(0.0), null);
    assert.equal(n._votes.size, 4);
    n.receive("Z", request("F0", "n4"), 0.0);
    assert.deepEqual([n._votes.size, n.stats.abstained_limit], [4, 2]);
    assert.throws(() => new PotatoNode("A", 0.0, { maxElections: 1 }), RangeError);
  });

  test("a late copy of a forgotten election gets no second vote", () => {
    const n = new PotatoNode("A", 0.0, { maxElections: 2, maxSeenElections: 3,
      requestBurst: 100 }, INITIAL);
    n.peerUp("P", 0.0);
    n.peerUp("Q", 0.0);
    n.receive("P", request("F0", "n0"), 0.0);
    n.handleTimer(10.0);
    assert.deepEqual(events(n, "VoteCast").map((v) => [v.parent, v.next]), [["F0", "n0"]]);
    n.receive("P", request("F0", "n1"), 10.0);
    const n0 = JSON.stringify(["F0", "n0"]);
    assert.ok(!n._votes.has(n0) && n._seen.has(n0));
    n.messagesToSend();
    n.receive("Q", request("F0", "n0"), 10.0);
    assert.deepEqual(events(n, "VoteCast").filter((e) => e.next === "n0"), []);
    const answers = n.messagesToSend().filter(([p]) => p === "Q").map(([, d]) => decode(d));
    assert.equal(answers.length, 1);
    assert.equal(answers[0].body.vote, "ABSTAIN");
    assert.equal(n.stats.abstained_forgotten, 1);
    for (let k = 2; k < 5; k++) {
      n.handleTimer(10.0 * k);
      n.receive("P", request("F0", `n${k}`), 10.0 * k);
    }
    assert.ok(!n._seen.has(n0));
    n.handleTimer(60.0);
    n.receive("Q", request("F0", "n0"), 60.0);
    assert.equal(events(n, "VoteCast").filter((e) => e.next === "n0").length, 1);
  });

  test("a repeated request from a peer we asked stands for its answer", () => {
    const n = listener();
    n.receive("P", request("F0", "F1"), 0.0); // asks Q
    assert.deepEqual(n.messagesToSend().map(([p]) => p), ["Q"]);
    n.receive("Q", request("F0", "F1"), 0.001); // Q asks us the same: ABSTAIN to it ...
    const out = n.messagesToSend().map(([p, d]) => [p, JSON.parse(d).body]);
    // ... and nobody is left to wait for: our answer to P, our own YES alone.
    assert.deepEqual(out, [["Q", { parent: "F0", next: "F1", vote: "ABSTAIN", yes: 0, no: 0 }],
      ["P", { parent: "F0", next: "F1", vote: "YES", yes: 1, no: 0 }]]);
    assert.equal(n.stats.abstained_repeat, 1);
  });

  test("an unexpected response is dropped and counted", () => {
    const n = listener();
    n.receive("P", encode({ type: "indirect_election_response", identifier: "r", sender: "P",
      visited: [], to: "A", body: { parent: "F0", next: "F1", vote: "YES" } }), 0.0);
    assert.equal(n.stats.dropped_unexpected_response, 1);
  });

  test("no answer goes to a requester that went away", () => {
    const a = new PotatoNode("A", 0.0);
    for (const p of ["B", "C"]) a.peerUp(p, 0.0);
    const req = { parent: "INITIAL", next: "f1", originator: "B", direct_participants: ["A"] };
    a.receive("B", JSON.stringify({ type: "direct_election_request", identifier: "1", from: "B",
      visited: [], body: req }), 0.0);
    assert.deepEqual(a.messagesToSend().map(([p]) => p), ["C"]);
    a.peerDown("B", 0.01);
    a.peerDown("C", 0.02);
    assert.deepEqual(a.messagesToSend(), []);
    assert.equal(a.stats.answer_requester_gone, 1);
  });

  test("the deadline ABSTAINs the rest and answers with what came", () => {
    const n = listener();
    n.peerUp("R", 0.0);
    n.receive("P", request("F0", "F1"), 0.0); // asks Q and R, 250 ms
    n.messagesToSend();
    n.receive("Q", encode({ type: "indirect_election_response", identifier: "r", sender: "Q",
      visited: [], to: "A", body: { parent: "F0", next: "F1", vote: "NO", yes: 0, no: 2 } }),
    0.1);
    assert.deepEqual(n.messagesToSend(), []);
    assert.ok(Math.abs(n.getTimer() - 0.25) < 1e-12);
    n.handleTimer(0.25);
    const [[to, text]] = n.messagesToSend();
    assert.equal(to, "P");
    assert.deepEqual(JSON.parse(text).body, { parent: "F0", next: "F1", vote: "NO", yes: 1,
      no: 2 });
    assert.equal(n.stats.abstained_timeout, 1);
    assert.equal(n.getTimer(), null); // (requests and responses are not cached: relays are)
  });

  test("config defaults and checks", () => {
    const n = new PotatoNode("A", 0.0);
    assert.deepEqual(n.config, defaultConfig());
    assert.equal(n.frame, INITIAL);
    assert.throws(() => new PotatoNode("", 0.0), RangeError);
    assert.throws(() => new PotatoNode("A", 0.0, { directTimeout: 0 }), RangeError);
    assert.throws(() => new PotatoNode("A", 0.0, { limits: { maxDepth: 0 } }), RangeError);
    assert.equal(new PotatoNode("A", 0.0, { limits: { maxVisited: 3 } }).config.limits
      .maxMessage, 65536);
  });
});

describe("pictures ride on the frame broadcast (test_potato_picture.py)", () => {
  function pair() {
    const a = new PotatoNode("A", 0.0);
    const b = new PotatoNode("B", 0.0);
    a.peerUp("B", 0.0);
    b.peerUp("A", 0.0);
    return [a, b];
  }

  /** Carry messages both ways until both are quiet; what went. */
  function run(a, b, now = 0.0) {
    const nodes = { A: a, B: b };
    const sent = [];
    for (let moved = true; moved;) {
      moved = false;
      for (const [name, n] of Object.entries(nodes)) {
        for (const [peer, text] of n.messagesToSend()) {
          sent.push(JSON.parse(text));
          nodes[peer].receive(name, text, now);
          moved = true;
        }
      }
    }
    return sent;
  }

  test("the winner broadcasts its picture and the others take it", () => {
    const [a, b] = pair();
    a.picture = [{ c: "#ff0000", w: 3, p: [1, 2, 3, 4] }];
    const next = a.propose(0.0);
    run(a, b);
    const [mine] = events(a, "FrameChanged");
    const [theirs] = events(b, "FrameChanged");
    assert.deepEqual([mine.frame, mine.picture], [next, a.picture]);
    assert.deepEqual([theirs.frame, theirs.by, theirs.via, theirs.picture],
      [next, "A", "A", a.picture]);
    assert.deepEqual(b.picture, a.picture);
  });

  test("a frame without a picture is the seed's frame broadcast", () => {
    const [a, b] = pair();
    a.propose(0.0);
    const sent = run(a, b);
    const fb = sent.filter((m) => m.type === "broadcast");
    assert.equal(fb.length, 1);
    assert.deepEqual(Object.keys(fb[0].body).sort(), ["frame", "parent"]);
    const [ev] = events(b, "FrameChanged");
    assert.equal(ev.picture, null);
    assert.equal(b.picture, null);
  });

  test("a bad picture still moves the frame but is never drawn", () => {
    const [a, b] = pair();
    a.picture = [{ c: "javascript:alert(1)", w: 3, p: [1, 2] }];
    const next = a.propose(0.0);
    b.picture = [{ c: "#000000", w: 1, p: [0, 0] }];
    run(a, b);
    const [ev] = events(b, "FrameChanged");
    assert.deepEqual([b.frame, ev.picture], [next, null]);
    assert.deepEqual(b.picture, [{ c: "#000000", w: 1, p: [0, 0] }]);
    assert.equal(b.stats.picture_refused_bad_picture, 1);
  });

  test("a picture past the limits is refused as too large", () => {
    const [a, b] = pair();
    a.picture = Array.from({ length: MAX_STROKES + 1 }, () => ({ c: "#000000", w: 1, p: [0, 0] }));
    a.propose(0.0);
    run(a, b);
    assert.equal(b.stats.picture_refused_too_large, 1);
    assert.equal(b.frame, a.frame);
  });
});
