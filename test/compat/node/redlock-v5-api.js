'use strict';
// The contract's contend and scenario for libraries with the node-redlock v5
// API (acquire/extend/release/using, ExecutionError and ResourceLockedError):
// redlock 5.0.0-beta.2 (redlock5.js) and @sesamecare-oss/redlock
// (sesamecare-redlock.js), each with one ioredis client.
const Redis = require('ioredis');
const c = require('./common');

// program returns the contract's functions for a library:
//   Redlock              its Redlock class
//   Lock(redlock, resources, value)   a lock object with another value, to
//                                     release and extend as a non-owner
//   ExecutionError, ResourceLockedError  its error classes
function program({ Redlock, Lock, ExecutionError, ResourceLockedError }) {
  function connect(addr) {
    const { host, port } = c.hostPort(addr);
    return new Redis({ host, port, retryStrategy: () => null, maxRetriesPerRequest: 0 });
  }

  // watch fails the program on the first server error: the library emits
  // every failed vote as "error" and retries, so without this a refused
  // script would look like a held lock. A ResourceLockedError is a vote
  // against (the resource is held), which is expected.
  function watch(redlock) {
    redlock.on('error', (err) => {
      if (err instanceof ResourceLockedError) return;
      console.error(`FAIL redlock error event: ${c.describe(err)}`);
      process.exit(1);
    });
    return redlock;
  }

  async function contend(addr, log, rounds) {
    const client = connect(addr);
    // Its retries: every 10 ms ± 5 ms, for up to 60 s.
    const redlock = watch(new Redlock([client], { retryCount: 6000, retryDelay: 10, retryJitter: 5 }));
    try {
      for (let n = 0; n < rounds; n++) {
        const lock = await redlock.acquire([c.CONTENDED], c.CONTEND_TTL);
        log.enter(n);
        await c.sleep(c.holdMs());
        log.exit(n);
        await lock.release();
      }
    } finally {
      client.disconnect();
    }
  }

  // refused checks that err is the library's quorum failure caused by the
  // resource being held (ResourceLockedError votes), not by an error reply.
  async function refused(err) {
    c.check('  ... with ExecutionError', err instanceof ExecutionError, err);
    const votes = [];
    for (const attempt of err.attempts) votes.push(...(await attempt).votesAgainst.values());
    c.check('  ... whose votes against are ResourceLockedError', votes.length > 0 && votes.every((v) => v instanceof ResourceLockedError), votes.map(c.describe));
  }

  async function scenario(addr) {
    const client = connect(addr);
    const redlock = watch(new Redlock([client], { retryCount: 10, retryDelay: 50, retryJitter: 10 }));
    const once = { retryCount: 0 };
    const k = c.SCENARIO;
    const [a, b, d] = [`${k}:a`, `${k}:b`, `${k}:c`];
    const get = (key) => client.get(key);
    try {
      await client.del(k, a, b, d);

      let lock = await redlock.acquire([k], 10000);
      c.check('acquire() takes the resource', (await get(k)) === lock.value, await get(k));
      lock = await lock.extend(30000);
      let ttl = await client.pttl(k);
      c.check('extend() pushes the TTL past the first one', ttl > 10000 && ttl <= 30000, ttl);
      await refused(await c.rejects('a second acquire() fails while held', () => redlock.acquire([k], 10000, once)));
      await refused(await c.rejects('release() by a non-owner is refused', () => redlock.release(Lock(redlock, [k], 'not-the-owner'), once)));
      await refused(await c.rejects('extend() by a non-owner is refused', () => redlock.extend(Lock(redlock, [k], 'not-the-owner'), 30000, once)));
      c.check('the owner still holds it', (await get(k)) === lock.value, await get(k));
      await lock.release();
      c.check('release() by the owner frees it', (await get(k)) === null);
      await refused(await c.rejects('a second release() fails', () => redlock.release(Lock(redlock, [k], lock.value), once)));
      lock = await redlock.acquire([k], 10000, once);
      await lock.release();
      c.check('free again: acquire() and release() by another owner', (await get(k)) === null);

      // A multi-resource lock: all keys or none.
      let multi = await redlock.acquire([a, b], 10000);
      c.check('acquire([a, b]) takes both keys', (await get(a)) === multi.value && (await get(b)) === multi.value);
      await refused(await c.rejects('acquire([b]) fails while [a, b] is held', () => redlock.acquire([b], 10000, once)));
      await refused(await c.rejects('acquire([b, c]) fails while [a, b] is held', () => redlock.acquire([b, d], 10000, once)));
      c.check('  ... and leaves c untaken', (await get(d)) === null, await get(d));
      multi = await multi.extend(30000);
      ttl = [await client.pttl(a), await client.pttl(b)];
      c.check('extend() of [a, b] pushes both TTLs', ttl.every((t) => t > 10000 && t <= 30000), ttl);
      await refused(await c.rejects('release() of [a, b] by a non-owner is refused', () => redlock.release(Lock(redlock, [a, b], 'not-the-owner'), once)));
      c.check('  ... and both keys are still held', (await get(a)) === multi.value && (await get(b)) === multi.value);
      await multi.release();
      c.check('release() of [a, b] frees both', (await get(a)) === null && (await get(b)) === null);
      lock = await redlock.acquire([b], 10000, once);
      await lock.release();
      c.check('free again: acquire([b]) and release()', (await get(b)) === null);

      // using(): a 1.5 s lock held for 2 s, kept by its automatic extension
      // (when less than 1 s remains), then released.
      const settings = { automaticExtensionThreshold: 1000 };
      await redlock.using([k], 1500, settings, async (signal) => {
        await c.sleep(2000);
        c.check('using(): the routine runs past the first TTL without abort', !signal.aborted, signal.error);
        const held = await get(k);
        ttl = await client.pttl(k);
        c.check('using(): the lock is still held, extended', held !== null && ttl > 0, { held, ttl });
      });
      c.check('using(): released when the routine returns', (await get(k)) === null);
    } finally {
      client.disconnect();
    }
  }

  return { contend, scenario };
}

module.exports = { program };
