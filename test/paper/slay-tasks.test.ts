// The slay-tasks experiment's explanations of a disagreeing cell (src/paper/slay-tasks.ts).
import { describe, expect, it } from 'vitest';
import { explanation } from '../../src/paper/slay-tasks.ts';

describe('slay-tasks explanations', () => {
  it("a task's own difference comes before the mechanism's: Performer's selective_copy miss is the offset every mechanism shares", () => {
    expect(explanation('selective_copy', 'performer')).toMatchObject({
      kind: 'deliberate',
      text: expect.stringContaining('Every mechanism, softmax included'),
    });
    expect(explanation('selective_copy', 'performer')!.text).not.toContain('ReLU');
    expect(explanation('reverse', 'performer')).toMatchObject({ kind: 'protocol-gap', text: expect.stringContaining('ReLU random-feature attention') });
    expect(explanation('reverse', 'softmax')).toBeUndefined();
  });
});
