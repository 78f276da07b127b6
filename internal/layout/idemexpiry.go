package layout

import (
	"crypto/sha256"
	"strings"
	"time"
)

// IdempotencyExpiryPrefix lists the idempotency records by the hour they
// expire: index/idempotency-expiry/{YYYYMMDDHH}/{sha256 of the key}.json,
// written create-only with a record's first write, so the janitor reads
// only the records of hours that have passed (docs/design.md#idempotency,
// "Expiry index").
const IdempotencyExpiryPrefix = "index/idempotency-expiry/"

// expiryHour is the layout of an expiry entry's hour folder (UTC).
const expiryHour = "2006010215"

// IdempotencyExpiryKey is the expiry entry of the idempotency record at
// recordKey (IdempotencyKey) filed under the hour of at, or false when
// recordKey is not a record's key.
func IdempotencyExpiryKey(recordKey string, at time.Time) (string, bool) {
	if !IsIdempotencyKey(recordKey) {
		return "", false
	}
	sum := strings.TrimPrefix(recordKey, IdempotencyPrefix)
	return IdempotencyExpiryPrefix + at.UTC().Format(expiryHour) + "/" + sum, true
}

// IdempotencyExpiryHourPrefix is the List prefix of the expiry entries of
// the hour of at; keys of earlier hours sort before it.
func IdempotencyExpiryHourPrefix(at time.Time) string {
	return IdempotencyExpiryPrefix + at.UTC().Format(expiryHour) + "/"
}

// ParseIdempotencyExpiryKey returns the hour (its start, UTC) and the
// record key of an expiry entry key, or false for any other key.
func ParseIdempotencyExpiryKey(key string) (hour time.Time, recordKey string, ok bool) {
	rest, ok := strings.CutPrefix(key, IdempotencyExpiryPrefix)
	if !ok {
		return time.Time{}, "", false
	}
	h, file, ok := strings.Cut(rest, "/")
	if !ok || len(h) != len(expiryHour) || len(file) != 2*sha256.Size+len(".json") {
		return time.Time{}, "", false
	}
	hour, err := time.Parse(expiryHour, h)
	if err != nil {
		return time.Time{}, "", false
	}
	recordKey = IdempotencyPrefix + file
	if !IsIdempotencyKey(recordKey) {
		return time.Time{}, "", false
	}
	return hour, recordKey, true
}
