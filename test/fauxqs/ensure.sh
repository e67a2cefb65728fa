#!/usr/bin/env bash
# Installs fauxqs (pinned by package-lock.json) into test/fauxqs/node_modules
# unless it is already there. Idempotent and quiet: prints nothing on success,
# npm's errors and a one-line reason on failure (exit status non-zero).
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	echo "ensure.sh: node and npm are required to run the local SQS server (fauxqs)" >&2
	exit 1
fi
# fauxqs 1.9.2 runs on Node >= 20.
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 20 ]; then
	echo "ensure.sh: fauxqs needs Node >= 20, found $(node --version)" >&2
	exit 1
fi

# Test binaries of several packages may run this at once: one installs, the
# others wait and then find the install done.
if command -v flock >/dev/null 2>&1; then
	exec 9>.ensure.lock
	flock 9
fi

# node_modules/.package-lock.json is written by npm ci last; its presence with
# fauxqs's package.json means a completed install of this lockfile.
if [ -f node_modules/fauxqs/package.json ] && [ -f node_modules/local-aws-sqs/package.json ] && [ -f node_modules/.package-lock.json ] &&
	[ node_modules/.package-lock.json -nt package-lock.json ]; then
	exit 0
fi

# cookie@2 (fastify -> light-my-request) declares node >= 22; fauxqs runs fine on
# Node 20.20 (the whole sqsqueue suite passes there);
# --engine-strict=false keeps that a non-fatal warning, --loglevel=error hides it.
if ! out="$(npm ci --no-audit --no-fund --loglevel=error --engine-strict=false 2>&1)"; then
	printf '%s\n' "$out" >&2
	echo "ensure.sh: npm ci failed in $(pwd)" >&2
	exit 1
fi
