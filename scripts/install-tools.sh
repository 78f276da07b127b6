#!/usr/bin/env bash
# Installs the tools the project needs into $(go env GOPATH)/bin when they are
# missing. With no arguments it installs all of them; name the ones you want
# otherwise:
#
#   scripts/install-tools.sh                 staticcheck, minio, chromium and strace
#   scripts/install-tools.sh chromium        only the browser of the page test
#   scripts/install-tools.sh staticcheck minio
#
# staticcheck  the linter .ci/run runs
# minio        the pinned MinIO server the s3store tests run against (built
#              from source: about 8 minutes on 2 cores, once)
# chromium     Debian's chromium, which the live page's browser test drives,
#              when neither CHROMIUM_BIN nor /usr/bin/chromium is there
# strace       Debian's strace, which filestore's system-call budget test
#              runs its writes under
set -euo pipefail

STATICCHECK_VERSION=v0.8.2
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c

bin="$(go env GOPATH)/bin"
export PATH="$bin:$PATH"

install_staticcheck() {
  if ! command -v staticcheck >/dev/null 2>&1; then
    echo "installing staticcheck ${STATICCHECK_VERSION}"
    go install "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}"
  fi
}

install_minio() {
  if [ -z "${MINIO_BIN:-}" ] && ! command -v minio >/dev/null 2>&1; then
    echo "installing minio ${MINIO_VERSION} (about 8 minutes, once)"
    go install "github.com/minio/minio@${MINIO_VERSION}"
  fi
}

# Debian packages need root or passwordless sudo; without either this says
# so and goes on, and the test that needs the package then skips, unless
# CI's CONVEYOR_REQUIRE_CHROMIUM / CONVEYOR_REQUIRE_STRACE is set: then it
# fails.
apt_install() {
  local pkg="$1" why="$2" as_root=none
  if [ "$(id -u)" -eq 0 ]; then
    as_root=""
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root="sudo -n"
  fi
  if [ "$as_root" = none ]; then
    echo "$pkg is missing and this is neither root nor passwordless sudo: not installing it (install Debian's $pkg)" >&2
    return
  fi
  echo "installing Debian's $pkg for $why (apt-get update, apt-get install $pkg; once)"
  # Waits for another apt's lock instead of failing on it.
  $as_root env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600 update
  $as_root env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=600 install "$pkg"
}

install_chromium() {
  if [ ! -x "${CHROMIUM_BIN:-/usr/bin/chromium}" ]; then
    apt_install chromium "the live page's browser test (set CHROMIUM_BIN to use another)"
  fi
}

install_strace() {
  if ! command -v strace >/dev/null 2>&1; then
    apt_install strace "filestore's system-call budget test"
  fi
}

tools=("$@")
if [ ${#tools[@]} -eq 0 ]; then
  tools=(staticcheck minio chromium strace)
fi
for t in "${tools[@]}"; do
  case "$t" in
    staticcheck | minio | chromium | strace) "install_$t" ;;
    *)
      echo "install-tools.sh: unknown tool '$t' (staticcheck, minio, chromium or strace)" >&2
      exit 2
      ;;
  esac
done
