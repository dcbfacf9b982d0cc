'use strict';
// Shared by the compatibility programs in this folder: argument handling,
// the holders' log and the scenario's check lines. Each program follows the
// contract in test/compat_test.go:
//
//	node <program>.js contend ADDR LOGFILE ROUNDS WORKER
//	node <program>.js scenario ADDR
//	node <program>.js suite ADDR LOGFILE ROUNDS WORKERS

const fs = require('fs');

const CONTENDED = 'compat:contended';
const SCENARIO = 'compat:scenario';
// Lock TTL while contending (the contract's 10 s: far longer than a holding,
// so a lock only ever ends by its release).
const CONTEND_TTL = 10000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// holdMs is how long a worker holds the lock: 1–5 ms.
const holdMs = () => 1 + Math.floor(Math.random() * 5);

// hostPort splits "host:port".
function hostPort(addr) {
  const i = addr.lastIndexOf(':');
  if (i < 0) throw new Error(`address ${addr} is not host:port`);
  return { host: addr.slice(0, i), port: Number(addr.slice(i + 1)) };
}

// holdersLog appends "enter W-n" / "exit W-n" lines, one write each, to a
// file opened for appending, so that concurrent workers' lines interleave
// whole and in the order they were written.
function holdersLog(path, worker) {
  const fd = fs.openSync(path, 'a');
  return {
    enter(n) { fs.writeSync(fd, `enter ${worker}-${n}\n`); },
    exit(n) { fs.writeSync(fd, `exit ${worker}-${n}\n`); },
    close() { fs.closeSync(fd); },
  };
}

// check records one scenario check: prints "ok NAME" or throws with the name
// and what was seen instead.
function check(name, ok, got) {
  if (!ok) {
    const detail = got === undefined ? '' : `: got ${describe(got)}`;
    throw new Error(`check "${name}" failed${detail}`);
  }
  console.log(`ok ${name}`);
}

// rejects runs fn and returns what it threw (printing "ok NAME"), or fails
// the check when it resolved.
async function rejects(name, fn) {
  let value;
  try {
    value = await fn();
  } catch (err) {
    console.log(`ok ${name}`);
    return err;
  }
  check(name, false, value);
  return undefined;
}

function describe(v) {
  if (v instanceof Error) return `${v.name}: ${v.message}`;
  try {
    return JSON.stringify(v);
  } catch {
    return String(v);
  }
}

// errorText describes an error with the per-server errors that redlock-style
// libraries keep in their attempts, so a failure shows what the proxy said.
async function errorText(err) {
  if (!(err instanceof Error)) return describe(err);
  let text = `${err.name}: ${err.message}`;
  if (Array.isArray(err.attempts)) {
    for (const attempt of err.attempts) {
      const stats = await attempt;
      if (stats && stats.votesAgainst instanceof Map) {
        for (const e of stats.votesAgainst.values()) text += `\n  vote against: ${describe(e)}`;
      }
    }
  }
  return text;
}

// suite runs workers contend calls at once on the event loop, worker w
// through addrs[w % addrs.length], then the scenario through addrs[0],
// whatever the workers did, so that one run reports both. Each contend call
// makes its own client: the proxy sees as many clients as it did processes,
// and node starts once rather than once per worker.
async function suite({ contend, scenario }, addrs, logPath, rounds, workers) {
  const results = await Promise.allSettled(Array.from({ length: workers }, async (_, w) => {
    const log = holdersLog(logPath, String(w));
    try {
      await contend(addrs[w % addrs.length], log, rounds, String(w));
    } finally {
      log.close();
    }
  }));
  let failed = 0;
  for (const [w, r] of results.entries()) {
    if (r.status === 'rejected') {
      failed++;
      console.error(`FAIL worker ${w}: ${await errorText(r.reason)}`);
    }
  }
  await scenario(addrs[0]);
  if (failed > 0) throw new Error(`${failed} of ${workers} workers failed`);
}

// main runs the program's contend, scenario or suite with the contract's
// arguments, exits 0 on success and 1 (after printing why) otherwise.
// contend(addr, log, rounds, worker) and scenario(addr) are async.
function main({ contend, scenario }) {
  const [mode, addr, ...rest] = process.argv.slice(2);
  let run;
  if (mode === 'contend' && rest.length === 3) {
    const [logPath, rounds, worker] = rest;
    run = async () => {
      const log = holdersLog(logPath, worker);
      try {
        await contend(addr, log, Number(rounds), worker);
      } finally {
        log.close();
      }
    };
  } else if (mode === 'scenario' && rest.length === 0 && addr) {
    run = () => scenario(addr);
  } else if (mode === 'suite' && rest.length === 3) {
    const [logPath, rounds, workers] = rest;
    run = () => suite({ contend, scenario }, addr.split(','), logPath, Number(rounds), Number(workers));
  } else {
    console.error('usage: contend ADDR LOGFILE ROUNDS WORKER | scenario ADDR | suite ADDR LOGFILE ROUNDS WORKERS');
    process.exit(2);
  }
  run().then(
    () => process.exit(0),
    async (err) => {
      console.error(`FAIL ${await errorText(err)}`);
      process.exit(1);
    },
  );
}

module.exports = {
  CONTENDED, SCENARIO, CONTEND_TTL, sleep, holdMs, hostPort, holdersLog, check, rejects, describe, errorText, main,
};
