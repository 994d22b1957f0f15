package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

// FuzzParseCommand: any command line (arguments separated by newlines)
// parses without a panic; a rejected one is a usage error (exit 2, and
// valid JSON under --json); an accepted one runs on the in-process
// backend without a panic and without exit 1 (nothing there is
// unavailable). The seeds run under plain go test.
func FuzzParseCommand(f *testing.F) {
	for _, s := range []string{
		"locks", "locks\norders/", "locks\n--limit\n1", "locks\n--limit\n0", "locks\n--timeout\n0s", "locks\n--json",
		"semaphore\ndb", "semaphore\ndb\n--size\n3", "semaphore\ndb\n--size\n3000000000", "semaphore\ndb\n--size\n-5", "semaphore\n",
		"semaphore\nsem{x}", "leader", "leader\n", "leader\nbilling", "leader\na\x00b", "timers", "timers\n\"\\x00\"",
		"jobs", "jobs\nretry\n", "jobs\nretry\n\"a\\x00b\"", "jobs\npurge\nx", "jobs\npurge\nx\n--yes", "jobs\nfrob\nx",
		"jobs\n--lease\n-1s", "jobs\n--lease\n1h", "release\nk", "release\n\n--force", "release\nk\n--force", "release\n\"unterminated",
		"release\n" + strings.Repeat("k", 2000) + "\n--force", "dashboard\n--addr\n0.0.0.0:0", "dashboard\nextra", "nope",
		"locks\n--help", "locks\n-h", "locks\n--json=false\n--bogus", "semaphore\nx\n--size=4096\n--json",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Split(line, "\n")
		if args[0] == "" {
			return // Run prints the usage for no command
		}
		cmd, err := parseCommand(args, func(string) string { return "" })
		if err != nil {
			var ue usageError
			if !errors.As(err, &ue) && !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("%q: %v is not a usage error", args, err)
			}
			var out bytes.Buffer
			e := &env{stdout: &out, stderr: &out, now: time.Now}
			e.c.json = wantsJSON(args)
			code := e.report(err)
			if errors.Is(err, flag.ErrHelp) {
				return
			}
			if code != ExitUsage {
				t.Fatalf("%q: exit %d for %v", args, code, err)
			}
			if e.c.json && !json.Valid(out.Bytes()) {
				t.Fatalf("%q: not JSON: %s", args, out.String())
			}
			return
		}
		if cmd.name == "dashboard" {
			return
		}
		cmd.c.backend, cmd.c.jobsURL, cmd.c.timeout = "mem://fuzz", "", time.Second
		var out bytes.Buffer
		e := &env{stdout: &out, stderr: &out, c: cmd.c, now: time.Now}
		err = e.exec(t.Context(), cmd)
		if code := e.report(err); code == ExitFailed {
			t.Fatalf("%q: exit 1 on the in-process backend: %v", args, err)
		}
	})
}
