package etcdlock

import (
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Grant, share and intent keys decode to their key and kind, every one of
// them lies in that key's range and in no other key's, whatever bytes the
// keys hold, and the kinds sort as the acquires' compares assume:
// exclusive grants below start+exclEndMark, shares in [start+exclEndMark,
// start+holdEndMark), the intent key above.
func TestGrantKeys(t *testing.T) {
	l := &Lock{prefix: DefaultPrefix}
	keys := []string{"a", "a/", "ab", "a\x00", "a\x00\x01", "a\x00\x010123456789abcdef", "\x00", "\x00\xff", "a\xff", "a\x00\x02"}
	for _, k := range keys {
		for _, id := range []clientv3.LeaseID{1, 0x694d9b7a1c2e3f40, 1<<63 - 1} {
			gk := l.grantKey(k, id)
			if len(gk) != len(l.prefix)+len(escape(k))+len(keyEnd)+idLen {
				t.Fatalf("grantKey(%q, %x) = %q: length %d", k, id, gk, len(gk))
			}
			got, ok := userKey(gk[len(l.prefix):])
			if !ok || got != k {
				t.Fatalf("userKey(grantKey(%q, %x)) = %q, %v", k, id, got, ok)
			}
			start := grantStart(gk)
			if s := l.keyStart(k); s != start {
				t.Fatalf("keyStart(%q) = %q; grantStart = %q", k, s, start)
			}
			sk, ik := l.shareKey(k, id), start+intentMark
			for ek, kind := range map[string]keyKind{gk: kindExclusive, sk: kindShare, ik: kindIntent} {
				got, gotKind, ok := parseKey(ek[len(l.prefix):])
				if !ok || got != k || gotKind != kind {
					t.Fatalf("parseKey(%q) = %q, %v, %v; want %q, %v", ek, got, gotKind, ok, k, kind)
				}
				for _, other := range keys {
					s, e := l.keyRange(other)
					if in := s <= ek && ek < e; in != (other == k) {
						t.Fatalf("key %q of %q in the range [%q, %q) of %q: %v", ek, k, s, e, other, in)
					}
				}
			}
			if !(gk < start+exclEndMark && start+exclEndMark <= sk && sk < start+holdEndMark && start+holdEndMark <= ik) {
				t.Fatalf("key %q: grant %q, share %q, intent %q out of order", k, gk, sk, ik)
			}
			// List's range read of a user prefix p finds the grant exactly
			// when p is a prefix of the key.
			for _, p := range keys {
				if got := strings.HasPrefix(gk, l.prefix+escape(p)); got != strings.HasPrefix(k, p) {
					t.Fatalf("prefix %q matches grant key of %q: %v", p, k, got)
				}
			}
		}
	}
	for _, bad := range []string{"", "k", "k\x00\x01", "k\x00\x01xyz", "k\x00\x010123456789abcdeg", "k\x00\x00\x010123456789abcdef", "\x00\x010123456789abcdef"} {
		if k, ok := userKey(bad); ok {
			t.Errorf("userKey(%q) = %q, true; want false", bad, k)
		}
	}
}
