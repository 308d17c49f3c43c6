// Loaded with `node --require` into every test file of a node:test suite: gives each test and hook
// that sets no timeout of its own NODE_TEST_TIMEOUT_MS. Node 20's --test-timeout would also bound each
// whole test file, so one test that hangs would fail every test after it in that file.
const nodeTest = require('node:test');

const limit = Number(process.env.NODE_TEST_TIMEOUT_MS);

function limitedTest(original) {
  // test([name][, options][, fn]): fill in options.timeout
  const limited = function (...args) {
    const at = args.findIndex((arg) => typeof arg === 'object' && arg !== null);
    if (at >= 0) {
      if (args[at].timeout === undefined) args[at] = { ...args[at], timeout: limit };
    } else {
      const fn = args.findIndex((arg) => typeof arg === 'function');
      args.splice(fn >= 0 ? fn : args.length, 0, { timeout: limit });
    }
    return original.apply(this, args);
  };
  return Object.assign(limited, original); // .skip, .todo, .only
}

function limitedHook(original) {
  // hook(fn[, options])
  return function (fn, options) {
    return original.call(this, fn, { timeout: limit, ...options });
  };
}

if (limit > 0) {
  for (const name of ['it', 'test']) nodeTest[name] = limitedTest(nodeTest[name]);
  for (const name of ['before', 'after', 'beforeEach', 'afterEach']) nodeTest[name] = limitedHook(nodeTest[name]);
}
