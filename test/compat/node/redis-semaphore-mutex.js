'use strict';
// redis-semaphore 5.8.0 Mutex with one ioredis client: acquire (SET
// mutex:<key> id PX ttl NX, retried every retryInterval), its refresh timer
// and release (scripts: EVALSHA, then EVAL on NOSCRIPT). The library prefixes
// the key: the lock "compat:scenario" is the Redis key "mutex:compat:scenario".
const Redis = require('ioredis');
const { Mutex, TimeoutError } = require('redis-semaphore');
const c = require('./common');

function connect(addr) {
  const { host, port } = c.hostPort(addr);
  return new Redis({ host, port, retryStrategy: () => null, maxRetriesPerRequest: 0 });
}

// The library calls onLockLost when a refresh finds the lock gone (or fails).
function onLockLost(err) {
  console.error(`FAIL lock lost: ${c.describe(err)}`);
  process.exit(1);
}

async function contend(addr, log, rounds) {
  const client = connect(addr);
  try {
    for (let n = 0; n < rounds; n++) {
      // Its retries: every 5 ms for up to 60 s.
      const mutex = new Mutex(client, c.CONTENDED, {
        lockTimeout: c.CONTEND_TTL, acquireTimeout: 60000, retryInterval: 5, onLockLost,
      });
      await mutex.acquire();
      log.enter(n);
      await c.sleep(c.holdMs());
      log.exit(n);
      await mutex.release();
    }
  } finally {
    client.disconnect();
  }
}

async function scenario(addr) {
  const client = connect(addr);
  const key = `mutex:${c.SCENARIO}`;
  const get = () => client.get(key);
  // A Mutex that claims to hold the lock under identifier: tryAcquire() then
  // runs the refresh script (ownership check and extend) instead of SET NX.
  const claim = (identifier, lockTimeout = 10000) => new Mutex(client, c.SCENARIO, {
    identifier, acquiredExternally: true, lockTimeout, refreshInterval: 0,
  });
  try {
    await client.del(key);

    // A 2 s lock refreshed every 250 ms by the library's timer, held 2.5 s.
    const mutex = new Mutex(client, c.SCENARIO, { lockTimeout: 2000, refreshInterval: 250, onLockLost });
    await mutex.acquire();
    c.check('acquire() takes mutex:compat:scenario', mutex.isAcquired && (await get()) === mutex.identifier, await get());
    await c.sleep(2500);
    const ttl = await client.pttl(key);
    c.check('the refresh timer keeps it past its 2 s timeout', mutex.isAcquired && (await get()) === mutex.identifier && ttl > 0, ttl);
    // Stop the timer (its next refresh would set 2 s again), let a refresh
    // in flight land, and extend by hand.
    mutex.stopRefresh();
    await c.sleep(100);
    c.check('tryAcquire() of the owner\'s identifier (refresh script, 10 s) succeeds', await claim(mutex.identifier).tryAcquire());
    const extended = await client.pttl(key);
    c.check('  ... and extends it past 2 s', extended > 2000 && extended <= 10000, extended);

    const second = new Mutex(client, c.SCENARIO, { acquireTimeout: 100, retryInterval: 10 });
    c.check('a second Mutex cannot tryAcquire() while held', (await second.tryAcquire()) === false);
    const err = await c.rejects('a second Mutex\'s acquire() fails while held', () => second.acquire());
    c.check('  ... with TimeoutError', err instanceof TimeoutError, err);

    const stranger = claim('not-the-owner');
    c.check('tryAcquire() of another identifier (refresh script) is refused', (await stranger.tryAcquire()) === false);
    await claim('not-the-owner').release();
    c.check('release() by another identifier leaves it held', (await get()) === mutex.identifier, await get());

    await mutex.release();
    c.check('release() by the owner frees it', !mutex.isAcquired && (await get()) === null, await get());
    c.check('tryAcquire() of the released identifier is refused', (await claim(mutex.identifier).tryAcquire()) === false);
    const again = new Mutex(client, c.SCENARIO, { acquireTimeout: 100, retryInterval: 10 });
    c.check('free again: another Mutex takes it', await again.tryAcquire());
    await again.release();
    c.check('  ... and releases it', (await get()) === null, await get());
  } finally {
    client.disconnect();
  }
}

c.main({ contend, scenario });
