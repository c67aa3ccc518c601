#!/bin/sh
# Builds the browser console (web/ui) into web/dist, which web/web.go embeds
# with go:embed. web/dist is committed so that `go build` needs no npm; run
# this after changing anything under web/ui and commit the result.
#
#   scripts/web-build.sh          build web/dist
#   scripts/web-build.sh --check  fail if the committed web/dist is stale
set -eu

root=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
ui="$root/web/ui"
dist="$root/web/dist"

check=0
if [ "${1:-}" = "--check" ]; then check=1; fi

cd "$ui"
# npm ci installs exactly package-lock.json. esbuild's postinstall only
# verifies its platform binary, which npm already placed under @esbuild/.
if [ ! -x node_modules/.bin/esbuild ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
	npm ci --no-audit --no-fund --ignore-scripts
fi

out="$dist"
if [ "$check" = 1 ]; then out=$(mktemp -d); trap 'rm -rf "$out"' EXIT; fi
mkdir -p "$out"

# One bundle: app.js, and app.css (xterm.css plus ours, from the CSS imports
# in src/main.js). IIFE so index.html needs no module script; minified with
# no source map to keep the embedded bundle small.
node_modules/.bin/esbuild src/main.js \
	--bundle --minify --format=iife --target=es2020 \
	--legal-comments=eof --log-level=warning \
	--outfile="$out/app.js"
cp index.html "$out/index.html"

if [ "$check" = 1 ]; then
	if ! diff -r "$dist" "$out" >/dev/null; then
		echo "web/dist is out of date: run scripts/web-build.sh" >&2
		exit 1
	fi
	echo "web/dist is up to date"
	exit 0
fi
ls -l "$dist"
