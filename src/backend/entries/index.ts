// The backends, one line each (src/backend/entry.ts says what an entry declares). The order is the one
// --help and error messages list them in; `auto` goes by priority.
import { cpuBackend } from './cpu.ts';
import { tensorflowBackend } from './tensorflow.ts';
import { wasmBackend } from './wasm.ts';

export const BACKEND_ENTRIES = [tensorflowBackend, wasmBackend, cpuBackend] as const;
