package main_test

import (
	"encoding/hex"

	"github.com/zeebo/xxh3"
)

// xxh3Sum is the peer protocol's checksum header of body.
func xxh3Sum(body []byte) string {
	s := xxh3.Hash128(body).Bytes()
	return hex.EncodeToString(s[:])
}
