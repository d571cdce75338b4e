// Entry of a data-parallel replica thread (data-parallel.ts). Plain JavaScript so that it loads under
// node, tsx and vitest alike; it registers tsx's loader for this thread and runs the TypeScript replica.
import { register } from 'tsx/esm/api';

register();
await import('./replica.ts');
