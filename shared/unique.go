package spool

import "encoding/base64"

// UniqueKVKey maps a unique key (Spool-Unique-Key, any bytes up to
// MaxUniqueKeyLen) to its key in the unique bucket: unpadded base64url, so
// any key is a valid KV key and distinct unique keys never collide. The
// value stored under it is the id of the task holding the key.
func UniqueKVKey(key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(key))
}
