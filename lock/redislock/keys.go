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
	switch {
	case hashTag(k) != "":
		return "t:" + k
	case !strings.ContainsAny(k, "{}"):
		return "k:{" + k + "}"
	default:
		sum := sha256.Sum256([]byte(k))
		return "h:{" + hex.EncodeToString(sum[:8]) + "}" + k
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

func (l *Lock) lockKey(k string) string  { return l.prefix + "l" + encodeKey(k) }
func (l *Lock) fenceKey(k string) string { return l.prefix + "f" + encodeKey(k) }

// queueKeys are the KEYS of release.lua, force_release.lua and leave.lua:
// the lock key, its fence counter, its wait queue and the waiters' entries.
func (l *Lock) queueKeys(k string) []string {
	return []string{l.lockKey(k), l.fenceKey(k), l.queueKey(k), l.deadlinesKey(k)}
}

func (l *Lock) queueKey(k string) string { return l.prefix + "q" + encodeKey(k) }
func (l *Lock) deadlinesKey(k string) string {
	return l.prefix + "d" + encodeKey(k)
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
