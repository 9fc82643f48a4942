#!/usr/bin/env bash
# Install the Debian packages the tests need (tests/system-packages.txt) that are not installed yet.
#   tools/ensure-system-packages.sh [LIST]     (`make test` runs it before pytest)
# Nothing missing: exits 0 at once (one dpkg-query, no apt-get). Missing, as root: apt-get update, then
# apt-get install -y --no-install-recommends of exactly the missing ones, waiting up to 10 minutes for
# the apt/dpkg locks another process holds. Missing, not root: one line naming them and the command
# to run, exit 1 (before any test starts).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
list=${1:-$repo/tests/system-packages.txt}
lock_timeout=600

mapfile -t wanted < <(sed -e 's/#.*//' "$list" | awk 'NF { print $1 }')
[ "${#wanted[@]}" -gt 0 ] || { echo "$0: $list names no package" >&2; exit 2; }

missing_packages() {
  # dpkg-query prints the packages it knows (status installed, config-files, ...) and says nothing
  # on stdout about those it has never seen; anything not fully installed counts as missing.
  local installed
  installed=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${wanted[@]}" 2>/dev/null |
              awk '$2 == "installed" || $2 == "triggers-pending" || $2 == "triggers-awaited" { print $1 }') || true
  local p
  for p in "${wanted[@]}"; do
    grep -qxF -- "$p" <<<"$installed" || echo "$p"
  done
}

command -v dpkg-query >/dev/null || {
  echo "clusterforge: the tests need Debian/Ubuntu packages (dpkg-query not found); install the equivalents of: ${wanted[*]}" >&2
  exit 1
}
mapfile -t missing < <(missing_packages)
[ "${#missing[@]}" -gt 0 ] || exit 0

install_cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" != 0 ]; then
  echo "clusterforge: the tests need Debian packages that are not installed (${missing[*]}); run as root: apt-get update && $install_cmd" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "clusterforge: installing the Debian packages the tests need (${list#"$repo"/}): ${missing[*]}"
# apt-get install waits for the dpkg lock itself (DPkg::Lock::Timeout); apt-get update does not wait
# for the lists lock, so it is retried while another apt holds that lock.
deadline=$((SECONDS + lock_timeout)) said=
while :; do
  if err=$(apt-get -q -o DPkg::Lock::Timeout="$lock_timeout" update 2>&1 >/dev/null); then
    break
  fi
  if grep -q "Could not get lock" <<<"$err" && [ "$SECONDS" -lt "$deadline" ]; then
    [ -n "$said" ] || echo "clusterforge: another apt holds the package lists lock; waiting for it" >&2
    said=1
    sleep 5
    continue
  fi
  printf '%s\n' "$err" >&2
  exit 1
done
apt-get -q -o DPkg::Lock::Timeout="$lock_timeout" install -y --no-install-recommends "${missing[@]}"

mapfile -t still < <(missing_packages)
if [ "${#still[@]}" -gt 0 ]; then
  echo "clusterforge: still not installed after apt-get install: ${still[*]}" >&2
  exit 1
fi
