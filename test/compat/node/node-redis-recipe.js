'use strict';
// node-redis (npm "redis") with the redis.io lock recipe: SET key token NX PX
// ttl to take, compare-and-delete to release and compare-and-pexpire to
// extend, as scripts registered with defineScript (EVALSHA, then EVAL on
// NOSCRIPT). node-redis 5 speaks RESP2 by default; redis6-recipe.js runs the
// same with node-redis 6, which defaults to RESP3 (HELLO 3).
const crypto = require('crypto');
const c = require('./common');

const keyAndArgs = (parser, key, ...args) => {
  parser.pushKey(key);
  for (const a of args) parser.push(String(a));
};

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

// program returns the contract's functions with the node-redis module redis.
function program({ createClient, defineScript }) {
  const script = (SCRIPT) => defineScript({
    NUMBER_OF_KEYS: 1,
    SCRIPT,
    parseCommand: keyAndArgs,
    transformReply: (reply) => reply,
  });
  const scripts = { releaseLock: script(RELEASE), extendLock: script(EXTEND) };

  async function connect(addr) {
    const client = createClient({
      url: `redis://${addr}`,
      scripts,
      // No reconnecting: a lost proxy connection fails the program instead of
      // hanging it.
      socket: { reconnectStrategy: false },
    });
    client.on('error', (err) => {
      console.error(`client error: ${err.message}`);
    });
    await client.connect();
    return client;
  }

  const token = () => crypto.randomBytes(16).toString('hex');
  const nxPX = (ms) => ({ condition: 'NX', expiration: { type: 'PX', value: ms } });

  async function contend(addr, log, rounds, worker) {
    const client = await connect(addr);
    try {
      for (let n = 0; n < rounds; n++) {
        const me = token();
        while ((await client.set(c.CONTENDED, me, nxPX(c.CONTEND_TTL))) !== 'OK') {
          await c.sleep(1 + Math.random() * 4);
        }
        log.enter(n);
        await c.sleep(c.holdMs());
        log.exit(n);
        const released = await client.releaseLock(c.CONTENDED, me);
        if (released !== 1) throw new Error(`round ${n}: release replied ${c.describe(released)}, expected 1`);
      }
    } finally {
      client.destroy();
    }
  }

  async function scenario(addr) {
    const client = await connect(addr);
    try {
      const k = c.SCENARIO;
      await client.del(k);
      const mine = token();
      const other = token();
      let r = await client.set(k, mine, nxPX(10000));
      c.check('acquire: SET NX PX replies OK', r === 'OK', r);
      r = await client.extendLock(k, mine, 30000);
      c.check('extend by the owner replies 1', r === 1, r);
      r = await client.pTTL(k);
      c.check('PTTL after the extend is above the first TTL', r > 10000 && r <= 30000, r);
      r = await client.set(k, other, nxPX(10000));
      c.check('a second owner cannot take it (null)', r === null, r);
      r = await client.releaseLock(k, other);
      c.check('release with another token is refused (0)', r === 0, r);
      r = await client.extendLock(k, other, 30000);
      c.check('extend with another token is refused (0)', r === 0, r);
      r = await client.get(k);
      c.check('the owner still holds it', r === mine, r);
      r = await client.releaseLock(k, mine);
      c.check('release by the owner replies 1', r === 1, r);
      r = await client.get(k);
      c.check('released: GET is null', r === null, r);
      r = await client.releaseLock(k, mine);
      c.check('a second release replies 0', r === 0, r);
      r = await client.set(k, other, nxPX(10000));
      c.check('free again: another owner takes it', r === 'OK', r);
      r = await client.releaseLock(k, other);
      c.check('and releases it', r === 1, r);
    } finally {
      client.destroy();
    }
  }

  return { contend, scenario };
}

module.exports = { program };
if (require.main === module) c.main(program(require('redis')));
