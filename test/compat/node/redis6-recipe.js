'use strict';
// node-redis-recipe.js with node-redis 6 (npm "redis6", an alias of redis@6),
// which defaults to RESP3: HELLO 3 on connect.
const c = require('./common');
const { program } = require('./node-redis-recipe');

c.main(program(require('redis6')));
