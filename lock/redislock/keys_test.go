package redislock

import (
	"testing"
	"time"
)

func TestKeyEncoding(t *testing.T) {
	l := &Lock{prefix: DefaultPrefix, owner: "owner"}
	seen := map[string]string{}
	for _, k := range []string{"x", "{x}", "a{b}c", "{}x", "}x", "x}", "{", "}", "a}b{c", "sem/{pool}/slot/1", "über/κλειδί"} {
		enc := encodeKey(k)
		if back, ok := decodeKey(enc); !ok || back != k {
			t.Errorf("decode(encode(%q)) = %q, %v", k, back, ok)
		}
		if other, dup := seen[enc]; dup {
			t.Errorf("%q and %q encode alike: %q", k, other, enc)
		}
		seen[enc] = k
		lk, fk := l.lockKey(k), l.fenceKey(k)
		// keysOf builds all four in one string, with the value's tail.
		keys, tail := l.keysOf(k, []byte("id"))
		if want := (redisKeys{lk, fk, l.queueKey(k), l.deadlinesKey(k)}); keys != want || tail != "id|"+l.owner {
			t.Errorf("keysOf(%q) = %q, %q; want %q, %q", k, keys, tail, want, "id|"+l.owner)
		}
		if tag := hashTag(lk); tag == "" || tag != hashTag(fk) {
			t.Errorf("%q: lock key %q (tag %q) and fence key %q (tag %q) must share a non-empty tag", k, lk, hashTag(lk), fk, hashTag(fk))
		}
	}
	// Keys with a tag of their own keep it.
	if hashTag(l.lockKey("sem/{pool}/slot/1")) != "pool" || hashTag(l.lockKey("sem/{pool}/slot/2")) != "pool" {
		t.Errorf("a key's own hash tag is not kept")
	}
}

func TestParseHanded(t *testing.T) {
	to, waiter, g, ok := parseHanded("k\x00w\x0012\x00345\x006")
	if !ok || to != "k\x00w" || waiter != "w" || g.token != 12 || g.since != "345" || g.sinceUs != 345 || g.waited != 6*time.Millisecond {
		t.Errorf("parseHanded = %q, %q, %+v, %v", to, waiter, g, ok)
	}
	// A key may hold NUL bytes: the fields are read from the right. Read
	// from the left, such a message had six parts and was dropped.
	to, waiter, g, ok = parseHanded("k\x00\x00x\x00w\x0012\x00345\x006")
	if !ok || to != "k\x00\x00x\x00w" || waiter != "w" || g.token != 12 || g.since != "345" || g.waited != 6*time.Millisecond {
		t.Errorf("parseHanded of a key with NULs = %q, %q, %+v, %v", to, waiter, g, ok)
	}
	for _, bad := range []string{"k\x00w\x0012\x00345", "w\x0012\x00345\x006", "k\x00\x0012\x00345\x006", "k\x00w\x00x\x00345\x006", "k\x00w\x0012\x00x\x006", ""} {
		if _, _, _, ok := parseHanded(bad); ok {
			t.Errorf("parseHanded(%q) accepted", bad)
		}
	}
}
