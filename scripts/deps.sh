#!/usr/bin/env bash
# Checks that this machine has what `make test` needs beyond Go, and installs
# what is missing with Debian's apt-get when it may: as root, or with
# --install (through sudo when not root; .ci/run passes it). Otherwise it
# stops at once and prints the one command that installs the rest.
#
#   chromium       the dashboard's browser tests (tests/ui); SPOOL_CHROMIUM
#                  names another binary, SPOOL_SKIP_BROWSER=1 skips them
#   script         util-linux's, in bsdutils: the terminal `nats stream view`
#                  needs (tests/natscli)
#   node, npm      the Node.js example (tests/nodeexample), at the version
#                  examples/node/package.json states in "engines"
#   redis-server   the asynq peer test of spool-bench (tests/cmd/spool-bench)
set -euo pipefail
cd "$(dirname "$0")/.."

install=no
case "${1:-}" in
--install) install=yes ;;
"") ;;
*)
	echo "usage: scripts/deps.sh [--install]" >&2
	exit 2
	;;
esac

# The one Node.js version requirement: the example's "engines" field.
node_min=$(sed -n 's/.*"node": *">= *\([0-9][0-9]*\)".*/\1/p' examples/node/package.json | head -n 1)
if [ -z "$node_min" ]; then
	echo "deps: examples/node/package.json states no \"engines\": {\"node\": \">=N\"}" >&2
	exit 1
fi
# Every other Node.js program of the tree states the same one.
for pkg in tests/cmd/spool-bench/bullmq/package.json; do
	other=$(sed -n 's/.*"node": *">= *\([0-9][0-9]*\)".*/\1/p' "$pkg" | head -n 1)
	if [ "$other" != "$node_min" ]; then
		echo "deps: $pkg states Node.js >=${other:-nothing} in \"engines\", examples/node/package.json >=$node_min: state one version" >&2
		exit 1
	fi
done

missing=() # Debian packages
why=()     # one line per package: what needs it
need() { missing+=("$1"); why+=("  $1: $2"); }

if [ -z "${SPOOL_CHROMIUM:-}" ] && [ "${SPOOL_SKIP_BROWSER:-}" != 1 ] &&
	! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
	need chromium "the dashboard's browser tests (tests/ui)"
fi
command -v script >/dev/null || need bsdutils "script, the terminal for nats stream view (tests/natscli)"
command -v node >/dev/null || need nodejs "node $node_min or newer, for the Node.js example (tests/nodeexample)"
command -v npm >/dev/null || need npm "npm, to install the Node.js example's packages (make examples)"
command -v redis-server >/dev/null || need redis-server "the asynq peer test (tests/cmd/spool-bench)"

if [ ${#missing[@]} -gt 0 ]; then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo "
	cmd="${sudo}apt-get update && ${sudo}apt-get install -y --no-install-recommends ${missing[*]}"
	if command -v apt-get >/dev/null && { [ -z "$sudo" ] || [ $install = yes ]; }; then
		echo "deps: installing ${missing[*]}" >&2
		${sudo}apt-get update
		${sudo}env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
	else
		{
			echo "make test needs what this machine lacks:"
			printf '%s\n' "${why[@]}"
			if command -v apt-get >/dev/null; then
				echo "Install with:"
				echo "  $cmd"
			else
				echo "Install these with the system's package manager (the names above are Debian's)."
			fi
			echo "then run make test again."
		} >&2
		exit 1
	fi
fi

# Debian ships Node.js 20 from trixie on (bookworm has 18). The packages of
# examples/node and of the bench's BullMQ program are pinned to releases that
# run on it, and the .npmrc beside each sets engine-strict, so npm ci refuses
# a package this node is too old for.
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt "$node_min" ]; then
	{
		echo "make test needs Node.js $node_min or newer for the Node.js example; this node is $(node --version)."
		echo "Install a newer one: Debian trixie and later ship it (apt-get install nodejs npm);"
		echo "elsewhere take a release from https://nodejs.org/en/download and put it first on PATH."
	} >&2
	exit 1
fi
