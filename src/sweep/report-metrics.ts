// What `sweep report` can compare. Plain data, no recipe or tfjs import, so that the sweep command builds its --help
// from it before anything heavy loads.

/** What the report compares (fields of compare.ts's RunSummary) and which way is better. */
export const REPORT_METRICS = {
  finalValLoss: { title: 'final validation loss (nats/token)', higherIsBetter: false },
  bestValLoss: { title: 'best validation loss (nats/token)', higherIsBetter: false },
  finalValBpb: { title: 'final validation bits per byte', higherIsBetter: false },
  finalValPpl: { title: 'final validation perplexity', higherIsBetter: false },
  finalValAcc: { title: 'final validation top-1 accuracy', higherIsBetter: true },
} as const;
export type ReportMetric = keyof typeof REPORT_METRICS;
