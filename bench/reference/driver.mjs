// agentfootprint's own context ledger over the corpus, as the corpus oracle was made:
// one contextLedger(), each run read from disk (gunzip, JSON.parse) in oracle/runs.jsonl
// order, recordRun(runner) and then recordOutcome(label, runRef); its rows() must equal
// oracle/rows.json, so the time bench/cli.py takes of this process is of the right answer.
//
// Usage: node driver.mjs CORPUS LEDGER_MODULE
//   CORPUS         the corpus folder (runs/, oracle/)
//   LEDGER_MODULE  agentfootprint's contextLedger, bundled from its source by bench/cli.py
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { gunzipSync } from 'node:zlib';
import { isDeepStrictEqual } from 'node:util';

const [corpus, modulePath] = process.argv.slice(2);
if (!corpus || !modulePath) {
  console.error('usage: node driver.mjs CORPUS LEDGER_MODULE');
  process.exit(2);
}
const { contextLedger } = await import(pathToFileURL(resolve(modulePath)).href);

const order = readFileSync(join(corpus, 'oracle', 'runs.jsonl'), 'utf8')
  .split('\n')
  .filter((line) => line.length > 0)
  .map((line) => JSON.parse(line));

const ledger = contextLedger();
let recorded = 0;
for (const { run_id: runId, outcome_label: label } of order) {
  const file = JSON.parse(gunzipSync(readFileSync(join(corpus, 'runs', `${runId}.json.gz`))));
  // The ledger reads the snapshot and the static tool names from the runner; the run
  // file keeps both (static_tool_names is what getUIGroup().extra.toolNames gave).
  const runner = {
    getLastSnapshot: () => file.snapshot,
    getUIGroup: () => ({ extra: { toolNames: file.static_tool_names } }),
  };
  const run = ledger.recordRun(runner);
  if (run) {
    recorded += 1;
    ledger.recordOutcome(label, run.runRef);
  }
}

const expected = JSON.parse(readFileSync(join(corpus, 'oracle', 'rows.json'), 'utf8'));
const rows = ledger.rows();
if (!isDeepStrictEqual(rows, expected)) {
  console.error(`rows differ from oracle/rows.json (${rows.length} rows, expected ${expected.length})`);
  process.exit(1);
}
console.log(`${order.length} runs, ${recorded} recorded, ${rows.length} rows equal to oracle/rows.json`);
