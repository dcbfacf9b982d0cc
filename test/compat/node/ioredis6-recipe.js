'use strict';
// ioredis-recipe.js with ioredis 6 (npm "ioredis6", an alias of ioredis@6),
// which defaults to RESP3: HELLO 3, CLIENT SETINFO, INFO on connect.
const c = require('./common');
const { program } = require('./ioredis-recipe');

c.main(program(require('ioredis6')));
