// Worker thread that runs the official @wandb/sdk for src/telemetry/wandb.ts (plain JavaScript so that it loads
// under node, tsx and vitest alike). Why a worker: the SDK reports upload failures by throwing inside a
// MessagePort listener (an uncaught exception that would end the training process) and installs a SIGINT
// handler that calls process.exit(); inside a worker both only affect the worker.
//
// Protocol: workerData = { sdkUrl, init: { id, project, entity, name, config } }.
//   worker → main: { type: 'ready', url, entity, project } | { type: 'failed', reason } | { type: 'finished' }
//                | { type: 'crashed', reason } | { type: 'sdk-error', text } | { type: 'sdk-log', text }
// After 'failed' or 'crashed' the main thread terminates the worker.
//   main → worker: { type: 'log', row, step } | { type: 'finish', code }
import { parentPort, workerData } from 'node:worker_threads';

// The SDK gives up on a failed upload by printing "Fatal error: …" and dropping the data, without throwing.
// This thread only runs the SDK, so its console is the SDK's: forward it, so that the main thread learns the
// upload is incomplete (and points the user to the replay command) instead of reporting success.
const text = (args) => args.map((a) => (a instanceof Error ? a.message : typeof a === 'string' ? a : JSON.stringify(a))).join(' ');
console.error = (...args) => parentPort.postMessage({ type: 'sdk-error', text: text(args) });
console.log = (...args) => parentPort.postMessage({ type: 'sdk-log', text: text(args) });
// Reported as a message (not by letting the worker die) so that it arrives after the SDK's own error lines.
process.on('uncaughtException', (err) => parentPort.postMessage({ type: 'crashed', reason: err instanceof Error ? err.message : String(err) }));

const { wandb } = await import(workerData.sdkUrl);
let run;
try {
  run = await wandb.init(workerData.init);
  parentPort.postMessage({ type: 'ready', url: run.url(), entity: run.entity, project: run.project });
} catch (err) {
  parentPort.postMessage({ type: 'failed', reason: err instanceof Error ? err.message : String(err) });
}

parentPort.on('message', async (msg) => {
  if (!run) return;
  if (msg.type === 'log') {
    // One row per optimizer step, at W&B step = the optimizer step. The SDK numbers history lines itself (0, 1,
    // …, committing a row when its step is ≥ the lines sent so far, which increasing steps from 0 always are),
    // so a replay of the same records rewrites the same lines instead of appending duplicates.
    run.log(msg.row, msg.step);
  } else if (msg.type === 'finish') {
    await run.finish(msg.code);
    parentPort.postMessage({ type: 'finished' });
  }
});
