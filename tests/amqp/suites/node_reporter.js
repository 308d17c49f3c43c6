// A node:test reporter (`--test-reporter=<this file>`) that appends one JSON line per test started and
// finished to the file NODE_TEST_EVENTS, synchronously, and prints a dot or an X per finished test.
// Node's junit reporter writes its file only when the run ends, which --test-force-exit (needed: a failed test can leave a socket open that
// keeps its file's process alive) cuts short. The runner rebuilds describe() paths from the starts.
const fs = require('node:fs');

const events = process.env.NODE_TEST_EVENTS;

function why(data) {
  const error = data.details?.error;
  const cause = error?.cause;
  const reason = cause && typeof cause === 'object' ? cause.message : (cause ?? error?.message ?? '');
  return String(reason);
}

module.exports = async function* report(source) {
  for await (const { type, data } of source) {
    let line;
    if (type === 'test:start') line = { nesting: data.nesting, name: data.name, status: 'started' };
    else if (type === 'test:pass' || type === 'test:fail') {
      const failed = type === 'test:fail';
      const status = failed ? 'failed' : data.skip || data.todo ? 'skipped' : 'passed';
      line = { nesting: data.nesting, name: data.name, status, message: failed ? why(data) : '' };
      yield failed ? 'X' : '.';
    } else continue;
    fs.appendFileSync(events, `${JSON.stringify(line)}\n`);
  }
};
