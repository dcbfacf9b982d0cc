'use strict';
// node-redlock 4.2.0 (npm "redlock") with one ioredis client: lock, extend
// and unlock through its API and its own retries. Every operation is one of
// its multi-key scripts (EVALSHA, then EVAL on NOSCRIPT), also for a single
// resource.
const Redis = require('ioredis');
const Redlock = require('redlock');
const c = require('./common');

function connect(addr) {
  const { host, port } = c.hostPort(addr);
  return new Redis({ host, port, retryStrategy: () => null, maxRetriesPerRequest: 0 });
}

// watch fails the program on the first error a server reply carried:
// redlock 4 only emits them ("clientError") and counts them as a vote
// against, so without this a refused script would look like a held lock.
function watch(redlock) {
  redlock.on('clientError', (err) => {
    console.error(`FAIL redlock clientError: ${err.message}`);
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
      const lock = await redlock.lock(c.CONTENDED, c.CONTEND_TTL);
      log.enter(n);
      await c.sleep(c.holdMs());
      log.exit(n);
      await lock.unlock();
    }
  } finally {
    client.disconnect();
  }
}

const isLockError = (err) => err instanceof Redlock.LockError;

async function scenario(addr) {
  const client = connect(addr);
  const redlock = watch(new Redlock([client], { retryCount: 10, retryDelay: 50, retryJitter: 10 }));
  // Gives up after one attempt (retryCount 0), for the checks that must fail.
  const once = watch(new Redlock([client], { retryCount: 0 }));
  const k = c.SCENARIO;
  const [a, b, d] = [`${k}:a`, `${k}:b`, `${k}:c`];
  try {
    await client.del(k, a, b, d);

    let lock = await redlock.lock(k, 10000);
    c.check('lock() takes the resource', (await client.get(k)) === lock.value, await client.get(k));
    lock = await lock.extend(30000);
    let ttl = await client.pttl(k);
    c.check('extend() pushes the TTL past the first one', ttl > 10000 && ttl <= 30000, ttl);
    let err = await c.rejects('a second lock() fails while held', () => once.lock(k, 10000));
    c.check('  ... with LockError', isLockError(err), err);
    const stranger = new Redlock.Lock(once, k, 'not-the-owner', Date.now() + 10000);
    err = await c.rejects('unlock() by a non-owner is refused', () => stranger.unlock());
    c.check('  ... with LockError', isLockError(err), err);
    err = await c.rejects('extend() by a non-owner is refused', () => new Redlock.Lock(once, k, 'not-the-owner', Date.now() + 10000).extend(30000));
    c.check('  ... with LockError', isLockError(err), err);
    c.check('the owner still holds it', (await client.get(k)) === lock.value, await client.get(k));
    await lock.unlock();
    c.check('unlock() by the owner frees it', (await client.get(k)) === null);
    err = await c.rejects('a second unlock() fails', () => new Redlock.Lock(once, k, lock.value, Date.now() + 10000).unlock());
    c.check('  ... with LockError', isLockError(err), err);
    lock = await once.lock(k, 10000);
    await lock.unlock();
    c.check('free again: lock() and unlock() by another owner', (await client.get(k)) === null);

    // A multi-resource lock: all keys or none.
    let multi = await redlock.lock([a, b], 10000);
    c.check('lock([a, b]) takes both keys', (await client.get(a)) === multi.value && (await client.get(b)) === multi.value);
    err = await c.rejects('lock(b) fails while [a, b] is held', () => once.lock(b, 10000));
    c.check('  ... with LockError', isLockError(err), err);
    err = await c.rejects('lock([b, c]) fails while [a, b] is held', () => once.lock([b, d], 10000));
    c.check('  ... with LockError', isLockError(err), err);
    c.check('  ... and leaves c untaken', (await client.get(d)) === null, await client.get(d));
    multi = await multi.extend(30000);
    ttl = [await client.pttl(a), await client.pttl(b)];
    c.check('extend() of [a, b] pushes both TTLs', ttl.every((t) => t > 10000 && t <= 30000), ttl);
    err = await c.rejects('unlock() of [a, b] by a non-owner is refused', () => new Redlock.Lock(once, [a, b], 'not-the-owner', Date.now() + 10000).unlock());
    c.check('  ... with LockError', isLockError(err), err);
    c.check('  ... and both keys are still held', (await client.get(a)) === multi.value && (await client.get(b)) === multi.value);
    await multi.unlock();
    c.check('unlock() of [a, b] frees both', (await client.get(a)) === null && (await client.get(b)) === null);
    lock = await once.lock(b, 10000);
    await lock.unlock();
    c.check('free again: lock(b) and unlock()', (await client.get(b)) === null);
  } finally {
    client.disconnect();
  }
}

c.main({ contend, scenario });
