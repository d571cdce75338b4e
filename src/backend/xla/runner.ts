// The Node side of the jax process (runner.py beside this file; its header documents the protocol): one child
// process per executor, requests answered in order. No tfjs: arrays go as typed arrays.
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import * as path from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';

export type ArrayDtype = 'float32' | 'int32' | 'bool';

/** A host array as the protocol sends it (bool as one byte per element). */
export interface HostArray {
  dtype: ArrayDtype;
  shape: number[];
  data: Float32Array | Int32Array | Uint8Array;
}

export interface RunnerHello {
  jax: string;
  jaxlib: string;
  platform: string;
  device: string;
  /** This process's devices, its index among the processes and the devices of all of them (devices.py). */
  devices?: number;
  processIndex?: number;
  deviceCount?: number;
}

export const RUNNER_SCRIPT = path.join(path.dirname(fileURLToPath(import.meta.url)), 'runner.py');

/** A number of a reply header: the runner sends NaN and the infinities as the strings nan, inf, -inf (JSON has none). */
export function replyNumber(value: unknown): number {
  if (typeof value === 'number') return value;
  return value === 'inf' ? Infinity : value === '-inf' ? -Infinity : NaN;
}

const ITEM_BYTES: Record<ArrayDtype, number> = { float32: 4, int32: 4, bool: 1 };
const elements = (shape: number[]) => shape.reduce((a, b) => a * b, 1);

type Reply = { header: Record<string, unknown>; arrays: HostArray[] };

export class XlaRunner {
  private readonly pending: Array<{ resolve: (r: Reply) => void; reject: (e: Error) => void }> = [];
  private buffered: Buffer = Buffer.alloc(0);
  private stderrTail = '';
  private exited: Error | null = null;

  private constructor(private readonly child: ChildProcessByStdio<Writable, Readable, Readable>) {
    child.stdout.on('data', (chunk: Buffer) => {
      try {
        this.receive(chunk);
      } catch (err) {
        // A reply that cannot be read leaves the stream out of step: nothing after it can be trusted.
        this.exited = new Error(`xla runner: unreadable reply (${(err as Error).message})`);
        for (const p of this.pending.splice(0)) p.reject(this.exited);
        child.kill('SIGKILL');
      }
    });
    child.stderr.on('data', (chunk: Buffer) => {
      this.stderrTail = (this.stderrTail + chunk.toString()).slice(-4000);
    });
    child.on('exit', (code, signal) => {
      const lines = this.stderrTail
        .trim()
        .split('\n')
        .filter((l) => l.trim())
        .slice(-3)
        .join(' | ');
      this.exited = new Error(`xla runner (${RUNNER_SCRIPT}) exited (${signal ?? `code ${code}`})${lines ? `: ${lines}` : ''}`);
      for (const p of this.pending.splice(0)) p.reject(this.exited);
    });
    child.on('error', (err) => {
      this.exited = new Error(`xla runner: ${err.message}`);
      for (const p of this.pending.splice(0)) p.reject(this.exited);
    });
  }

  /** Starts runner.py with `python` (an interpreter with jax); env adds to this process's environment. */
  static async start(python: string, env: Record<string, string> = {}): Promise<{ runner: XlaRunner; hello: RunnerHello }> {
    const child = spawn(python, [RUNNER_SCRIPT], { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, TF_CPP_MIN_LOG_LEVEL: '2', ...env } });
    const runner = new XlaRunner(child);
    const hello = (await runner.request({ op: 'hello' })).header as unknown as RunnerHello;
    return { runner, hello };
  }

  /** Sends one request and waits for its reply; a reply with an error rejects with it. */
  async request(header: Record<string, unknown>, arrays: readonly HostArray[] = []): Promise<Reply> {
    if (this.exited) throw this.exited;
    for (const a of arrays) {
      if (a.data.length !== elements(a.shape)) throw new Error(`xla runner: an array of shape [${a.shape}] has ${a.data.length} values`);
    }
    const body = Buffer.from(JSON.stringify({ ...header, arrays: arrays.map((a) => ({ dtype: a.dtype, shape: a.shape })) }));
    const length = Buffer.alloc(4);
    length.writeUInt32LE(body.length);
    const reply = new Promise<Reply>((resolve, reject) => this.pending.push({ resolve, reject }));
    this.child.stdin.write(length);
    this.child.stdin.write(body);
    for (const a of arrays) this.child.stdin.write(Buffer.from(a.data.buffer, a.data.byteOffset, a.data.byteLength));
    const { header: answer, arrays: out } = await reply;
    if (typeof answer.error === 'string') throw new Error(`xla runner: ${answer.error}`);
    return { header: answer, arrays: out };
  }

  private receive(chunk: Buffer): void {
    this.buffered = this.buffered.length ? Buffer.concat([this.buffered, chunk]) : chunk;
    for (;;) {
      if (this.buffered.length < 4) return;
      const length = this.buffered.readUInt32LE(0);
      if (this.buffered.length < 4 + length) return;
      const header = JSON.parse(this.buffered.subarray(4, 4 + length).toString()) as Record<string, unknown> & {
        arrays?: Array<{ dtype: ArrayDtype; shape: number[] }>;
      };
      const specs = header.arrays ?? [];
      const total = specs.reduce((n, s) => n + elements(s.shape) * ITEM_BYTES[s.dtype], 0);
      if (this.buffered.length < 4 + length + total) return;
      let offset = 4 + length;
      const arrays = specs.map((s) => {
        const bytes = elements(s.shape) * ITEM_BYTES[s.dtype];
        const copy = new Uint8Array(this.buffered.subarray(offset, offset + bytes));
        offset += bytes;
        const data = s.dtype === 'float32' ? new Float32Array(copy.buffer) : s.dtype === 'int32' ? new Int32Array(copy.buffer) : copy;
        return { dtype: s.dtype, shape: s.shape, data };
      });
      this.buffered = this.buffered.subarray(offset);
      this.pending.shift()?.resolve({ header, arrays });
    }
  }

  /** Asks the process to end and waits for it (killed if it does not answer). */
  async close(): Promise<void> {
    if (this.exited) return;
    const ended = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    try {
      await this.request({ op: 'exit' });
    } catch {
      this.child.kill('SIGKILL');
    }
    this.child.stdin.end();
    await ended;
  }
}
