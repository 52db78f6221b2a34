// A deterministic discrete-event network for the JS potato core: the datagram part of
// pelotari/sim.py (Simulator) with the core behind pelotari/potato/simulate.py's SimCore, step
// for step, so that messages due at the same time are handled in Python's order (time, then the
// order they were scheduled in, timers included). No jitter and no loss: nothing random.

/** How messages travel from one node to another (delay in seconds, one way). */
export class LinkSpec {
  constructor(delay = 0.001) {
    this.delay = delay;
  }
}

/** A binary heap of [when, seq, fn], smallest (when, seq) first: Python's heapq of tuples. */
class Queue {
  constructor() {
    this.items = [];
  }

  get size() {
    return this.items.length;
  }

  peek() {
    return this.items[0];
  }

  static less(a, b) {
    return a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]);
  }

  push(item) {
    const h = this.items;
    h.push(item);
    let k = h.length - 1;
    while (k > 0) {
      const parent = (k - 1) >> 1;
      if (!Queue.less(h[k], h[parent])) break;
      [h[k], h[parent]] = [h[parent], h[k]];
      k = parent;
    }
  }

  pop() {
    const h = this.items;
    const top = h[0];
    const last = h.pop();
    if (h.length) {
      h[0] = last;
      let k = 0;
      for (;;) {
        const l = 2 * k + 1;
        const r = l + 1;
        let m = k;
        if (l < h.length && Queue.less(h[l], h[m])) m = l;
        if (r < h.length && Queue.less(h[r], h[m])) m = r;
        if (m === k) break;
        [h[k], h[m]] = [h[m], h[k]];
        k = m;
      }
    }
    return top;
  }
}

/** The network and the clock; nodes are PotatoNode cores known by name. */
export class Simulator {
  constructor(defaultSpec = new LinkSpec()) {
    this.now = 0.0;
    this.default = defaultSpec;
    this.nodes = new Map(); // name -> {core, crashed, events: [[time, event]]}
    this.links = new Map(); // "a\u0000b" -> LinkSpec
    this.queue = new Queue();
    this.seq = 0;
    this.timers = new Map(); // name -> when armed
    this.spy = null; // (src, dst, text) before each delivery, for tests
  }

  add(name, makeCore) {
    const node = { name, core: makeCore(this.now), crashed: false, events: [] };
    this.nodes.set(name, node);
    this.pump(node);
    return node;
  }

  link(a, b, spec, bothWays = true) {
    this.links.set(`${a}\u0000${b}`, spec);
    if (bothWays) this.links.set(`${b}\u0000${a}`, spec);
  }

  crash(name) {
    this.nodes.get(name).crashed = true;
  }

  callAt(when, fn) {
    this.queue.push([Math.max(when, this.now), this.seq++, fn]);
  }

  /** Everything due up to `until`, then the clock stops there. */
  run(until) {
    while (this.queue.size && this.queue.peek()[0] <= until) {
      const [when, , fn] = this.queue.pop();
      this.now = when;
      fn();
    }
    this.now = Math.max(this.now, until);
  }

  /** fn(core, now) from outside (a user's command), then what it queued is sent. */
  do(name, fn) {
    const node = this.nodes.get(name);
    const result = fn(node.core, this.now);
    this.pump(node);
    return result;
  }

  events(name, kind = null) {
    return this.nodes.get(name).events.map(([, e]) => e).filter((e) => !kind || e.kind === kind);
  }

  pump(node, fired = false) {
    if (node.crashed) return;
    const core = node.core;
    for (const [peer, text] of core.messagesToSend()) this.send(node.name, peer, text);
    for (let ev = core.nextEvent(); ev !== null; ev = core.nextEvent()) {
      node.events.push([this.now, ev]);
    }
    const when = core.getTimer();
    if (fired && when !== null && when <= this.now) {
      throw new Error(`${node.name}: getTimer() is still due after handleTimer(${this.now})`);
    }
    if (when !== null && this.timers.get(node.name) !== when) {
      this.timers.set(node.name, when);
      this.callAt(when, () => this.fire(node, when));
    }
  }

  fire(node, when) {
    if (node.crashed || this.timers.get(node.name) !== when) return; // stale: the timer moved
    this.timers.delete(node.name);
    const due = node.core.getTimer();
    if (due !== null && due <= this.now) {
      node.core.handleTimer(this.now);
      this.pump(node, true);
    } else this.pump(node);
  }

  send(src, dst, text) {
    const target = this.nodes.get(dst);
    if (target === undefined) return;
    const spec = this.links.get(`${src}\u0000${dst}`) ?? this.default;
    this.callAt(this.now + spec.delay, () => this.deliver(src, target, text));
  }

  deliver(src, node, text) {
    if (node.crashed) return;
    if (this.spy) this.spy(src, node.name, text);
    node.core.receive(src, text, this.now);
    this.pump(node);
  }
}
