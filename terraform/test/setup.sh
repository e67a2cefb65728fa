#!/usr/bin/env bash
# Prepares what the Terraform module's tests need, offline (the Terraform
# Registry is not reachable; the npm registry and the Go module proxy are),
# under terraform/test/.cache (git-ignored):
#
#   1. npm ci of @cdktf/provider-aws, pinned by cdktf/package-lock.json: its
#      generated bindings record the real hashicorp/aws schema and version;
#   2. genschema and the schema-only provider (schemaprovider/, its own Go
#      module, built with terraform-plugin-framework);
#   3. the schema of every aws_* resource and data source the module's .tf
#      files use, beside the provider in a filesystem mirror laid out as
#      registry.terraform.io/hashicorp/aws/<version>/<os>_<arch>/, and a CLI
#      config (terraformrc) that installs hashicorp/aws from that mirror;
#   4. tflint, with go install at a pinned version.
#
# Idempotent: each step is skipped when its inputs are unchanged. Safe to run
# concurrently (flock). Prints KEY=VALUE lines on success; on failure, the
# failing tool's output and a one-line reason, and a non-zero exit status.
set -euo pipefail

TFLINT_VERSION=v0.64.0

here="$(cd "$(dirname "$0")" && pwd)"
module="$(dirname "$here")"
cache="$here/.cache"

fail() {
	echo "setup.sh: $*" >&2
	exit 1
}

for tool in go node npm flock sha256sum; do
	command -v "$tool" >/dev/null 2>&1 || fail "$tool is required (Go, Node.js >= 20 with npm, util-linux flock, coreutils)"
done

mkdir -p "$cache/bin"
exec 9>"$cache/.lock"
flock 9

# quiet runs a command, printing its output only if it fails.
quiet() {
	local out
	if ! out="$("$@" 2>&1)"; then
		printf '%s\n' "$out" >&2
		fail "failed: $*"
	fi
}

# 1. The cdktf package, reinstalled when the lockfile changes.
npm_dir="$cache/npm"
lock_sum="$(sha256sum "$here/cdktf/package-lock.json" | cut -c1-64)"
if [ "$(cat "$npm_dir/.installed" 2>/dev/null || true)" != "$lock_sum" ]; then
	rm -rf "$npm_dir"
	mkdir -p "$npm_dir"
	cp "$here/cdktf/package.json" "$here/cdktf/package-lock.json" "$here/cdktf/.npmrc" "$npm_dir/"
	(cd "$npm_dir" && quiet npm ci --no-audit --no-fund --loglevel=error)
	echo "$lock_sum" >"$npm_dir/.installed"
fi
pkg="$npm_dir/node_modules/@cdktf/provider-aws"

# 2. genschema and the provider, rebuilt when their sources change.
src_sum="$(cd "$here/schemaprovider" && find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-64)"
if [ "$(cat "$cache/bin/.built" 2>/dev/null || true)" != "$src_sum" ]; then
	(cd "$here/schemaprovider" &&
		quiet go build -o "$cache/bin/genschema" ./cmd/genschema &&
		quiet go build -o "$cache/bin/terraform-provider-aws" .)
	echo "$src_sum" >"$cache/bin/.built"
fi

# 3. The schema and the mirror. Files are replaced by rename, never
# rewritten in place: another test process may be running the provider.
version="$("$cache/bin/genschema" -package "$pkg" -print-version)"
quiet "$cache/bin/genschema" -package "$pkg" -out "$cache/schema.json" -scan "$module"
platform="$(go env GOOS)_$(go env GOARCH)"
target="$cache/mirror/registry.terraform.io/hashicorp/aws/$version/$platform"
mkdir -p "$target"
install_file() { # src dst
	if ! cmp -s "$1" "$2"; then
		cp "$1" "$2.tmp"
		mv -f "$2.tmp" "$2"
	fi
}
install_file "$cache/schema.json" "$target/schema.json"
install_file "$cache/bin/terraform-provider-aws" "$target/terraform-provider-aws_v${version}_x5"
chmod +x "$target/terraform-provider-aws_v${version}_x5"

cat >"$cache/terraformrc.new" <<EOF
# Written by terraform/test/setup.sh: hashicorp/aws from the local mirror
# (a schema-only stand-in), nothing from the network.
provider_installation {
  filesystem_mirror {
    path    = "$cache/mirror"
    include = ["registry.terraform.io/hashicorp/aws"]
  }
}
EOF
install_file "$cache/terraformrc.new" "$cache/terraformrc"
rm -f "$cache/terraformrc.new"

# 4. tflint (the first build takes a few minutes).
if ! "$cache/bin/tflint" --version 2>/dev/null | grep -q "version ${TFLINT_VERSION#v}\$"; then
	GOBIN="$cache/bin" quiet go install "github.com/terraform-linters/tflint@$TFLINT_VERSION"
fi

echo "TF_CLI_CONFIG_FILE=$cache/terraformrc"
echo "TFLINT=$cache/bin/tflint"
echo "PROVIDER_VERSION=$version"
echo "PROVIDER_SCHEMA=$cache/schema.json"
