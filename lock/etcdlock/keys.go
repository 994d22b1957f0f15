package etcdlock

import (
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Grant keys. A grant of the user's key k is the etcd key
//
//	prefix + enc(k) + <grant id, 16 hex digits>          (exclusive)
//	prefix + enc(k) + "s" + <grant id, 16 hex digits>    (shared)
//
// where enc(k) is k with each NUL byte written as NUL 0xff, followed by
// NUL 0x01. A writer waiting for k marks it with the intent key
// prefix + enc(k) + "w" (see shared.go). The grant id is the lease the
// grant was made on, unique among the grants that can exist at once (a
// lease goes back to the spares only after its grant is deleted); a
// batch's grant, on a lease shared with others, has an id from a counter
// of its batch instead (batch.go), unique among the grants of one lease
// over its life. Every
// grant, share and intent key of k, and no key of another key, starts with
// prefix+enc(k), the key's range: enc is a prefix-free code, and it keeps
// the order and the prefixes of keys, so List's range read of
// prefix+enc'(p) (enc without its end) finds every key starting with p,
// sorted. Within the range the exclusive grants come first (hex digits
// sort below "g"), then the shares, then the intent key, so one range read
// covers each kind the acquires check:
//
//	[start, start+"g")  exclusive grants: what a share excludes
//	[start, start+"t")  exclusive grants and shares: what an exclusive excludes
//	[start, start+"\x02") everything, intent included: what a group excludes
//
// Acquire puts the grant key if its range is empty (a compare over the
// range); Release deletes its own grant key, which names this grant
// alone, so it needs no compare: a plain delete, which etcd 3.4 served
// measurably faster than a Txn that compares and deletes (acquire+release
// about 5% faster in an op-by-op comparison on a 2-core machine).
const (
	keyEnd      = "\x00\x01" // ends enc(k)
	nulByte     = "\x00\xff" // a NUL byte of k
	idLen       = 16         // hex digits of the grant id
	shareMark   = "s"        // between enc(k) and a share's grant id
	intentMark  = "w"        // after enc(k): the intent key
	exclEndMark = "g"        // above every hex digit: the end of the exclusive grants
	holdEndMark = "t"        // above shareMark: the end of the shares
)

// escape is enc(k) without its end.
func escape(k string) string { return strings.ReplaceAll(k, "\x00", nulByte) }

// keyStart is the start of key's range, prefix+enc(k).
func (l *Lock) keyStart(key string) string { return l.prefix + escape(key) + keyEnd }

// keyRange is the range of everything of key: [start, end).
func (l *Lock) keyRange(key string) (start, end string) {
	start = l.keyStart(key)
	return start, rangeEnd(start)
}

// grantStart is the start of the range of a grant key's key.
func grantStart(gk string) string { return gk[:len(gk)-idLen] }

// rangeEnd is the end of the range of keys starting with start, which ends
// with keyEnd: the same with its last byte one higher.
func rangeEnd(start string) string { return start[:len(start)-1] + "\x02" }

// grantKey is the etcd key of an exclusive grant of key on lease id, built
// in one allocation.
func (l *Lock) grantKey(key string, id clientv3.LeaseID) string { return l.markedKey(key, "", id) }

// shareKey is the etcd key of a shared grant of key on lease id.
func (l *Lock) shareKey(key string, id clientv3.LeaseID) string {
	return l.markedKey(key, shareMark, id)
}

func (l *Lock) markedKey(key, mark string, id clientv3.LeaseID) string {
	if strings.IndexByte(key, 0) >= 0 {
		key = escape(key)
	}
	n := len(l.prefix) + len(key) + len(keyEnd) + len(mark) + idLen
	var hex [idLen]byte
	for j, v := idLen-1, uint64(id); j >= 0; j, v = j-1, v>>4 {
		hex[j] = hexDigits[v&0xf]
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(l.prefix)
	b.WriteString(key)
	b.WriteString(keyEnd)
	b.WriteString(mark)
	b.Write(hex[:])
	return b.String()
}

const hexDigits = "0123456789abcdef"

// keyKind is what a key in a key's range is.
type keyKind uint8

const (
	kindExclusive keyKind = iota
	kindShare
	kindIntent
)

// userKey is the user's key of a grant key (without the prefix), or false
// for a key this package did not write. Intent keys count: their deletion
// wakes waiting readers.
func userKey(rest string) (string, bool) {
	k, _, ok := parseKey(rest)
	return k, ok
}

// parseKey is the user's key of a grant, share or intent key (without the
// prefix) and its kind, or false for a key this package did not write.
func parseKey(rest string) (string, keyKind, bool) {
	var enc string
	kind := kindExclusive
	switch {
	case strings.HasSuffix(rest, keyEnd+intentMark):
		enc, kind = rest[:len(rest)-len(intentMark)], kindIntent
	case len(rest) < len(keyEnd)+idLen || strings.IndexFunc(rest[len(rest)-idLen:], notHex) >= 0:
		return "", 0, false
	default:
		enc = rest[:len(rest)-idLen]
		if strings.HasSuffix(enc, keyEnd+shareMark) {
			enc, kind = enc[:len(enc)-len(shareMark)], kindShare
		}
	}
	if !strings.HasSuffix(enc, keyEnd) {
		return "", 0, false
	}
	enc = enc[:len(enc)-len(keyEnd)]
	if strings.IndexByte(enc, 0) < 0 {
		return enc, kind, enc != ""
	}
	var b strings.Builder
	for i := 0; i < len(enc); i++ {
		if enc[i] != 0 {
			b.WriteByte(enc[i])
			continue
		}
		if i+1 == len(enc) || enc[i+1] != 0xff {
			return "", 0, false
		}
		b.WriteByte(0)
		i++
	}
	return b.String(), kind, true
}

func notHex(r rune) bool { return !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') }
