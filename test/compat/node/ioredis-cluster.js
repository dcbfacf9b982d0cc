'use strict';
// ioredis's Cluster client, unchanged, with the redis.io lock recipe of
// ioredis-recipe.js, through lockproxy in cluster mode: ADDR is one
// instance (for suite, the workers' seeds in turn), from which the client
// learns the others (CLUSTER SLOTS), and each command goes to the instance
// that its key's slot maps to.
const c = require('./common');
const { program } = require('./ioredis-recipe');
const Redis = require('ioredis');

// Cluster stands where ioredis-recipe.js builds a Redis: a constructor
// that returns the object it made is what `new` gives.
function Cluster({ host, port }) {
  return new Redis.Cluster([{ host, port }], {
    // No reconnecting: a lost connection fails the program instead of
    // hanging it.
    clusterRetryStrategy: () => null,
    redisOptions: { maxRetriesPerRequest: 0 },
  });
}

if (require.main === module) c.main(program(Cluster));
