'use strict';
// ioredis with the redis.io lock recipe: SET key token NX PX ttl to take,
// a compare-and-delete script to release and a compare-and-pexpire script to
// extend, registered with defineCommand (EVAL on a connection's first call,
// EVALSHA after). ioredis 5 speaks RESP2 (its handshake: CLIENT SETINFO, INFO);
// ioredis6-recipe.js runs the same with ioredis 6, which sends HELLO 3 first.
const crypto = require('crypto');
const c = require('./common');

const RELEASE = `
if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("del", KEYS[1])
else
    return 0
end
`;
const EXTEND = `
if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("pexpire", KEYS[1], ARGV[2])
else
    return 0
end
`;

// program returns the contract's functions with the ioredis module Redis.
function program(Redis) {
  function connect(addr) {
    const { host, port } = c.hostPort(addr);
    // No reconnecting: a lost proxy connection fails the program instead of
    // hanging it.
    const client = new Redis({ host, port, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    client.defineCommand('releaseLock', { numberOfKeys: 1, lua: RELEASE });
    client.defineCommand('extendLock', { numberOfKeys: 1, lua: EXTEND });
    return client;
  }

  const token = () => crypto.randomBytes(16).toString('hex');

  async function contend(addr, log, rounds, worker) {
    const client = connect(addr);
    try {
      for (let n = 0; n < rounds; n++) {
        const me = token();
        while ((await client.set(c.CONTENDED, me, 'NX', 'PX', c.CONTEND_TTL)) !== 'OK') {
          await c.sleep(1 + Math.random() * 4);
        }
        log.enter(n);
        await c.sleep(c.holdMs());
        log.exit(n);
        const released = await client.releaseLock(c.CONTENDED, me);
        if (released !== 1) throw new Error(`round ${n}: release replied ${c.describe(released)}, expected 1`);
      }
    } finally {
      client.disconnect();
    }
  }

  async function scenario(addr) {
    const client = connect(addr);
    try {
      const k = c.SCENARIO;
      await client.del(k);
      const mine = token();
      const other = token();
      let r = await client.set(k, mine, 'NX', 'PX', 10000);
      c.check('acquire: SET NX PX replies OK', r === 'OK', r);
      r = await client.extendLock(k, mine, 30000);
      c.check('extend by the owner replies 1', r === 1, r);
      r = await client.pttl(k);
      c.check('PTTL after the extend is above the first TTL', r > 10000 && r <= 30000, r);
      r = await client.set(k, other, 'NX', 'PX', 10000);
      c.check('a second owner cannot take it (nil)', r === null, r);
      r = await client.releaseLock(k, other);
      c.check('release with another token is refused (0)', r === 0, r);
      r = await client.extendLock(k, other, 30000);
      c.check('extend with another token is refused (0)', r === 0, r);
      r = await client.get(k);
      c.check('the owner still holds it', r === mine, r);
      r = await client.releaseLock(k, mine);
      c.check('release by the owner replies 1', r === 1, r);
      r = await client.get(k);
      c.check('released: GET is nil', r === null, r);
      r = await client.releaseLock(k, mine);
      c.check('a second release replies 0', r === 0, r);
      r = await client.set(k, other, 'NX', 'PX', 10000);
      c.check('free again: another owner takes it', r === 'OK', r);
      r = await client.releaseLock(k, other);
      c.check('and releases it', r === 1, r);
    } finally {
      client.disconnect();
    }
  }

  return { contend, scenario };
}

module.exports = { program };
if (require.main === module) c.main(program(require('ioredis')));
