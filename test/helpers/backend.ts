// Which backend a suite's numerical checks run on. The default vitest project runs them on the given
// fallback (cpu, the reference, or wasm); the `tensorflow` project (vitest.config.ts) runs the same
// suites with SLAYFORMER_TEST_BACKEND=tensorflow, on the native backend.

export function testBackend(fallback: 'cpu' | 'wasm' = 'cpu'): string {
  return process.env.SLAYFORMER_TEST_BACKEND ?? fallback;
}

/** For suites that loop over backends: cpu and wasm, or only the one the project names. */
export function testBackends(): string[] {
  const only = process.env.SLAYFORMER_TEST_BACKEND;
  return only ? [only] : ['cpu', 'wasm'];
}
