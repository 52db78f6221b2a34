// The potato page: a canvas that is a potato client (core.js) over the browser's own WebRTC
// data channels, to the node that served it and, signaled through it, to that node's other
// pages (docs/protocols/potato.md, "Browsers"). Everything a peer says is shown as text.
import * as potato from "./core.js";

const PING = '{"ping": 1}'; // the transports' liveness frame (pelotari/potato/transport.py)
const CHANNEL = "potato";
const PING_INTERVAL = 0.5; // s without sending before a ping
const DEAD_AFTER = 3.0; // s without a byte: the peer is gone (a hidden tab ticks once a second)
const OPEN_TIMEOUT = 8.0; // s for a link to open
const MAX_BUFFER = 1 << 20; // unsent bytes per peer before a send is dropped
const RECV_RATE = 2000, RECV_BYTE_RATE = 4 << 20, RECV_BURST = 0.5; // as the transports
const REPLIES = ['{"type":"direct_election_response"', '{"type":"indirect_election_response"'];
const MAX_ANSWERING = 8; // offers from other pages answered at once (one per page)
const STALE_ANSWER = 2.0; // s after which an answered offer gives its place to a new one
const BUSY_RETRIES = 4; // offers again to a page that said busy: after 1, 2, 4, 8 s
const MIN_STEP = 2; // grid units between two points of a stroke
const LOG_LINES = 60;

const $ = (id) => document.getElementById(id);
const now = () => performance.now() / 1000;
const short = (id) => String(id).slice(0, 12);
const randomHex = (n) => Array.from(crypto.getRandomValues(new Uint8Array(n)),
  (b) => b.toString(16).padStart(2, "0")).join("");

const params = new URLSearchParams(location.search);
const asked = params.get("name");
const name = asked && potato.isName(asked) ? asked : `page-${randomHex(2)}`;
const core = new potato.PotatoNode(name, now());
const links = new Map(); // peer name -> link (see makeLink)
const offering = new Map(); // page name -> link we offered to, waiting for its answer
const answering = new Map(); // page name -> link we answered, until it opens (oldest first)
const busyTries = new Map(); // page name -> times it said busy to our offer
const heard = new Map(); // name -> fewest hops a message of theirs took to reach us
const stats = {}; // the page transport's counters (core.stats are the core's)
let base = []; // the picture of the frame we are on (or [] after Clear)
let draft = []; // strokes drawn since, in no frame yet
let stroke = null; // the stroke being drawn
let nodeName = null;
let ws = null;
let retry = 1;
let timer = null;
let autoRetry = null;
let firstPeerMs = null; // ms from the page's start to its first peer (performance.now())
let proposedAt = null;
const results = []; // our elections: {next, ms (propose to result), won}, the last 1,000
const count = (key, n = 1) => { stats[key] = (stats[key] || 0) + n; };
const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

// ---- the picture ---------------------------------------------------------------------------

const canvas = $("canvas");
const ctx = canvas.getContext("2d");

function drawStroke(s) {
  ctx.strokeStyle = ctx.fillStyle = s.c;
  ctx.lineWidth = s.w;
  ctx.lineCap = ctx.lineJoin = "round";
  if (s.p.length === 2) {
    ctx.beginPath();
    ctx.arc(s.p[0], s.p[1], s.w / 2, 0, 2 * Math.PI);
    ctx.fill();
    return;
  }
  ctx.beginPath();
  ctx.moveTo(s.p[0], s.p[1]);
  for (let i = 2; i < s.p.length; i += 2) ctx.lineTo(s.p[i], s.p[i + 1]);
  ctx.stroke();
}

function picture() { return base.concat(draft); }

function render() {
  $("draft").textContent = draft.length ? `· ${plural(draft.length, "stroke")} of yours in no ` +
    "frame yet" : "";
  ctx.fillStyle = "#ffffff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  for (const s of picture()) drawStroke(s);
  if (stroke) drawStroke(stroke);
}

function points(strokes) { return strokes.reduce((n, s) => n + s.p.length / 2, 0); }

function room(extraStrokes, extraPoints) {
  const all = picture();
  return all.length + extraStrokes <= potato.MAX_STROKES &&
    points(all) + (stroke ? stroke.p.length / 2 : 0) + extraPoints <= potato.MAX_POINTS;
}

function gridPoint(ev) {
  const r = canvas.getBoundingClientRect();
  const x = Math.round((ev.clientX - r.left) * canvas.width / r.width);
  const y = Math.round((ev.clientY - r.top) * canvas.height / r.height);
  return [Math.min(potato.WIDTH - 1, Math.max(0, x)), Math.min(potato.HEIGHT - 1, Math.max(0, y))];
}

canvas.addEventListener("pointerdown", (ev) => {
  if (!room(1, 1)) {
    $("canvas-note").textContent = "the canvas is full: Clear it, or propose it as it is";
    return;
  }
  canvas.setPointerCapture(ev.pointerId);
  const colour = $("colour").value.toLowerCase();
  stroke = { c: /^#[0-9a-f]{6}$/.test(colour) ? colour : "#000000",
    w: Math.min(potato.MAX_LINE_WIDTH, Math.max(1, Number($("width").value) | 0)),
    p: gridPoint(ev) };
  render();
});

canvas.addEventListener("pointermove", (ev) => {
  if (!stroke) return;
  const [x, y] = gridPoint(ev);
  const n = stroke.p.length;
  if (Math.hypot(x - stroke.p[n - 2], y - stroke.p[n - 1]) < MIN_STEP) return;
  if (!room(0, 1)) {
    $("canvas-note").textContent = "the canvas is full: Clear it, or propose it as it is";
    return;
  }
  stroke.p.push(x, y);
  render();
});

function endStroke() {
  if (!stroke) return;
  draft.push(stroke);
  stroke = null;
  core.picture = picture();
  render();
  if ($("auto").checked) share();
}
canvas.addEventListener("pointerup", endStroke);
canvas.addEventListener("pointercancel", endStroke);

$("clear").addEventListener("click", () => {
  base = [];
  draft = [];
  core.picture = [];
  $("canvas-note").textContent = "";
  render();
});

$("width").addEventListener("input", () => { $("width-shown").textContent = $("width").value; });

// ---- elections -----------------------------------------------------------------------------

function share() {
  clearTimeout(autoRetry);
  core.picture = picture();
  const t = performance.now();
  const next = core.propose(now());
  if (next === null) logLine("an election of yours is still open", "");
  else proposedAt = t;
  process();
}
$("propose").addEventListener("click", share);

function logLine(text, cls) {
  const li = document.createElement("li");
  const at = document.createElement("time");
  at.textContent = new Date().toLocaleTimeString();
  li.append(at, " ", text);
  if (cls) li.className = cls;
  const list = $("elections");
  list.prepend(li);
  while (list.children.length > LOG_LINES) list.lastChild.remove();
}

function hear(who, hops) {
  if (!who || who === name) return;
  if (!heard.has(who) || heard.get(who) > hops) heard.set(who, hops);
}

function onEvent(ev) {
  switch (ev.kind) {
    case "PeerUp": case "PeerDown":
      if (ev.kind === "PeerUp" && firstPeerMs === null) firstPeerMs = performance.now();
      showPeers();
      break;
    case "Delivered":
      hear(ev.sender, ev.hops);
      break;
    case "ElectionStarted":
      logLine(`you proposed ${short(ev.next)} on ${short(ev.parent)}: asking ` +
        (ev.participants.join(", ") || "nobody"), "");
      break;
    case "VoteCast":
      hear(ev.originator, Infinity);
      logLine(`${ev.originator} proposed ${short(ev.next)}: you voted ${ev.vote}`, "");
      break;
    case "ElectionResult":
      results.push({ next: ev.next, ms: performance.now() - proposedAt, won: ev.won });
      if (results.length > 1000) results.shift();
      logLine(`your election ${ev.won ? "won" : "lost"}: YES ${ev.yes}, NO ${ev.no}` +
        (ev.abstained.length ? ` (abstained: ${ev.abstained.join(", ")})` : ""),
      ev.won ? "won" : "lost");
      if (!ev.won && $("auto").checked && draft.length) {
        autoRetry = setTimeout(share, 100 + Math.random() * 300); // someone else went first
      }
      break;
    case "FrameChanged":
      if (ev.by === name) {
        base = ev.picture || base;
        draft = [];
      } else if (ev.picture) {
        base = ev.picture;
      }
      core.picture = picture();
      $("frame").textContent = short(ev.frame);
      $("frame").title = ev.frame;
      $("frame-by").textContent = `by ${ev.by}` + (ev.picture ? `, ${plural(ev.picture.length,
        "stroke")}` : ", without a picture");
      logLine(`frame ${short(ev.frame)} by ${ev.by}` + (ev.picture ? "" : " (no picture)"), "");
      render();
      break;
    default:
      break;
  }
}

// ---- the core's clock and output -----------------------------------------------------------

function process() {
  for (const [peer, text] of core.messagesToSend()) send(peer, text);
  for (let ev = core.nextEvent(); ev !== null; ev = core.nextEvent()) {
    try { onEvent(ev); } catch (err) { console.error(err); count("callback_errors"); }
  }
  clearTimeout(timer);
  const due = core.getTimer();
  if (due !== null) {
    timer = setTimeout(() => { core.handleTimer(now()); process(); },
      Math.max(0, (due - now()) * 1000));
  }
  showCounters();
}

// ---- links: one RTCPeerConnection and one "potato" data channel per peer -------------------

function makeLink(peer, pc, kind) {
  const link = { peer, pc, kind, channel: null, open: false, gone: false, made: now(),
    lastRx: now(),
    lastTx: now(), rxBytes: 0, spent: 0, tokens: RECV_RATE * RECV_BURST,
    tokenBytes: RECV_BYTE_RATE * RECV_BURST, tokensAt: now() };
  link.timer = setTimeout(() => { if (!link.open) drop(link, "open_timeout"); }, OPEN_TIMEOUT * 1000);
  pc.onconnectionstatechange = () => {
    if (pc.connectionState === "failed" || pc.connectionState === "closed") drop(link, "ice");
  };
  return link;
}

function attach(link, channel) {
  link.channel = channel;
  channel.onopen = () => {
    const old = links.get(link.peer);
    if (link.gone || (old && old !== link)) { // that name has a link already
      count("refused_duplicate");
      drop(link, "");
      return;
    }
    clearTimeout(link.timer);
    if (answering.get(link.peer) === link) answering.delete(link.peer);
    busyTries.delete(link.peer);
    link.open = true;
    link.lastRx = link.lastTx = now();
    links.set(link.peer, link);
    core.peerUp(link.peer, now());
    process();
  };
  channel.onclose = () => drop(link, "lost");
  channel.onmessage = (ev) => receive(link, ev.data);
}

function receive(link, data) {
  if (link.gone) return;
  link.lastRx = now();
  const size = typeof data === "string" ? new TextEncoder().encode(data).length : data.byteLength;
  link.rxBytes += size;
  if (data === PING) return;
  if (size > core.config.limits.maxMessage) { count("recv_dropped_oversize"); return; }
  const t = now();
  link.tokens = Math.min(RECV_RATE * RECV_BURST, link.tokens + (t - link.tokensAt) * RECV_RATE);
  link.tokenBytes = Math.min(RECV_BYTE_RATE * RECV_BURST,
    link.tokenBytes + (t - link.tokensAt) * RECV_BYTE_RATE);
  link.tokensAt = t;
  if (link.tokens < 1 || link.tokenBytes < size) { count("recv_dropped_rate"); return; }
  link.tokens -= 1;
  link.tokenBytes -= size;
  if (links.get(link.peer) !== link || !link.open) return;
  core.receive(link.peer, data, t);
  process();
}

function send(peer, text) {
  const link = links.get(peer);
  if (!link || !link.open || link.channel.readyState !== "open") {
    count("send_dropped_unknown_peer");
    return;
  }
  if (link.channel.bufferedAmount > MAX_BUFFER) { count("send_dropped_buffer_full"); return; }
  const size = new TextEncoder().encode(text).length;
  const reply = REPLIES.some((r) => text.startsWith(r));
  // An election response answers that peer: never more bytes than it sent us (as the nodes).
  if (reply && link.spent + size + 1 > link.rxBytes) { count("send_dropped_credit"); return; }
  try {
    link.channel.send(text);
  } catch (err) {
    count("send_dropped_closing");
    return;
  }
  if (reply) link.spent += size + 1;
  link.lastTx = now();
  count("messages_sent");
}

function drop(link, why) {
  if (link.gone) return;
  link.gone = true;
  clearTimeout(link.timer);
  if (why) count(`closed_${why}`);
  if (answering.get(link.peer) === link) answering.delete(link.peer);
  if (links.get(link.peer) === link) {
    links.delete(link.peer);
    if (link.open) {
      core.peerDown(link.peer, now());
      process();
    }
  }
  link.open = false;
  try { link.pc.close(); } catch (err) { /* closing already */ }
  if (link.kind === "node") reconnectLater();
}

setInterval(() => { // liveness: ping the idle, drop the silent
  const t = now();
  for (const link of [...links.values()]) {
    if (!link.open) continue;
    if (t - link.lastRx > DEAD_AFTER) drop(link, "dead");
    else if (t - link.lastTx >= PING_INTERVAL && link.channel.readyState === "open") {
      try { link.channel.send(PING); link.lastTx = t; } catch (err) { /* closing */ }
    }
  }
}, 250);

function gathered(pc) { // non-trickle: the SDP carries every candidate
  return new Promise((resolve) => {
    if (pc.iceGatheringState === "complete") { resolve(); return; }
    const done = () => { if (pc.iceGatheringState === "complete") resolve(); };
    pc.addEventListener("icegatheringstatechange", done);
    setTimeout(resolve, 3000); // what was gathered by then
  });
}

async function describe(pc, offer) {
  await pc.setLocalDescription(offer ? await pc.createOffer() : await pc.createAnswer());
  await gathered(pc);
  return pc.localDescription.sdp;
}

function newPc() { return new RTCPeerConnection({ iceServers: [] }); }

// ---- signaling over the node's WebSocket ---------------------------------------------------

let reconnecting = null;
let refusal = ""; // why the node refused our last hello (shown until it takes one)

function setStatus(text, cls) {
  $("status").textContent = text;
  $("status").className = `status ${cls}`;
}

function reconnectLater() {
  if (reconnecting) return;
  setStatus(`${refusal || `no link to ${nodeName || "the node"}`}: trying again in ${retry} s`,
    "down");
  reconnecting = setTimeout(() => { reconnecting = null; connect(); }, retry * 1000);
  retry = Math.min(retry * 2, 10);
}

async function connect() {
  if (ws) ws.close();
  let pc;
  try {
    pc = newPc();
  } catch (err) { // (the browser has too many peer connections)
    count("connect_failed");
    reconnectLater();
    return;
  }
  const link = makeLink(null, pc, "node");
  attach(link, pc.createDataChannel(CHANNEL, { ordered: true }));
  const offer = await describe(pc, true);
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${location.host}/signal`);
  ws = socket;
  let helloSeen = false;
  socket.onopen = () => socket.send(JSON.stringify({ hello: name, offer }));
  socket.onclose = () => {
    if (ws === socket && !helloSeen) drop(link, "signaling");
  };
  socket.onmessage = async (ev) => {
    let msg;
    try { msg = JSON.parse(ev.data); } catch (err) { count("signal_dropped_malformed"); return; }
    if (!msg || typeof msg !== "object") { count("signal_dropped_malformed"); return; }
    if (!helloSeen) {
      helloSeen = true;
      if (typeof msg.refused === "string" || typeof msg.answer !== "string" ||
          !potato.isName(msg.hello)) {
        const why = String(msg.refused || "no answer").slice(0, 100);
        refusal = `refused by the node: ${why}` +
          (why === "duplicate" ? ` (the name ${name} is in use there)` : "");
        setStatus(refusal, "down");
        drop(link, "refused");
        return;
      }
      nodeName = msg.hello;
      link.peer = nodeName;
      retry = 1;
      refusal = "";
      try {
        await pc.setRemoteDescription({ type: "answer", sdp: msg.answer });
      } catch (err) {
        drop(link, "bad_answer");
        return;
      }
      setStatus(`linked to ${nodeName}`, "up");
      for (const page of Array.isArray(msg.pages) ? msg.pages : []) {
        if (potato.isName(page) && page !== name) offerTo(page);
      }
      return;
    }
    onSignal(msg);
  };
}

async function offerTo(page) {
  if (links.has(page) || offering.has(page)) return;
  let pc;
  try { pc = newPc(); } catch (err) { count("offer_failed"); return; } // too many already
  const link = makeLink(page, pc, "page");
  offering.set(page, link);
  attach(link, pc.createDataChannel(CHANNEL, { ordered: true }));
  const sdp = await describe(pc, true);
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ to: page, offer: sdp }));
  setTimeout(() => { if (offering.get(page) === link) offering.delete(page); }, OPEN_TIMEOUT * 1000);
}

async function onSignal(msg) {
  const from = msg.from;
  if (!potato.isName(from) || from === name) { count("signal_dropped_malformed"); return; }
  if (typeof msg.offer === "string") {
    if (links.has(from)) { reply(from, { refused: "duplicate" }); return; }
    // Strangers' pages can relay offers through the node: at most MAX_ANSWERING are answered
    // at once, one per page (a new offer replaces its page's last), else each made a peer
    // connection until the browser refused to make more, and real pages could not link.
    if (answering.has(from)) drop(answering.get(from), "replaced");
    const oldest = answering.values().next().value;
    if (answering.size >= MAX_ANSWERING && now() - oldest.made >= STALE_ANSWER) {
      drop(oldest, "stale"); // (a real page's link opens well within that)
    }
    let pc = null;
    try {
      if (answering.size < MAX_ANSWERING) pc = newPc();
    } catch (err) { /* the browser has too many */ }
    if (pc === null) {
      count("refused_busy");
      reply(from, { refused: "busy" });
      return;
    }
    const link = makeLink(from, pc, "page");
    answering.set(from, link);
    pc.ondatachannel = (ev) => {
      if (ev.channel.label !== CHANNEL || link.channel) { ev.channel.close(); return; }
      attach(link, ev.channel);
    };
    try {
      await pc.setRemoteDescription({ type: "offer", sdp: msg.offer });
      reply(from, { answer: await describe(pc, false) });
    } catch (err) {
      drop(link, "bad_offer");
      reply(from, { refused: "bad_offer" });
    }
  } else if (typeof msg.answer === "string") {
    const link = offering.get(from);
    if (!link) { count("signal_dropped_unasked"); return; } // an answer we never asked for
    offering.delete(from);
    try {
      await link.pc.setRemoteDescription({ type: "answer", sdp: msg.answer });
    } catch (err) {
      drop(link, "bad_answer");
    }
  } else if (typeof msg.refused === "string") {
    const link = offering.get(from);
    if (link) { offering.delete(from); drop(link, "refused"); }
    const tries = busyTries.get(from) || 0;
    if (link && msg.refused === "busy" && tries < BUSY_RETRIES) { // answering others: later
      busyTries.set(from, tries + 1);
      setTimeout(() => offerTo(from), 1000 * 2 ** tries);
    }
  } else {
    count("signal_dropped_malformed");
  }
}

function reply(to, obj) {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ to, ...obj }));
}

// ---- what the page shows -------------------------------------------------------------------

function item(text, kind) {
  const li = document.createElement("li");
  li.textContent = text;
  if (kind) {
    const k = document.createElement("span");
    k.className = "kind";
    k.textContent = kind;
    li.append(k);
  }
  return li;
}

function showPeers() {
  const peers = [...core.peers].sort();
  $("peers").replaceChildren(...(peers.length ? peers.map((p) =>
    item(p, links.get(p)?.kind === "node" ? "the node that served this page" : "page"))
    : [item("none yet", "")]));
  showHeard();
}

function showHeard() {
  const names = [...heard.keys()].filter((n) => !core.peers.has(n)).sort();
  $("heard").replaceChildren(...(names.length ? names.map((n) =>
    item(n, Number.isFinite(heard.get(n)) ? `${heard.get(n)} hops` : "proposed"))
    : [item("nobody yet", "")]));
}

let countersShown = 0;
function showCounters() {
  const t = now();
  if (t - countersShown < 0.5) return;
  countersShown = t;
  const all = { ...core.stats, ...stats };
  $("counters").textContent = Object.keys(all).sort().map((k) => `${k} ${all[k]}`).join("\n");
  showHeard();
}

// What tests (and the curious, from the console) read.
window.potato = {
  name, core, links,
  state: () => ({ name, node: nodeName, frame: core.frame, peers: [...core.peers].sort(),
    strokes: picture().length, base: base.length, draft: draft.length, stats: { ...stats },
    pending: answering.size,
    firstPeerMs, results: results.slice() }),
  propose: share,
};

$("me").textContent = name;
if (asked !== null && name !== asked) { // (it was shown nowhere: the person wondered why)
  $("canvas-note").textContent = `?name=${asked.slice(0, 40)}${asked.length > 40 ? "…" : ""} ` +
    `is not a name (1 to ${potato.MAX_NAME} characters): this page is ${name}`;
}
$("auto").checked = params.get("auto") !== "0";
document.title = `potato: ${name}`;
showPeers();
render();
connect();
