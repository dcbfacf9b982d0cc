'use strict';
// node-redlock 5.0.0-beta.2 (npm "redlock5", an alias of redlock@5.0.0-beta.2)
// with one ioredis client: acquire, extend, release and using() through its
// API and its own retries. Its scripts are node-redlock 4's, re-indented
// (EVALSHA, then EVAL on NOSCRIPT).
const redlock = require('redlock5');
const c = require('./common');
const { program } = require('./redlock-v5-api');

c.main(program({
  Redlock: redlock.default,
  Lock: (r, resources, value) => new redlock.Lock(r, resources, value, [], Date.now() + 10000),
  ExecutionError: redlock.ExecutionError,
  ResourceLockedError: redlock.ResourceLockedError,
}));
