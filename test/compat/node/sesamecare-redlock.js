'use strict';
// @sesamecare-oss/redlock 1.4.0 with one ioredis client: acquire, extend,
// release and using() through its API and its own retries. Its scripts are
// node-redlock's with a leading redis.pcall("SELECT", db), sent through
// ioredis defineCommand (EVAL on a connection's first call, EVALSHA after).
const sesame = require('@sesamecare-oss/redlock');
const c = require('./common');
const { program } = require('./redlock-v5-api');

c.main(program({
  Redlock: sesame.Redlock,
  Lock: (r, resources, value) => new sesame.Lock(r, resources, value, [], Date.now() + 10000),
  ExecutionError: sesame.ExecutionError,
  ResourceLockedError: sesame.ResourceLockedError,
}));
