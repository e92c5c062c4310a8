// Runs store calls on a reference hub store and prints what each returned.
//
//   node tests/reference_calls.mjs HUB_DIR DB_PATH < calls.json > results.json
//
// HUB_DIR is a reference store's hub/ folder (../shared/reference/setup.sh DIR 10.17.4).
// calls.json is an array of [name, ...arguments] with names of the store's methods (the
// reflexion, message and assign calls in `allowed`); the output is the array of their
// return values, in order (undefined as null).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [hubDir, dbPath] = process.argv.slice(2);
const { createStore } = await import(pathToFileURL(join(hubDir, "store.mjs")).href);
const calls = JSON.parse(readFileSync(0, "utf8"));
const allowed = new Set([
  "addReflexion", "getReflexion", "listReflexion", "patchReflexion", "deleteReflexion",
  "auditLog", "getMessage", "pollForAgent", "sweepExpired", "getDeadLetters",
  "createAssign", "getAssign", "listAssigns", "updateAssignStatus", "retryAssign",
]);
const store = createStore(dbPath);
const results = [];
try {
  for (const [name, ...args] of calls) {
    if (!allowed.has(name)) throw new Error(`not an allowed call: ${name}`);
    const value = store[name](...args);
    results.push(value === undefined ? null : value);
  }
} finally {
  store.close();
}
process.stdout.write(JSON.stringify(results));
