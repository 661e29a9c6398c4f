#!/usr/bin/env bash
# Builds the binaries the testbed runs, from Go modules, into a folder keyed by version.
#
#   [KUBE_PROXY_VERSION=v1.MINOR.PATCH] [KCM_VERSION=v1.MINOR.PATCH] hack/testbed-bins.sh OUT_DIR ETCD_VERSION APISERVER_VERSION...
#
# For every kube-apiserver version (and kube-proxy at $KUBE_PROXY_VERSION, kube-controller-manager at
# $KCM_VERSION, when set) it writes a tiny
# module whose main is the upstream entry point (k8s.io/kubernetes/cmd/<component>/app), with one
# replace line per staging module, taken from k8s.io/kubernetes' own go.mod at that version (it points
# them at ./staging/src/...; we point them at the published k8s.io/<name> v0.<minor>.<patch> modules).
# Binaries that already exist are left alone.
set -euo pipefail

out=$1; etcd_version=$2; shift 2
mkdir -p "$out/bin" "$out/src"
out=$(cd "$out" && pwd)
export CGO_ENABLED=0 GOFLAGS=-mod=mod

log() { printf 'testbed-bins: %s\n' "$*" >&2; }

# build_k8s COMPONENT VERSION COMMAND: COMPONENT is a folder of k8s.io/kubernetes/cmd, COMMAND the
# constructor of its cobra command in that folder's app package.
build_k8s() {
	local c=$1 v=$2 command=$3 bin="$out/bin/$1-$2"
	[[ -x $bin ]] && { log "$c $v present"; return; }
	[[ $v =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { log "bad $c version $v (want v1.MINOR.PATCH)"; exit 1; }
	local minor=${BASH_REMATCH[1]} patch=${BASH_REMATCH[2]}
	local src="$out/src/$c-$v"
	log "building $c $v (several minutes on a cold cache)"
	rm -rf "$src" && mkdir -p "$src"
	local upstream_mod
	upstream_mod=$(cd "$src" && go mod download -json "k8s.io/kubernetes@$v" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
	[[ -f $upstream_mod ]] || { log "could not download k8s.io/kubernetes@$v"; exit 1; }
	local go_line
	go_line=$(grep -m1 '^go ' "$upstream_mod")
	{
		echo "module skewgate.local/testbed/$c"
		echo
		echo "$go_line"
		echo
		echo "require k8s.io/kubernetes $v"
		echo
		echo "replace ("
		# "	k8s.io/api => ./staging/src/k8s.io/api"  ->  "	k8s.io/api => k8s.io/api v0.36.3"
		sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/[a-z0-9-]*$#\t\1 => \1 v0.'"$minor.$patch"'#p' "$upstream_mod"
		echo ")"
	} >"$src/go.mod"
	cat >"$src/main.go" <<GO
// Command $c is the upstream $c, built from its Go module for the testbed.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/$c/app"
)

func main() { os.Exit(cli.Run(app.$command())) }
GO
	local vpkg=k8s.io/component-base/version
	(cd "$src" && go mod tidy && go build -trimpath -o "$bin.tmp" \
		-ldflags "-s -w -X $vpkg.gitVersion=$v -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean" .)
	mv "$bin.tmp" "$bin"
	log "built $bin"
}

build_etcd() {
	local v=$1 bin="$out/bin/etcd-$1"
	[[ -x $bin ]] && { log "etcd $v present"; return; }
	local src="$out/src/etcd-$v"
	log "building etcd $v"
	rm -rf "$src" && mkdir -p "$src"
	cat >"$src/go.mod" <<MOD
module skewgate.local/testbed/etcd

go 1.24

require go.etcd.io/etcd/server/v3 $v
MOD
	cat >"$src/main.go" <<'GO'
// Command etcd is the upstream etcd server entry point, built from its Go module for the testbed.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
	(cd "$src" && go mod tidy && go build -trimpath -ldflags "-s -w" -o "$bin.tmp" .)
	mv "$bin.tmp" "$bin"
	log "built $bin"
}

build_etcd "$etcd_version"
for v in "$@"; do build_k8s kube-apiserver "$v" NewAPIServerCommand; done
# kube-proxy (cmd/kube-proxy/app.NewProxyCommand) programs the `kubernetes` Service in the in-cluster
# tests (test/incluster); it is built from the same k8s.io/kubernetes module as the newest apiserver.
if [[ -n ${KUBE_PROXY_VERSION:-} ]]; then build_k8s kube-proxy "$KUBE_PROXY_VERSION" NewProxyCommand; fi
# kube-controller-manager (cmd/kube-controller-manager/app.NewControllerManagerCommand) runs the
# namespace controller in test/controllers; it is built from the same k8s.io/kubernetes module as the
# oldest apiserver, the one a not-yet-upgraded node runs beside it.
if [[ -n ${KCM_VERSION:-} ]]; then build_k8s kube-controller-manager "$KCM_VERSION" NewControllerManagerCommand; fi
