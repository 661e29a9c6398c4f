#!/usr/bin/env bash
# Installs the Debian packages the testbed needs beyond Go: iproute2 (`ip`, test/netns sets up the
# in-cluster tests' network namespace with it), iptables (kube-proxy's iptables mode programs the
# `kubernetes` Service with it; it clears conntrack entries over netlink, so no conntrack tool) and
# util-linux (`unshare`). Idempotent: does nothing when every command is there.
#
#   hack/testbed-packages.sh
set -euo pipefail

log() { printf 'testbed-packages: %s\n' "$*" >&2; }

declare -A pkg=([ip]=iproute2 [iptables]=iptables [unshare]=util-linux)
missing=()
for cmd in "${!pkg[@]}"; do
	command -v "$cmd" >/dev/null || PATH=$PATH:/usr/sbin:/sbin command -v "$cmd" >/dev/null || missing+=("${pkg[$cmd]}")
done
[[ ${#missing[@]} -eq 0 ]] && { log "present"; exit 0; }
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
	# Only the in-cluster tests need them, and they need root anyway: they fail with the reason.
	log "missing packages ${missing[*]} (test/incluster needs them): install them as root, with apt-get on Debian"
	exit 0
fi
log "installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
log "installed ${missing[*]}"
