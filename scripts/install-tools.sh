#!/usr/bin/env bash
# Installs the tools the project needs into $(go env GOPATH)/bin when they are
# missing: staticcheck, and the pinned MinIO server the s3store tests run
# against. Building MinIO takes about 8 minutes on 2 cores, once.
set -euo pipefail

STATICCHECK_VERSION=v0.8.2
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c

bin="$(go env GOPATH)/bin"
export PATH="$bin:$PATH"

if ! command -v staticcheck >/dev/null 2>&1; then
  echo "installing staticcheck ${STATICCHECK_VERSION}"
  go install "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}"
fi

if [ -z "${MINIO_BIN:-}" ] && ! command -v minio >/dev/null 2>&1; then
  echo "installing minio ${MINIO_VERSION} (about 8 minutes, once)"
  go install "github.com/minio/minio@${MINIO_VERSION}"
fi
