// Package hashslot maps keys to Redis Cluster's 16384 hash slots, as every
// cluster-mode client computes them: CRC16 (XMODEM) of the key, or of its
// hash tag, the part between the first "{" and the first "}" after it when
// that part is not empty, so that keys sharing a tag share a slot.
package hashslot

import "errors"

// Count is the number of hash slots.
const Count = 16384

// Of returns key's hash slot.
func Of(key string) int {
	return int(crc16(tag(key))) % Count
}

// tag is the part of key that is hashed.
func tag(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j == i+1 {
					return key // "{}" is no tag: the whole key is hashed
				}
				return key[i+1 : j]
			}
		}
		return key
	}
	return key
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), the one Redis
// Cluster specifies.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ table[byte(crc>>8)^s[i]]
	}
	return crc
}

var table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// ErrCrossSlot is the refusal of a request whose keys do not all hash to
// one slot, or to one group of slots, where they must: Redis Cluster's
// CROSSSLOT.
var ErrCrossSlot = errors.New("CROSSSLOT Keys in request don't hash to the same slot")
