#!/usr/bin/env bash
# Is the committed JupyterLab bundle (interdist/labextension/) what extension/ builds?
#
# Rebuilds it from this working tree's extension/ (sources, package.json, package-lock.json) in a
# temporary copy -- `npm ci`, then `npm run build` -- and fails if the result differs from
# interdist/labextension/ by one byte or one file. Nothing in the working tree is touched.
# Needs Node >= 20 with npm, the npm registry (or a filled npm cache), and `jupyter-builder`
# (on PATH, or in ../.venv/bin: `pip install -e '.[dev]'` brings it with jupyterlab).
#
# The build is reproducible: same inputs, same bytes, wherever the checkout lies
# (extension/webpack.config.js says why that needed named module ids).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
if [ -x "$root/.venv/bin/jupyter-builder" ]; then
    PATH="$root/.venv/bin:$PATH"
fi
command -v npm >/dev/null || { echo "check_bundle: npm not found (Node >= 20 is needed)" >&2; exit 2; }
command -v jupyter-builder >/dev/null || { echo "check_bundle: jupyter-builder not found (pip install -e '.[dev]')" >&2; exit 2; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/interdist"
# The build's inputs only: extension/ without what a local build or install left there.
tar -C "$root" -cf - --exclude=extension/node_modules --exclude=extension/lib \
    --exclude=extension/tsconfig.tsbuildinfo extension | tar -C "$tmp" -xf -

cd "$tmp/extension"
npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
npm run build --silent >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log" >&2; exit 1; }

if ! diff -rq "$root/interdist/labextension" "$tmp/interdist/labextension"; then
    echo "check_bundle: interdist/labextension/ is not what extension/ builds." >&2
    echo "  Rebuild and commit it:  cd extension && npm ci && npm run build" >&2
    exit 1
fi
echo "check_bundle: interdist/labextension/ matches extension/"
