#!/usr/bin/env bash
# npm run setup:lm-eval: EleutherAI's lm-evaluation-harness in .venv-lm-eval/ (git-ignored), for `npm run lm-eval`
# (docs/evaluation.md). lm_eval is installed without its declared dependencies (--no-deps): one of them, `evaluate`,
# is not on the package mirror, and the harness imports it only for metrics outside its own registry, which the tasks
# of tasks/lm-eval/ do not use. What the hf model and those tasks do import is installed by name; pytablewriter (also
# not on the mirror), which the command line imports only to print its closing table, is the tiny stand-in in
# tasks/lm-eval/shim/. On failure it says why in one line and exits 1; nothing outside .venv-lm-eval/ is written.
set -uo pipefail
cd "$(dirname "$0")/.."

venv=.venv-lm-eval
lm_eval_version=0.4.13
fail() {
  echo "lm-eval: not set up: $1"
  exit 1
}
pip_install() { "$venv/bin/pip" install --quiet --retries 1 --timeout 15 "$@"; }

[ -x "$venv/bin/python" ] || python3 -m venv "$venv" || fail "python3 -m venv $venv failed"
pip_install torch transformers safetensors accelerate datasets sacrebleu dill jinja2 more-itertools tqdm typing_extensions numpy ||
  fail "pip could not install torch, transformers, datasets, accelerate (no mirror or network?)"
pip_install --no-deps "lm_eval==$lm_eval_version" || fail "pip could not install lm_eval==$lm_eval_version"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || fail "$venv/bin/python does not run"
cp tasks/lm-eval/shim/pytablewriter.py "$site/pytablewriter.py" || fail "could not copy the pytablewriter stand-in into $site"
"$venv/bin/python" -c 'import lm_eval.models.huggingface, lm_eval.api.metrics, lm_eval.utils' || fail "lm_eval does not import (see above)"
echo "lm-eval: set up in $venv (lm_eval $lm_eval_version)"
