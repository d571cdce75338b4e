// The table model and its renderers: a table is its cells once (`text` as shown, `raw` for a spreadsheet), and every
// file of a report renders the same model, so that report.md, index.html, the CSV and LaTeX files cannot disagree.
import { escapeHtml, escapeMarkdown } from '../core/markdown.ts';

/**
 * A table as cells: `text` for markdown, HTML and LaTeX (thousands separators, ±), `raw` for CSV (plain numbers, empty
 * when unknown). One model, four renderings, so the files cannot disagree.
 */
export interface Table {
  header: string[];
  /** Right-aligned (numbers) or left-aligned columns. */
  right: boolean[];
  rows: { text: string[]; raw: (string | number | null)[] }[];
}

export interface Column<T> {
  title: string;
  right?: boolean;
  text: (item: T) => string;
  raw?: (item: T) => string | number | null;
}

export function makeTable<T>(columns: Column<T>[], items: T[]): Table {
  return {
    header: columns.map((c) => c.title),
    right: columns.map((c) => c.right ?? false),
    rows: items.map((item) => ({ text: columns.map((c) => c.text(item)), raw: columns.map((c) => (c.raw ? c.raw(item) : c.text(item))) })),
  };
}

export function selectColumns(table: Table, keep: (header: string) => boolean): Table {
  const kept = table.header.map((h, i) => (keep(h) ? i : -1)).filter((i) => i >= 0);
  return {
    header: kept.map((i) => table.header[i]),
    right: kept.map((i) => table.right[i]),
    rows: table.rows.map((r) => ({ text: kept.map((i) => r.text[i]), raw: kept.map((i) => r.raw[i]) })),
  };
}

export function withoutColumns(table: Table, drop: ReadonlySet<string>): Table {
  return selectColumns(table, (h) => !drop.has(h));
}

/**
 * With two or more rows, the columns whose cell is the same in every row (params, tokens, n …) leave the table and are
 * said once (`constants`, title and cell); a column empty in every row (no p without two seeds) just leaves. The first
 * column (the row's name) always stays.
 */
export function factorConstants(table: Table): { table: Table; constants: { title: string; text: string }[] } {
  if (table.rows.length < 2) return { table, constants: [] };
  const constant = table.header.map((_, i) => i > 0 && table.rows.every((r) => r.text[i] === table.rows[0].text[i]));
  return {
    table: selectColumns(table, (h) => !constant[table.header.indexOf(h)]),
    constants: table.header.flatMap((title, i) => (constant[i] && !['', '—'].includes(table.rows[0].text[i]) ? [{ title, text: table.rows[0].text[i] }] : [])),
  };
}

/** "Same for every group: n 3 · params 12,345 · tokens 3,000." ('' when nothing is). */
export function constantsLine(constants: { title: string; text: string }[], what = 'group'): string {
  return constants.length === 0 ? '' : `Same for every ${what}: ${constants.map((c) => `${c.title} ${c.text}`).join(' · ')}.`;
}

/** Cells are escaped (escapeMarkdown): a run's or mechanism's name is shown as text, never as a link or HTML. */
export function markdownTable(table: Table): string {
  const line = (cells: string[]) => `| ${cells.map(escapeMarkdown).join(' | ')} |`;
  return [line(table.header), `|${table.right.map((r) => (r ? '---:' : '---')).join('|')}|`, ...table.rows.map((r) => line(r.text))].join('\n');
}

/** A whole cell that is a number as a spreadsheet reads one ("-0.5", "1e-3"): left as it is. */
const NUMBER_TEXT = /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i;

/**
 * RFC 4180: a field with a comma, quote or line break is quoted, its quotes doubled. A text cell that a spreadsheet
 * would run as a formula (starting with =, +, -, @, a tab or a carriage return: a run, recipe or mechanism name, a
 * backend or commit from env.json) gets a leading single quote, OWASP's rule for CSV injection; numbers stay numbers.
 */
export function csvTable(table: Table): string {
  const field = (v: string | number | null) => {
    const plain = v === null ? '' : String(v);
    const text = typeof v === 'string' && /^[=+\-@\t\r]/.test(v) && !NUMBER_TEXT.test(v) ? `'${v}` : plain;
    return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
  };
  return [table.header, ...table.rows.map((r) => r.raw)].map((cells) => cells.map(field).join(',')).join('\r\n') + '\r\n';
}

/** A booktabs table (\\usepackage{booktabs}) with the shown cells, LaTeX's special characters escaped. */
export function latexTable(table: Table, caption: string): string {
  const escape = (text: string) =>
    text
      .replace(/[\\{}$&#^_%~]/g, (c) => ({ '\\': '\\textbackslash{}', '~': '\\textasciitilde{}', '^': '\\textasciicircum{}' })[c] ?? `\\${c}`)
      .replace(/±/g, '$\\pm$')
      .replace(/−/g, '$-$')
      .replace(/Δ/g, '$\\Delta$')
      .replace(/·/g, '$\\cdot$')
      .replace(/×/g, '$\\times$')
      .replace(/⚠ /g, '');
  const row = (cells: string[]) => `${cells.map(escape).join(' & ')} \\\\`;
  return [
    '\\begin{table}',
    '\\centering',
    '\\small',
    `\\caption{${escape(caption)}}`,
    `\\begin{tabular}{${table.right.map((r) => (r ? 'r' : 'l')).join('')}}`,
    '\\toprule',
    row(table.header),
    '\\midrule',
    ...table.rows.map((r) => row(r.text)),
    '\\bottomrule',
    '\\end{tabular}',
    '\\end{table}',
    '',
  ].join('\n');
}

export function htmlTable(table: Table): string {
  const align = table.right.map((r) => (r ? 'right' : 'left'));
  const cells = (tag: string, r: string[]) => r.map((c, i) => `<${tag} style="text-align:${align[i]}">${escapeHtml(c)}</${tag}>`).join('');
  return `<table><thead><tr>${cells('th', table.header)}</tr></thead><tbody>${table.rows.map((r) => `<tr>${cells('td', r.text)}</tr>`).join('')}</tbody></table>`;
}
