// joinCluster refuses a cluster that names no server for this rank as it is, on any backend: the spec's own error,
// never a join failure that blames the port of a rank outside the cluster ("could not start its server on undefined").
import { describe, expect, it } from 'vitest';
import { joinCluster } from '../../src/backend/collective.ts';

describe('joinCluster', () => {
  it("refuses a rank outside the cluster with the spec's error, before the backend or any server", () => {
    expect(() => joinCluster({ rank: 2, addresses: ['127.0.0.1:5000', '127.0.0.1:5001'] })).toThrow(/^cluster: rank 2 is not one of the 2 ranks 0–1$/);
    expect(() => joinCluster({ rank: 0, addresses: ['127.0.0.1:5000'] }, { joinTimeoutS: 0 })).toThrow(/^cluster: the join timeout 0 s is not a positive/);
  });
});
