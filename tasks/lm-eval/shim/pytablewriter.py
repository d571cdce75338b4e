"""Stand-in for pytablewriter (not on the package mirror): the two writers lm-evaluation-harness's command line uses
to print its results, as plain Markdown. Copied into .venv-lm-eval by `npm run setup:lm-eval` (docs/evaluation.md)."""


class MarkdownTableWriter:
    def __init__(self):
        self.headers = []
        self.value_matrix = []

    def dumps(self):
        rows = [[str(cell) for cell in self.headers]] + [[str(cell) for cell in row] for row in self.value_matrix]
        widths = [max(len(row[c]) for row in rows if c < len(row)) for c in range(len(self.headers))]
        lines = ["|" + "|".join(f" {cell.ljust(widths[c])} " for c, cell in enumerate(row)) + "|" for row in rows]
        lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
        return "\n".join(lines) + "\n"


class LatexTableWriter(MarkdownTableWriter):
    """The harness builds one beside the Markdown writer but does not print it."""
