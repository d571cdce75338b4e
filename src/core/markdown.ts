// Text from files (run names, attention names, error messages, env.json strings) written into Markdown: escaped so
// that it reads as the text it is, never as a heading, a link, a table cell break or raw HTML (which a Markdown
// viewer would render, scripts included).

/**
 * `text` inside a Markdown line (a table cell, a list item, after a label): line breaks become spaces (no block of
 * its own: a heading, a list, a new table row), and each character that could start inline formatting, a link, an
 * HTML tag or an entity, or end a table cell is backslash-escaped (CommonMark lets any ASCII punctuation be escaped
 * so; it then shows as itself). Not for text that starts a line, where `#` or `-` would still begin a block.
 */
export function escapeMarkdown(text: string): string {
  return text.replace(/\s*[\r\n]+\s*/g, ' ').replace(/[\\`*_[\]<>|~&]/g, (c) => `\\${c}`);
}

/** `text` as HTML text content: `&`, `<`, `>` and quotes as entities. */
export function escapeHtml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;');
}
