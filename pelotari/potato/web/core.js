// The potato core for browsers: a port of pelotari/potato/wire.py (messages) and core.py (the
// sans-IO node), rule for rule; docs/protocols/potato.md has the decisions, the seed
// (Potato Protocol v2.1) the rest. Plain ES module: no imports, no build step; runs unchanged in
// Node 20 (the tests: node --test tests/js/) and in a page served over plain http.
//
//     peerUp(name, now) / peerDown(name, now)    a peer connected / went away
//     receive(peer, text, now)                   one data-channel message (string or bytes)
//     sendDirect(to, body, now) / broadcast(body, now) / propose(now)
//     handleTimer(now) / getTimer()              monotonic seconds
//     messagesToSend() -> [[peer, text]]         nextEvent() -> event or null
//
// JSON here is Python's: wire.decode reads with json.loads and relays with json.dumps, so this
// module has its own strict parser and encoder (JSON.parse cannot tell 1.0 from 1, nor keep a
// lone surrogate, 1e400 or key order out). On the JS side a JSON integer is a number (a BigInt
// past 2**53), a float with a fraction a number, and a float with an integral value (1.0, 1e2,
// -0.0) a Number object: so every check that wants an integer (counts, deadline_ms, strokes)
// refuses it as Python does, and a relayed body keeps Python's bytes.

export const INITIAL = "INITIAL"; // `parent` before the first frame
export const VOTES = ["YES", "NO", "ABSTAIN"];
export const MAX_NAME = 100; // the seed truncates names to 100 characters in frame identifiers
export const MAX_COUNT = 2 ** 31; // a response's yes/no counts: more clients than any mesh has

// type -> [needs `to`, body kind: null, "request" or "response"]
const TYPES = new Map([
  ["direct", [true, null]],
  ["broadcast", [false, null]],
  ["direct_election_request", [false, "request"]],
  ["direct_election_response", [true, "response"]],
  ["indirect_election_request", [false, "request"]],
  ["indirect_election_response", [true, "response"]],
]);
const FIELDS = ["type", "identifier", "from", "to", "visited", "body"];
const REQUIRED = ["type", "identifier", "from", "visited"];

/** Bytes that are not a message the schema allows. */
export class PotatoError extends Error {
  reason = "malformed";
}

/** More bytes, names, or nesting than the limits allow. */
export class TooLarge extends PotatoError {
  reason = "too_large";
}

/** Not one UTF-8 JSON object. */
export class NotJson extends PotatoError {
  reason = "not_json";
}

/** `type` is none of the six. */
export class UnknownType extends PotatoError {
  reason = "unknown_type";
}

/** A field missing, of the wrong kind, or unknown. */
export class BadField extends PotatoError {
  reason = "bad_field";
}

/** A frame's stroke list that breaks the picture rules (docs/protocols/potato.md). */
export class BadPicture extends PotatoError {
  reason = "bad_picture";
}

for (const cls of [PotatoError, TooLarge, NotJson, UnknownType, BadField, BadPicture]) {
  Object.defineProperty(cls.prototype, "name", { value: cls.name });
}

/** Every bound on a received message (wire.Limits). */
export function defaultLimits() {
  return {
    maxMessage: 65536, // bytes of JSON (UTF-8)
    maxVisited: 1024, // names in `visited`
    maxParticipants: 1024, // names in `direct_participants`
    maxIdentifier: 256, // characters of `identifier`, `parent`, `next`
    maxDepth: 32, // nesting of `body`
  };
}

function checkLimits(limits) {
  const out = { ...defaultLimits(), ...limits };
  for (const name of ["maxMessage", "maxVisited", "maxParticipants", "maxIdentifier", "maxDepth"]) {
    if (!(out[name] >= 1)) throw new RangeError(`${name} must be at least 1`);
  }
  return out;
}

// ---- text ------------------------------------------------------------------------------------

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Whether text is valid Unicode (UTF-8 can carry it): no lone surrogate. */
function wellFormed(text) {
  return !LONE_SURROGATE.test(text);
}

/** Python's len(): code points, not UTF-16 units (a lone surrogate counts as one). */
function pyLen(text) {
  let n = 0;
  for (let i = 0; i < text.length; i++, n++) {
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c < 0xdc00 && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d < 0xe000) i++;
    }
  }
  return n;
}

/** Bytes of text as UTF-8 (a lone surrogate as the 3 of U+FFFD, as TextEncoder writes it). */
function utf8Length(text) {
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c < 0xdc00 && i + 1 < text.length &&
             text.charCodeAt(i + 1) >= 0xdc00 && text.charCodeAt(i + 1) < 0xe000) {
      n += 4;
      i++;
    } else n += 3;
  }
  return n;
}

/** Python's order of str (code points): a surrogate sorts after U+E000..U+FFFF, as the astral
 * character it starts does; UTF-16 units alone would put it before. */
export function compareNames(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x !== y) {
      if (x >= 0xd800 && y >= 0xd800) { // only there do the two orders differ
        x = x >= 0xe000 ? x - 0x800 : x + 0x2000;
        y = y >= 0xe000 ? y - 0x800 : y + 0x2000;
      }
      return x - y;
    }
  }
  return a.length - b.length;
}

function sortedNames(names) {
  return [...names].sort(compareNames);
}

/** A client name: a string of 1..100 characters (valid Unicode: no lone surrogate). */
export function isName(value) {
  if (typeof value !== "string") return false;
  const n = pyLen(value);
  return n >= 1 && n <= MAX_NAME && wellFormed(value);
}

// ---- values as Python's json sees them -----------------------------------------------------

const isNone = (v) => v === null || v === undefined;

/** A JSON object (Python's dict): a plain object, not an array, a Number object or a class. */
function isDict(v) {
  if (v === null || typeof v !== "object" || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** Python's isinstance(v, int) and not bool: a number with an integral value, or a BigInt
 * (a float with an integral value is a Number object: not an int). */
function isInt(v) {
  return (typeof v === "number" && Number.isInteger(v)) || typeof v === "bigint";
}

/** dict.get: an own key only (never Object.prototype's). */
function get(obj, key) {
  return Object.hasOwn(obj, key) ? obj[key] : undefined;
}

// ---- JSON: Python's json.loads, strict (RFC 8259), and json.dumps ----------------------------

// Python's json refuses nesting near its recursion limit (about 1,000 less its caller's stack) as
// not JSON (RecursionError); this parser refuses past MAX_NESTING (well within a JS stack). From
// 900 levels to Python's limit the reasons differ (not_json here, too_large or bad_field there);
// the vectors keep out of that band.
const MAX_NESTING = 900;
const MAX_INT_DIGITS = 4300; // CPython's int_max_str_digits: a longer integer is a ValueError
const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?/y;
const HEX4 = /^[0-9a-fA-F]{4}$/;
const ESCAPES = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
const SAFE_MIN = BigInt(Number.MIN_SAFE_INTEGER);
const SAFE_MAX = BigInt(Number.MAX_SAFE_INTEGER);
// An object's keys in the order of the text, where JS's own order differs (integer-like keys
// come first in JS): json.dumps writes a dict in its insertion order.
const KEY_ORDER = Symbol("potato key order");

function parseJson(text) {
  let i = 0;
  const n = text.length;
  const fail = (why) => {
    throw new NotJson(`not JSON: ${why} (character ${i})`);
  };
  const ws = () => {
    for (let c = text.charCodeAt(i); c === 32 || c === 9 || c === 10 || c === 13;
      c = text.charCodeAt(++i));
  };

  function string() {
    i++; // the opening quote
    let out = "";
    let start = i;
    let surrogate = false;
    for (;;) {
      if (i >= n) fail("unterminated string");
      const c = text.charCodeAt(i);
      if (c === 34) break;
      if (c < 0x20) fail("a control character in a string");
      if (c !== 92) {
        i++;
        continue;
      }
      out += text.slice(start, i);
      const e = text[i + 1];
      if (e === "u") {
        const hex = text.slice(i + 2, i + 6);
        if (!HEX4.test(hex)) fail("a bad \\u escape");
        const unit = parseInt(hex, 16);
        if (unit >= 0xd800 && unit < 0xe000) surrogate = true;
        out += String.fromCharCode(unit);
        i += 6;
      } else if (e !== undefined && Object.hasOwn(ESCAPES, e)) {
        out += ESCAPES[e];
        i += 2;
      } else fail("a bad escape");
      start = i;
    }
    out += text.slice(start, i);
    i++;
    // An escaped pair is one character; a lone escaped surrogate no character at all.
    if (surrogate && !wellFormed(out)) fail("a lone UTF-16 surrogate");
    return out;
  }

  function number() {
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (m === null) fail("a bad number");
    const s = m[0];
    i += s.length;
    if (m[1] !== undefined || m[2] !== undefined) { // a float
      const v = Number(s);
      if (!Number.isFinite(v)) fail(`${s.slice(0, 20)} is out of range`); // 1e400
      return Number.isInteger(v) ? new Number(v) : v; // eslint-disable-line no-new-wrappers
    }
    if (s.length - (s[0] === "-" ? 1 : 0) > MAX_INT_DIGITS) fail("an integer past 4300 digits");
    if (s.length - (s[0] === "-" ? 1 : 0) <= 15) return Number(s) + 0; // (+ 0: -0 is 0)
    const big = BigInt(s);
    return big >= SAFE_MIN && big <= SAFE_MAX ? Number(big) : big;
  }

  function object(depth) {
    i++;
    const obj = {};
    const order = [];
    ws();
    if (text[i] === "}") {
      i++;
      return obj;
    }
    for (;;) {
      ws();
      if (text[i] !== '"') fail("expecting a property name in double quotes");
      const key = string();
      ws();
      if (text[i] !== ":") fail("expecting ':'");
      i++;
      const v = value(depth);
      if (!Object.hasOwn(obj, key)) order.push(key);
      // (a repeated key: the last value stands, in the first one's place, as in a dict)
      Object.defineProperty(obj, key, { value: v, enumerable: true, writable: true,
        configurable: true }); // (not `obj[key] =`: "__proto__" is a key like any other)
      ws();
      if (text[i] === ",") {
        i++;
        continue;
      }
      if (text[i] !== "}") fail("expecting ',' or '}'");
      i++;
      break;
    }
    const keys = Object.keys(obj);
    if (keys.some((k, j) => k !== order[j])) {
      Object.defineProperty(obj, KEY_ORDER, { value: order });
    }
    return obj;
  }

  function array(depth) {
    i++;
    const out = [];
    ws();
    if (text[i] === "]") {
      i++;
      return out;
    }
    for (;;) {
      out.push(value(depth));
      ws();
      if (text[i] === ",") {
        i++;
        continue;
      }
      if (text[i] !== "]") fail("expecting ',' or ']'");
      i++;
      return out;
    }
  }

  function value(depth) {
    ws();
    const c = text[i];
    if (c === "{" || c === "[") {
      if (depth >= MAX_NESTING) fail("nested too deep");
      return c === "{" ? object(depth + 1) : array(depth + 1);
    }
    if (c === '"') return string();
    if (c === "-" || (c >= "0" && c <= "9")) return number();
    for (const [word, v] of [["true", true], ["false", false], ["null", null]]) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return v;
      }
    }
    return fail("expecting a value"); // (NaN, Infinity: Python's parse_constant refuses them)
  }

  const out = value(0);
  ws();
  if (i !== n) fail("extra data");
  return out;
}

/** Python's repr() of a float (json.dumps writes floats so): the shortest digits that read back
 * (as JS's own), in exponent form below 1e-4 and from 1e16. */
function floatRepr(x) {
  if (Number.isNaN(x)) return "NaN"; // (json.dumps's allow_nan, as Python sends them)
  if (!Number.isFinite(x)) return x > 0 ? "Infinity" : "-Infinity";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const sign = x < 0 ? "-" : "";
  let s = String(Math.abs(x));
  let exp = 0;
  const e = s.indexOf("e");
  if (e >= 0) {
    exp = Number(s.slice(e + 1));
    s = s.slice(0, e);
  }
  let dot = s.indexOf(".");
  if (dot < 0) dot = s.length;
  let digits = s.slice(0, dot) + s.slice(dot + 1);
  let decpt = dot + exp; // x = 0.DIGITS * 10**decpt
  const lead = digits.length - digits.replace(/^0+/, "").length;
  digits = digits.slice(lead).replace(/0+$/, "");
  decpt -= lead;
  if (decpt > 16 || decpt < -3) {
    const p = decpt - 1;
    const mant = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    return `${sign}${mant}e${p < 0 ? "-" : "+"}${String(Math.abs(p)).padStart(2, "0")}`;
  }
  if (decpt <= 0) return `${sign}0.${"0".repeat(-decpt)}${digits}`;
  if (decpt >= digits.length) return `${sign}${digits}${"0".repeat(decpt - digits.length)}.0`;
  return `${sign}${digits.slice(0, decpt)}.${digits.slice(decpt)}`;
}

function dumps(v, out) {
  if (v === null || v === undefined) out.push("null");
  else if (v === true) out.push("true");
  else if (v === false) out.push("false");
  else if (typeof v === "string") {
    // Python's .encode() raises on a lone surrogate; JSON.stringify would escape it.
    if (!wellFormed(v)) throw new TypeError("a string with a lone surrogate is not UTF-8");
    out.push(JSON.stringify(v)); // escapes exactly as json.dumps(ensure_ascii=False)
  } else if (typeof v === "bigint") out.push(v.toString());
  else if (typeof v === "number") {
    if (!Number.isInteger(v)) out.push(floatRepr(v));
    else out.push(Number.isSafeInteger(v) ? String(v + 0) : BigInt(v).toString());
  } else if (v instanceof Number) out.push(floatRepr(v.valueOf()));
  else if (Array.isArray(v)) {
    out.push("[");
    v.forEach((item, k) => {
      if (k) out.push(",");
      dumps(item, out);
    });
    out.push("]");
  } else if (isDict(v)) {
    const keys = Object.keys(v);
    const order = v[KEY_ORDER];
    const inOrder = order !== undefined && order.length === keys.length &&
      order.every((k) => Object.hasOwn(v, k)) ? order : keys;
    out.push("{");
    let first = true;
    for (const k of inOrder) {
      if (v[k] === undefined) continue; // (JSON.stringify's rule: JS has no Python twin)
      if (!first) out.push(",");
      first = false;
      dumps(k, out);
      out.push(":");
      dumps(v[k], out);
    }
    out.push("}");
  } else throw new TypeError(`${Object.prototype.toString.call(v)} is not JSON serializable`);
}

// ---- messages --------------------------------------------------------------------------------

function names(value, limit, what) {
  if (!Array.isArray(value)) throw new BadField(`${what} must be an array of names`);
  if (value.length > limit) {
    throw new TooLarge(`${what} holds ${value.length} names; at most ${limit}`);
  }
  if (!value.every(isName)) {
    throw new BadField(`${what} holds something that is not a name (1..${MAX_NAME} characters)`);
  }
  return [...value];
}

function ident(value, limits, what) {
  if (typeof value !== "string" || !value) throw new BadField(`${what} must be a non-empty string`);
  const n = pyLen(value);
  if (n > limits.maxIdentifier) {
    throw new TooLarge(`${what} has ${n} characters; at most ${limits.maxIdentifier}`);
  }
  return value;
}

function depth(value, limit, level = 0) {
  if (level > limit) throw new TooLarge(`body nests deeper than ${limit}`);
  if (Array.isArray(value)) {
    for (const v of value) depth(v, limit, level + 1);
  } else if (isDict(value)) {
    for (const k of Object.keys(value)) depth(value[k], limit, level + 1);
  }
}

/** An election request's body, checked: {parent, next, originator, directParticipants,
 * deadlineMs (null: none)}. */
export function requestBody(body, limits = defaultLimits()) {
  return checkedRequest(body, checkLimits(limits));
}

function checkedRequest(body, limits) {
  if (!isDict(body)) throw new BadField("an election request needs a body object");
  let deadline = get(body, "deadline_ms");
  if (!isNone(deadline) && (!isInt(deadline) || deadline < 0)) {
    throw new BadField("deadline_ms must be a non-negative integer");
  }
  const originator = get(body, "originator");
  if (!isName(originator)) throw new BadField("originator must be a name");
  const parent = ident(get(body, "parent"), limits, "parent");
  const next = ident(get(body, "next"), limits, "next");
  if (parent === next) {
    throw new BadField("next must differ from parent (a frame is not its own parent)");
  }
  const participants = names(get(body, "direct_participants"), limits.maxParticipants,
    "direct_participants");
  if (isNone(deadline)) deadline = null;
  return { parent, next, originator, directParticipants: participants, deadlineMs: deadline };
}

function requestDict(req) {
  const out = { parent: req.parent, next: req.next, originator: req.originator,
    direct_participants: [...req.directParticipants] };
  if (!isNone(req.deadlineMs)) out.deadline_ms = req.deadlineMs;
  return out;
}

/** wire.Response: without counts (negative), the vote counts as one. */
function response(parent, next, vote, yes = -1, no = -1) {
  if (yes < 0 || no < 0) { // derived from the vote
    yes = vote === "YES" ? 1 : 0;
    no = vote === "NO" ? 1 : 0;
  }
  return { parent, next, vote, yes, no };
}

function responseDict(resp) {
  return { parent: resp.parent, next: resp.next, vote: resp.vote, yes: resp.yes, no: resp.no };
}

/** An election response's body, checked: {parent, next, vote, yes, no} (counts derived from
 * the vote when the body has none). */
export function responseBody(body, limits = defaultLimits()) {
  return checkedResponse(body, checkLimits(limits));
}

function checkedResponse(body, limits) {
  if (!isDict(body)) throw new BadField("an election response needs a body object");
  const vote = get(body, "vote");
  if (!VOTES.includes(vote)) throw new BadField("vote must be YES, NO or ABSTAIN");
  const counts = [];
  for (const key of ["yes", "no"]) {
    const v = get(body, key);
    if (!isNone(v) && (!isInt(v) || !(v >= 0 && v < MAX_COUNT))) {
      throw new BadField(`${key} must be an integer within 0..${MAX_COUNT - 1}`);
    }
    counts.push(isNone(v) ? -1 : Number(v)); // (a BigInt here is below 2**31)
  }
  const both = counts[0] >= 0 && counts[1] >= 0;
  if (both) {
    const [yes, no] = counts;
    if (vote === "ABSTAIN" && (yes || no)) throw new BadField("an ABSTAIN carries no votes");
    if ((vote === "YES" && yes < no) || (vote === "NO" && no < yes) ||
        (vote !== "ABSTAIN" && yes + no === 0)) {
      throw new BadField("vote contradicts the counts");
    }
  }
  const parent = ident(get(body, "parent"), limits, "parent");
  const next = ident(get(body, "next"), limits, "next");
  if (parent === next) {
    throw new BadField("next must differ from parent (a frame is not its own parent)");
  }
  return response(parent, next, vote, both ? counts[0] : -1, both ? counts[1] : -1);
}

// A frame's picture (pelotari's, docs/protocols/potato.md "Frames are pictures"): a stroke list
// on a WIDTH x HEIGHT grid, carried in the winner's frame broadcast as body.strokes.
export const WIDTH = 1024;
export const HEIGHT = 768;
export const MAX_STROKES = 256;
export const MAX_POINTS = 4096; // (x, y) pairs in all strokes together
export const MAX_LINE_WIDTH = 32; // a stroke's line width, 1..32 (wire.MAX_WIDTH)
const COLOUR = /^#[0-9a-f]{6}$/;

const coordinate = (value, limit) => isInt(value) && value >= 0 && value < limit;

/** A frame's stroke list, checked: [{c: "#rrggbb", w: 1..32, p: [x0, y0, ...]}, ...] with
 * integer points on the 1,024 x 768 grid; BadPicture (or TooLarge) says why not. */
export function strokes(value) {
  if (!Array.isArray(value)) throw new BadPicture("strokes must be an array");
  if (value.length > MAX_STROKES) {
    throw new TooLarge(`${value.length} strokes; at most ${MAX_STROKES}`);
  }
  let points = 0;
  for (const stroke of value) {
    if (!isDict(stroke) || Object.keys(stroke).length !== 3 ||
        !["c", "w", "p"].every((k) => Object.hasOwn(stroke, k))) {
      throw new BadPicture('a stroke is an object with exactly "c", "w" and "p"');
    }
    const { c, w, p } = stroke;
    if (typeof c !== "string" || !COLOUR.test(c)) {
      throw new BadPicture("a stroke's colour is #rrggbb (lower-case hex)");
    }
    if (!isInt(w) || !(w >= 1 && w <= MAX_LINE_WIDTH)) {
      throw new BadPicture(`a stroke's width is an integer in 1..${MAX_LINE_WIDTH}`);
    }
    if (!Array.isArray(p) || !p.length || p.length % 2) {
      throw new BadPicture("a stroke's points are a non-empty array of x, y pairs");
    }
    points += p.length / 2;
    if (points > MAX_POINTS) throw new TooLarge(`over ${MAX_POINTS} points`);
    const xs = p.filter((_, k) => k % 2 === 0);
    const ys = p.filter((_, k) => k % 2 === 1);
    if (!xs.every((x) => coordinate(x, WIDTH)) || !ys.every((y) => coordinate(y, HEIGHT))) {
      throw new BadPicture(`a point is off the ${WIDTH} x ${HEIGHT} grid (integers)`);
    }
  }
  return value;
}

let utf8Decoder = null;

/** One message from one data-channel message: a string, or bytes (Uint8Array, ArrayBuffer)
 * read as strict UTF-8; a PotatoError says why not. A message is a plain object
 * {type, identifier, sender, visited, to (null: none), body (null: none)}. */
export function decode(data, limits = defaultLimits()) {
  return checkedDecode(data, checkLimits(limits));
}

function checkedDecode(data, limits) {
  let text;
  if (typeof data === "string") {
    const size = utf8Length(data);
    if (size > limits.maxMessage) throw new TooLarge(`${size} bytes; at most ${limits.maxMessage}`);
    // A string no UTF-8 encoder takes: the bytes Python would have been given were not UTF-8.
    if (!wellFormed(data)) throw new NotJson("not JSON: a lone UTF-16 surrogate");
    text = data;
  } else {
    let bytes;
    if (data instanceof ArrayBuffer) bytes = new Uint8Array(data);
    else if (ArrayBuffer.isView(data)) {
      bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    } else throw new TypeError("decode takes a string, a Uint8Array or an ArrayBuffer");
    if (bytes.length > limits.maxMessage) {
      throw new TooLarge(`${bytes.length} bytes; at most ${limits.maxMessage}`);
    }
    // ignoreBOM: a BOM is kept, so that it is not JSON (Python's json.loads refuses it too)
    utf8Decoder ??= new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
    try {
      text = utf8Decoder.decode(bytes);
    } catch {
      throw new NotJson("not JSON: not UTF-8");
    }
  }
  const obj = parseJson(text);
  if (!isDict(obj)) throw new NotJson("not a JSON object");
  const unknown = Object.keys(obj).filter((k) => !FIELDS.includes(k));
  if (unknown.length) throw new BadField(`unknown field(s): ${sortedNames(unknown).join(", ")}`);
  const missing = REQUIRED.filter((f) => !Object.hasOwn(obj, f));
  if (missing.length) throw new BadField(`missing ${missing.join(", ")}`);
  const kind = obj.type;
  if (typeof kind !== "string" || !TYPES.has(kind)) {
    throw new UnknownType(`unknown type ${JSON.stringify(String(kind).slice(0, 40))}`);
  }
  const [needsTo, bodyKind] = TYPES.get(kind);
  const to = isNone(get(obj, "to")) ? null : obj.to;
  if (to !== null && !isName(to)) throw new BadField("to must be a name");
  if (needsTo && to === null) throw new BadField(`a ${kind} message needs \`to\``);
  if (!isName(obj.from)) throw new BadField("from must be a name");
  const body = isNone(get(obj, "body")) ? null : obj.body;
  depth(body, limits.maxDepth);
  if (bodyKind === "request") checkedRequest(body, limits);
  else if (bodyKind === "response") checkedResponse(body, limits);
  return { type: kind, identifier: ident(obj.identifier, limits, "identifier"), sender: obj.from,
    visited: names(obj.visited, limits.maxVisited, "visited"), to, body };
}

/** The message as compact JSON, keys in the order type, identifier, from, to, visited, body
 * (Python's as_dict; `to` and `body` only when not null). */
export function encode(msg) {
  const out = { type: msg.type, identifier: msg.identifier, from: msg.sender };
  if (!isNone(msg.to)) out.to = msg.to;
  out.visited = [...(msg.visited ?? [])];
  if (!isNone(msg.body)) out.body = msg.body;
  const parts = [];
  dumps(out, parts);
  return parts.join("");
}

// ---- identifiers -----------------------------------------------------------------------------

function randomHex(bytes) {
  const b = globalThis.crypto.getRandomValues(new Uint8Array(bytes));
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** SHA-1 of bytes, as 40 lower-case hex digits (FIPS 180-4). */
export function sha1Hex(bytes) {
  const length = bytes.length;
  const size = (((length + 8) >> 6) + 1) << 6; // the message, 0x80, zeros, 64-bit length
  const buf = new Uint8Array(size);
  buf.set(bytes);
  buf[length] = 0x80;
  const view = new DataView(buf.buffer);
  view.setUint32(size - 8, Math.floor(length / 0x20000000)); // length * 8, high word
  view.setUint32(size - 4, (length * 8) >>> 0);
  const h = [0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0];
  const w = new Int32Array(80);
  const rotl = (x, k) => (x << k) | (x >>> (32 - k));
  for (let off = 0; off < size; off += 64) {
    for (let t = 0; t < 16; t++) w[t] = view.getInt32(off + 4 * t);
    for (let t = 16; t < 80; t++) w[t] = rotl(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
    let [a, b, c, d, e] = h;
    for (let t = 0; t < 80; t++) {
      let f;
      let k;
      if (t < 20) {
        f = (b & c) | (~b & d);
        k = 0x5a827999;
      } else if (t < 40) {
        f = b ^ c ^ d;
        k = 0x6ed9eba1;
      } else if (t < 60) {
        f = (b & c) | (b & d) | (c & d);
        k = 0x8f1bbcdc;
      } else {
        f = b ^ c ^ d;
        k = 0xca62c1d6;
      }
      const temp = (rotl(a, 5) + f + e + k + w[t]) | 0;
      e = d;
      d = c;
      c = rotl(b, 30);
      b = a;
      a = temp;
    }
    h[0] = (h[0] + a) | 0;
    h[1] = (h[1] + b) | 0;
    h[2] = (h[2] + c) | 0;
    h[3] = (h[3] + d) | 0;
    h[4] = (h[4] + e) | 0;
  }
  return h.map((x) => (x >>> 0).toString(16).padStart(8, "0")).join("");
}

/** Python's round() of a float: to the nearest integer, a half to the even one. */
function pyRound(x) {
  const f = Math.floor(x);
  const d = x - f; // exact for a double
  const r = d > 0.5 || (d === 0.5 && f % 2 !== 0) ? f + 1 : f;
  return Number.isSafeInteger(r) ? String(r + 0) : BigInt(r).toString();
}

/** A frame identifier: SHA-1 of `time-name-random` (Unix ms rounded as Python's round(), name
 * cut to 100 characters, random 16 hex digits unless given). */
export function frameId(name, nowMs = null, random = null) {
  nowMs ??= Date.now();
  random ??= randomHex(8);
  const cut = Array.from(name).slice(0, MAX_NAME).join("");
  return sha1Hex(new TextEncoder().encode(`${pyRound(nowMs)}-${cut}-${random}`));
}

/** A message identifier, unique to the message: 32 lower-case hex digits (a UUID4's, as
 * Python's uuid4().hex). */
export function newIdentifier() {
  const b = globalThis.crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40; // version 4
  b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

// ---- the node --------------------------------------------------------------------------------

/** A node's timers and limits (core.Config; defaults documented in docs/protocols/potato.md). */
export function defaultConfig() {
  return {
    cacheLifetime: 5.0, // a message identifier is remembered this long (per entry)
    maxCache: 65536, // identifiers remembered at most (oldest forgotten first)
    directTimeout: 0.3, // the seed: direct participants answer within 300 ms
    hopMarginMs: 10, // each indirect hop answers this much before its requester must
    minBudgetMs: 10, // below this a request is answered at once, without asking further
    indirectBudgetMs: 250, // assumed for an indirect request without deadline_ms
    originatorWeight: 1.5,
    maxElections: 256, // elections (parent, next) remembered at once
    requestBurst: 16, // election requests taken from one peer: a token bucket
    requestRate: 8.0, // per second (the seed: one direct election per client at once)
    maxSeenElections: 4096, // (parent, next) -> originator heard, for taking frames
    frameHistory: 4096, // frames we had, so an old one is never taken again
    limits: defaultLimits(),
  };
}

function checkConfig(config) {
  const c = { ...defaultConfig(), ...config };
  c.limits = checkLimits(config.limits);
  if (!(c.cacheLifetime > 0) || !(c.directTimeout > 0)) {
    throw new RangeError("cacheLifetime and directTimeout must be positive");
  }
  if (!(Math.min(c.maxCache, c.maxSeenElections, c.frameHistory) >= 1)) {
    throw new RangeError("maxCache, maxSeenElections and frameHistory must be at least 1");
  }
  if (!(c.maxElections >= 2)) {
    throw new RangeError("maxElections must be at least 2 (one place is kept for our own)");
  }
  if (c.maxSeenElections < c.maxElections) {
    throw new RangeError("maxSeenElections must be at least maxElections (it outlives them, " +
      "so a forgotten election is not voted on twice)");
  }
  return c;
}

/** An election's key in the node's tables: (parent, next). */
const electionKey = (parent, next) => JSON.stringify([parent, next]);

/** Links a message crossed to reach us: its relays plus one. A broadcast's relays all add
 * themselves to `visited`; a direct message's last relay hands it over without (the seed), so
 * the peer that handed it over counts too. */
function hops(msg, peer) {
  const relays = new Set([...msg.visited, peer]);
  relays.delete(msg.sender);
  return relays.size + 1;
}

function firstKey(map) {
  return map.keys().next().value;
}

/** One client of the mesh (core.PotatoNode). Events are plain objects with a `kind`:
 * Delivered {type: "direct"|"broadcast", sender, body, identifier, hops, via},
 * Undeliverable {to, identifier}, PeerUp {peer}, PeerDown {peer},
 * ElectionStarted {parent, next, participants}, VoteCast {parent, next, originator, vote},
 * ElectionResult {parent, next, yes, no, won, abstained},
 * FrameChanged {frame, parent, by, via, picture}. */
export class PotatoNode {
  constructor(name, now, config = defaultConfig(), frame = INITIAL) {
    if (!isName(name)) throw new RangeError(`a name is 1..${MAX_NAME} characters`);
    this.name = name;
    this.config = checkConfig(config ?? {});
    this.frame = frame;
    this.peers = new Set();
    this.stats = {}; // Python's Counter: a key never counted reads undefined (0)
    this._out = [];
    this._events = [];
    this._cache = new Map(); // identifier -> forget at
    this._votes = new Map(); // electionKey -> vote (_Vote)
    // parent -> [the first next we voted on, until when that binds]
    this._votedOn = new Map();
    this._mine = null; // our own open election
    this._buckets = new Map(); // peer -> [tokens, when]
    // Every election request heard, electionKey -> originator, and the frames we had: a frame
    // broadcast is taken only for an election we heard, never an old frame.
    this._seen = new Map();
    this._history = new Map([[frame, null]]);
    // The picture our frame broadcast carries when we win (body.strokes; null: only the seed's
    // frame and parent). The application sets it (a page: its canvas); taking a frame with a
    // picture sets it to that picture.
    this.picture = null;
  }

  _count(key, n = 1) {
    this.stats[key] = (this.stats[key] ?? 0) + n;
  }

  // ---- peers ---------------------------------------------------------------------------------

  /** A transport connected a peer. */
  peerUp(peer, now) {
    if (peer !== this.name && !this.peers.has(peer)) {
      this.peers.add(peer);
      this._events.push({ kind: "PeerUp", peer });
    }
  }

  /** A peer went away: anything we wait for from it is an ABSTAIN (the seed). */
  peerDown(peer, now) {
    if (this.peers.has(peer)) {
      this.peers.delete(peer);
      this._buckets.delete(peer);
      this._events.push({ kind: "PeerDown", peer });
      for (const v of [...this._votes.values()]) {
        if (v.waiting.has(peer)) {
          v.waiting.delete(peer);
          v.abstained.push(peer);
          this._maybeAnswer(v, now);
        }
      }
    }
  }

  // ---- sending -------------------------------------------------------------------------------

  _send(peer, msg) {
    this._out.push([peer, encode(msg)]);
    this._count(`sent_${msg.type}`);
  }

  _remember(identifier, now) {
    this._cache.delete(identifier); // (move_to_end)
    this._cache.set(identifier, now + this.config.cacheLifetime);
    while (this._cache.size > this.config.maxCache) {
      this._cache.delete(firstKey(this._cache));
      this._count("cache_evicted");
    }
  }

  /** Direct to the recipient if it is a peer; else add ourselves to `visited` and send to
   * every peer not in it. How many copies went. */
  _relay(msg, now, exclude = null) {
    if (msg.type === "direct" && this.peers.has(msg.to)) {
      this._send(msg.to, msg);
      return 1;
    }
    const visited = msg.visited.includes(this.name) ? msg.visited : [...msg.visited, this.name];
    const out = { ...msg, visited };
    let sent = 0;
    for (const p of sortedNames(this.peers)) {
      if (!visited.includes(p) && p !== exclude) {
        this._send(p, out);
        sent += 1;
      }
    }
    return sent;
  }

  /** A direct message to a client by name; its identifier. */
  sendDirect(to, body, now) {
    if (!isName(to)) throw new RangeError(`a name is 1..${MAX_NAME} characters`);
    const msg = { type: "direct", identifier: newIdentifier(), sender: this.name, visited: [],
      to, body: body ?? null };
    this._remember(msg.identifier, now);
    if (this._relay(msg, now) === 0) {
      this._events.push({ kind: "Undeliverable", to, identifier: msg.identifier });
    }
    return msg.identifier;
  }

  /** A broadcast to the whole mesh; its identifier. */
  broadcast(body, now) {
    const msg = { type: "broadcast", identifier: newIdentifier(), sender: this.name,
      visited: [], to: null, body: body ?? null };
    this._remember(msg.identifier, now);
    this._relay(msg, now);
    return msg.identifier;
  }

  // ---- receiving -----------------------------------------------------------------------------

  /** One message from a peer (a string, or its bytes): checked, then relayed, delivered or
   * voted on; a bad one is counted as dropped_REASON. */
  receive(peer, data, now) {
    if (!this.peers.has(peer)) {
      this._count("dropped_not_a_peer");
      return;
    }
    let msg;
    try {
      msg = checkedDecode(data, this.config.limits);
    } catch (e) {
      if (!(e instanceof PotatoError)) throw e;
      this._count(`dropped_${e.reason}`);
      return;
    }
    this._count(`received_${msg.type}`);
    if (msg.type === "direct" || msg.type === "broadcast") this._onRelayed(peer, msg, now);
    else if (msg.type.endsWith("_request")) {
      this._onRequest(peer, msg, checkedRequest(msg.body, this.config.limits), now);
    } else this._onResponse(peer, msg, checkedResponse(msg.body, this.config.limits), now);
  }

  _onRelayed(peer, msg, now) {
    if (this._cache.has(msg.identifier)) {
      this._count("duplicate"); // a loop or a second path: neither used nor relayed
      return;
    }
    if (msg.sender === this.name) {
      this._count("own_message_back");
      this._remember(msg.identifier, now);
      return;
    }
    this._remember(msg.identifier, now);
    if (msg.type === "direct") {
      if (msg.to === this.name) {
        this._events.push({ kind: "Delivered", type: "direct", sender: msg.sender,
          body: msg.body, identifier: msg.identifier, hops: hops(msg, peer), via: peer });
        return;
      }
      this._relay(msg, now, peer);
      return;
    }
    const frame = isDict(msg.body) ? get(msg.body, "frame") : undefined;
    if (typeof frame === "string" && frame) { // a winner's frame: FrameChanged tells it
      const parent = get(msg.body, "parent");
      const why = this._frameRefused(frame, parent, msg.sender);
      if (why) this._count(`frame_refused_${why}`);
      else this._takeFrame(frame, parent, msg.sender, peer, this._picture(msg.body));
    } else {
      this._events.push({ kind: "Delivered", type: "broadcast", sender: msg.sender,
        body: msg.body, identifier: msg.identifier, hops: hops(msg, peer), via: peer });
    }
    // Relayed whatever we make of it: relaying is the seed's rule, taking a frame our own.
    this._relay(msg, now, peer);
  }

  /** A frame broadcast's stroke list if it keeps the picture rules, else null (counted: the
   * frame is still taken, the seed's rule; its picture is not). */
  _picture(body) {
    if (!Object.hasOwn(body, "strokes")) return null;
    try {
      return strokes(body.strokes);
    } catch (e) {
      if (!(e instanceof PotatoError)) throw e;
      this._count(`picture_refused_${e.reason}`);
      return null;
    }
  }

  /** Why a frame broadcast is not taken, or null. Taken: a frame we never had, on our frame or
   * on one we never had (we missed a frame: catch up), from the originator of an election for
   * it that we heard. So a broadcast alone, with no election before it, moves nobody, an old
   * frame is never taken back, and no frame forks our history. */
  _frameRefused(frame, parent, sender) {
    if (typeof parent !== "string" || parent === frame) return "malformed";
    if (this._history.has(frame)) return "old";
    if (parent !== this.frame && this._history.has(parent)) return "fork";
    if (this._seen.get(electionKey(parent, frame)) !== sender) return "no_election";
    return null;
  }

  // ---- elections -----------------------------------------------------------------------------

  /** Start a direct election for a new frame on top of ours; `next`, or null when one of ours
   * is still open (the seed: one at a time). */
  propose(now) {
    if (this._mine !== null) return null;
    const next = frameId(this.name);
    const req = { parent: this.frame, next, originator: this.name,
      directParticipants: sortedNames(this.peers), deadlineMs: null };
    const v = this._newVote(req, null, "direct", now + this.config.directTimeout,
      { waiting: new Set(req.directParticipants) });
    this._mine = v;
    this._room(true); // always true: others leave one place, and our last one is done
    this._track(electionKey(req.parent, req.next), v);
    this._heard(req);
    this._noteVote(req, now);
    this._events.push({ kind: "ElectionStarted", parent: req.parent, next: req.next,
      participants: [...req.directParticipants] });
    for (const p of req.directParticipants) {
      this._send(p, { type: "direct_election_request", identifier: newIdentifier(),
        sender: this.name, visited: [], to: null, body: requestDict(req) });
    }
    this._maybeAnswer(v, now);
    return next;
  }

  /** core._Vote: our part in one election (parent, next): whom we answer, whom we wait for. */
  _newVote(request, requester, kind, deadline, fields = {}) {
    return {
      request,
      requester, // null: we originated it
      kind, // "direct" or "indirect" (the request we answer)
      deadline,
      yes: 0,
      no: 0,
      internal: "ABSTAIN", // our own vote in it
      waiting: new Set(),
      abstained: [],
      done: false,
      ...fields,
    };
  }

  /** Forget finished elections past the limit; whether there is room for another. An open one
   * is never forgotten (its copies still travelling would look new). Other nodes' elections
   * get maxElections - 1 places, so ours always finds one: strangers filling the table cannot
   * stop this node from proposing, nor push it past maxElections. */
  _room(own = false) {
    const limit = this.config.maxElections - (own ? 0 : 1);
    if (this._votes.size < limit) return true;
    const done = [...this._votes].filter(([, v]) => v.done).map(([k]) => k);
    for (const key of done) {
      if (this._votes.size < limit) break;
      this._votes.delete(key);
    }
    return this._votes.size < limit;
  }

  _track(key, v) {
    this._votes.set(key, v);
  }

  _noteVote(req, now) {
    const first = this._votedOn.get(req.parent);
    if (first === undefined || now >= first[1]) {
      // Binding while that election can still be won: its originator's deadline, twice.
      this._votedOn.set(req.parent, [req.next, now + 2 * this.config.directTimeout]);
    }
    while (this._votedOn.size > this.config.maxElections) {
      this._votedOn.delete(firstKey(this._votedOn));
    }
  }

  /** YES iff the proposal builds on our frame and we have voted on nothing else on top of that
   * parent; NO otherwise, and always NO while our own election is open. */
  _internalVote(req, now) {
    if (this._mine !== null) return "NO";
    let first = this._votedOn.get(req.parent);
    if (first !== undefined && now >= first[1]) {
      first = undefined; // that election is over without a frame: the parent is open again
    }
    if (req.parent === this.frame && (first === undefined || first[0] === req.next)) return "YES";
    return "NO";
  }

  _respond(to, kind, req, vote, yes, no) {
    if (!this.peers.has(to)) { // the requester went away while we waited for answers
      this._count("answer_requester_gone");
      return;
    }
    const body = responseDict(response(req.parent, req.next, vote, yes, no));
    this._send(to, { type: `${kind}_election_response`, identifier: newIdentifier(),
      sender: this.name, visited: [], to, body });
  }

  _bucketOk(peer, now) {
    const cfg = this.config;
    let [tokens, at] = this._buckets.get(peer) ?? [cfg.requestBurst, now];
    tokens = Math.min(cfg.requestBurst, tokens + (now - at) * cfg.requestRate);
    const ok = tokens >= 1;
    this._buckets.set(peer, [ok ? tokens - 1 : tokens, now]);
    return ok;
  }

  _heard(req) {
    const key = electionKey(req.parent, req.next);
    if (!this._seen.has(key)) { // the first originator named for it stands
      this._seen.set(key, req.originator);
      this._count("elections_heard");
      while (this._seen.size > this.config.maxSeenElections) {
        this._seen.delete(firstKey(this._seen));
      }
    }
  }

  _onRequest(peer, msg, req, now) {
    const kind = msg.type.startsWith("direct") ? "direct" : "indirect";
    const key = electionKey(req.parent, req.next);
    const forgotten = this._seen.has(key) && !this._votes.has(key);
    this._heard(req);
    if (forgotten) {
      // A late copy of an election we answered (or refused) and have since let go to make
      // room: voting now would be a second vote in it. `_seen` outlives `_votes`.
      this._count("abstained_forgotten");
      this._respond(peer, kind, req, "ABSTAIN", 0, 0);
      return;
    }
    if (!this._votes.has(key) && (!this._bucketOk(peer, now) || !this._room())) {
      // Too many new elections from this peer, or too many open at once: ABSTAIN, and spread
      // nothing (each request we spread costs the mesh a message per edge).
      this._count("abstained_limit");
      this._respond(peer, kind, req, "ABSTAIN", 0, 0);
      return;
    }
    if (this._votes.has(key)) {
      // We take part already (or started it): ABSTAIN, and we ask this peer nothing. A request
      // from a peer we asked ourselves stands for its answer (the seed's example: "D sent it a
      // discarded indirect election request").
      const v = this._votes.get(key);
      this._respond(peer, kind, req, "ABSTAIN", 0, 0);
      this._count("abstained_repeat");
      if (v.waiting.has(peer)) {
        v.waiting.delete(peer);
        v.abstained.push(peer);
        this._maybeAnswer(v, now);
      }
      return;
    }
    if (this._mine !== null) {
      // Our own election is open: NO, at once, and we do not spread theirs.
      this._track(key, this._newVote(req, peer, kind, now, { done: true }));
      this._events.push({ kind: "VoteCast", parent: req.parent, next: req.next,
        originator: req.originator, vote: "NO" });
      this._respond(peer, kind, req, "NO", 0, 1);
      return;
    }
    const vote = this._internalVote(req, now);
    this._noteVote(req, now);
    this._events.push({ kind: "VoteCast", parent: req.parent, next: req.next,
      originator: req.originator, vote });
    let budgetMs;
    if (kind === "direct") { // answered a margin before the originator stops waiting
      budgetMs = Math.trunc(this.config.directTimeout * 1000) - this.config.hopMarginMs;
    } else {
      budgetMs = req.deadlineMs !== null ? req.deadlineMs : this.config.indirectBudgetMs;
    }
    const v = this._newVote(req, peer, kind, now + Number(budgetMs) / 1000,
      { internal: vote, yes: vote === "YES" ? 1 : 0, no: vote === "NO" ? 1 : 0 });
    this._track(key, v);
    // (deadline_ms is any integer: a BigInt past 2**53, kept exact as Python keeps it)
    const askBudget = typeof budgetMs === "bigint" ? budgetMs - BigInt(this.config.hopMarginMs)
      : budgetMs - this.config.hopMarginMs;
    if (askBudget >= this.config.minBudgetMs) {
      const skip = new Set([req.originator, peer, ...req.directParticipants]);
      const ask = sortedNames([...this.peers].filter((p) => !skip.has(p)));
      const fwd = { ...req, deadlineMs: askBudget };
      for (const p of ask) {
        this._send(p, { type: "indirect_election_request", identifier: newIdentifier(),
          sender: this.name, visited: [], to: null, body: requestDict(fwd) });
      }
      v.waiting = new Set(ask);
    }
    this._maybeAnswer(v, now);
  }

  _onResponse(peer, msg, resp, now) {
    const v = this._votes.get(electionKey(resp.parent, resp.next));
    if (v === undefined || v.done || !v.waiting.has(peer)) {
      this._count("dropped_unexpected_response");
      return;
    }
    v.waiting.delete(peer);
    if (resp.vote === "ABSTAIN") v.abstained.push(peer);
    else {
      v.yes += resp.yes;
      v.no += resp.no;
    }
    this._maybeAnswer(v, now);
  }

  /** Answer our requester (or tally our own) once everybody we asked has answered, or the time
   * is up (the rest count as ABSTAIN). */
  _maybeAnswer(v, now, timedOut = false) {
    if (v.done || (v.waiting.size && !timedOut)) return;
    if (timedOut) {
      v.abstained.push(...sortedNames(v.waiting));
      this._count("abstained_timeout", v.waiting.size);
      v.waiting.clear();
    }
    v.done = true;
    const req = v.request;
    if (v.requester !== null) {
      // `vote` sums the counts up for clients that read only it: the majority, a tie going our
      // own way.
      const vote = v.yes + v.no === 0 ? "ABSTAIN" : v.yes > v.no ? "YES" : v.no > v.yes ? "NO"
        : v.internal;
      this._respond(v.requester, v.kind, req, vote, v.yes, v.no);
      return;
    }
    this._mine = null;
    const yes = this.config.originatorWeight + v.yes;
    const won = yes > v.no;
    this._events.push({ kind: "ElectionResult", parent: req.parent, next: req.next, yes,
      no: v.no, won, abstained: [...v.abstained] });
    if (won && this.frame === req.parent) {
      const body = { frame: req.next, parent: req.parent };
      if (this.picture !== null) body.strokes = this.picture;
      this.broadcast(body, now);
      this._takeFrame(req.next, req.parent, this.name, "", this.picture);
    }
  }

  /** A frame was broadcast: every open election ends without a result (the seed). */
  _takeFrame(frame, parent, by, via = "", picture = null) {
    if (frame === this.frame) return;
    this.frame = frame;
    if (picture !== null) this.picture = picture;
    this._history.set(frame, null);
    while (this._history.size > this.config.frameHistory) {
      this._history.delete(firstKey(this._history));
    }
    for (const v of this._votes.values()) {
      if (!v.done) {
        v.done = true;
        this._count("elections_ended_by_frame");
      }
    }
    this._mine = null;
    this._events.push({ kind: "FrameChanged", frame, parent, by, via, picture });
  }

  // ---- timers --------------------------------------------------------------------------------

  /** When handleTimer() next has work (seconds), or null. */
  getTimer() {
    let due = null;
    for (const v of this._votes.values()) {
      if (!v.done && (due === null || v.deadline < due)) due = v.deadline;
    }
    if (this._cache.size) {
      const forget = this._cache.values().next().value;
      if (due === null || forget < due) due = forget;
    }
    return due;
  }

  /** Deadlines of elections; the identifier cache's expiry. */
  handleTimer(now) {
    for (const v of [...this._votes.values()]) {
      if (!v.done && now >= v.deadline) this._maybeAnswer(v, now, true);
    }
    while (this._cache.size && this._cache.values().next().value <= now) {
      this._cache.delete(firstKey(this._cache));
    }
  }

  // ---- output --------------------------------------------------------------------------------

  /** [peer, text] pairs queued since the last call. */
  messagesToSend() {
    const out = this._out;
    this._out = [];
    return out;
  }

  /** The oldest undelivered event, or null. */
  nextEvent() {
    return this._events.length ? this._events.shift() : null;
  }
}
