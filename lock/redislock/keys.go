package redislock

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Key layout. A user's key k becomes two Redis keys that always share one
// Cluster hash slot:
//
//	<prefix>l<enc(k)>   the grant: "<token>|<granted at µs>|<attempt>|<owner>", ttl as PX
//	<prefix>f<enc(k)>   the fence counter: the last token drawn
//	<prefix>q<enc(k)>   the waiters queued for k (a sorted set, by arrival)
//	<prefix>d<enc(k)>   their deadlines (a hash): a waiter that stops trying
//	                    loses its place
//	<prefix>s<enc(k)>   the shares (a sorted set: each share's value, by
//	                    expiry in server ms); while it has any, the grant
//	                    key holds the marker "S|<writer intent ms>" with
//	                    the latest share's expiry (see shares.lua)
//	<prefix>a<enc(k)>   the shares' index by attempt id (a hash: attempt →
//	                    share), so that a retried acquire finds its share
//
// enc(k) carries the hash tag and is reversible, so Inspector can list keys:
//
//	t:<k>                  k has a hash tag of its own ({…}); it keeps it
//	k:{<k>}                k has no braces: k itself is the tag
//	h:{<16 hex>}<k>        anything else: a digest of k is the tag
//
// so "x" and "{x}" stay distinct keys, and all slots of one semaphore (whose
// keys share a tag) live in one slot.

// hashTag returns the part of s that Redis Cluster hashes: the content of
// the first {…} with something inside, or "" when there is none.
func hashTag(s string) string {
	open := strings.IndexByte(s, '{')
	if open < 0 {
		return ""
	}
	end := strings.IndexByte(s[open+1:], '}')
	if end <= 0 {
		return ""
	}
	return s[open+1 : open+1+end]
}

func encodeKey(k string) string {
	var b strings.Builder
	writeEncoded(&b, k)
	return b.String()
}

// encodedLen is len(encodeKey(k)).
func encodedLen(k string) int {
	switch {
	case hashTag(k) != "":
		return len("t:") + len(k)
	case !strings.ContainsAny(k, "{}"):
		return len("k:{}") + len(k)
	}
	return len("h:{}") + 16 + len(k)
}

func writeEncoded(b *strings.Builder, k string) {
	switch encodedLen(k) - len(k) {
	case len("t:"):
		b.WriteString("t:")
		b.WriteString(k)
	case len("k:{}"):
		b.WriteString("k:{")
		b.WriteString(k)
		b.WriteByte('}')
	default:
		sum := sha256.Sum256([]byte(k))
		var tag [16]byte
		hex.Encode(tag[:], sum[:8])
		b.WriteString("h:{")
		b.Write(tag[:])
		b.WriteByte('}')
		b.WriteString(k)
	}
}

// decodeKey reverses encodeKey; ok is false for anything else.
func decodeKey(enc string) (string, bool) {
	switch {
	case strings.HasPrefix(enc, "t:"):
		return enc[2:], true
	case strings.HasPrefix(enc, "k:{") && strings.HasSuffix(enc, "}"):
		return enc[3 : len(enc)-1], true
	case strings.HasPrefix(enc, "h:{") && len(enc) > 3+16+1 && enc[3+16] == '}':
		return enc[3+16+1:], true
	}
	return "", false
}

// redisKeys are the Redis keys of a user's key: its grant, fence counter,
// wait queue and waiters' entries, in the order of the scripts' KEYS
// (release.lua, force_release.lua, leave.lua; acquire.lua takes the first
// two, or all four for a queued attempt).
type redisKeys [4]string

// keysOf returns k's Redis keys and, for an id, the tail of a grant's
// value "<id>|<owner>", all in one string (one allocation).
func (l *Lock) keysOf(k string, id []byte) (keys redisKeys, tail string) {
	var b strings.Builder
	size := 4 * (len(l.prefix) + 1 + encodedLen(k))
	if id != nil {
		size += len(id) + 1 + len(l.owner)
	}
	b.Grow(size)
	var ends [4]int
	encStart := len(l.prefix) + 1
	for i, kind := range "lfqd" {
		b.WriteString(l.prefix)
		b.WriteByte(byte(kind))
		if i == 0 {
			writeEncoded(&b, k)
		} else {
			// Copied within b, which was grown to hold it all.
			b.WriteString(b.String()[encStart:ends[0]])
		}
		ends[i] = b.Len()
	}
	if id != nil {
		b.Write(id)
		b.WriteByte('|')
		b.WriteString(l.owner)
	}
	all := b.String()
	start := 0
	for i, end := range ends {
		keys[i] = all[start:end]
		start = end
	}
	return keys, all[start:]
}

func (l *Lock) lockKey(k string) string      { return l.prefix + "l" + encodeKey(k) }
func (l *Lock) fenceKey(k string) string     { return l.prefix + "f" + encodeKey(k) }
func (l *Lock) queueKey(k string) string     { return l.prefix + "q" + encodeKey(k) }
func (l *Lock) deadlinesKey(k string) string { return l.prefix + "d" + encodeKey(k) }

// queueKeys are redisKeys as a slice.
func (l *Lock) queueKeys(k string) []string {
	keys, _ := l.keysOf(k, nil)
	return keys[:]
}

// globEscape escapes the characters SCAN's MATCH treats specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// shareKeys are the Redis keys of the shares of the user's key whose
// Redis keys are keys, in the same slot: "<prefix>s<enc(k)>" and their
// index by attempt id, "<prefix>a<enc(k)>", in one string.
func (l *Lock) shareKeys(keys redisKeys) (shares, attempts string) {
	enc := keys[0][len(l.prefix)+1:]
	both := l.prefix + "s" + enc + l.prefix + "a" + enc
	return both[:len(both)/2], both[len(both)/2:]
}
