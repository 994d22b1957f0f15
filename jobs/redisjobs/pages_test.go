package redisjobs_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
)

// betweenPages runs between (after) the first listing page of its client
// and the second.
type betweenPages struct {
	pages int
	do    func()
}

func (h *betweenPages) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *betweenPages) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *betweenPages) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); err == nil && len(args) > 1 && slices.Contains([]any{redisjobs.ListScript(), redisjobs.DeadScript()}, args[1]) {
			if h.pages++; h.pages == 1 && h.do != nil {
				h.do()
			}
		}
		return err
	}
}

// A listing in pages lists every entry that did not change, whatever the
// others do between its pages. Four jobs share one score (as a heartbeat
// gives a chunk's jobs one deadline), the pages hold two, and between the first page and the
// second one of the jobs listed leaves the index (a completion, a
// heartbeat that extends it, a purge): the first listed, before the last
// one the page read, or that last one itself. The second page skipped c
// (b, in the dead set's reverse order) when the first job left: it went
// on at an offset into the score's members, counting the one gone.
func TestPagesListEveryUnchangedEntry(t *testing.T) {
	redisjobs.SetListChunk(t, 2)
	addr := testenv.Redis(t).Addr()
	for _, listing := range []string{"InFlight", "Expired", "Dead"} {
		for _, leaver := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/job %d leaves", listing, leaver), func(t *testing.T) {
				hook := &betweenPages{}
				c := newClient(t, addr)
				c.AddHook(hook)
				lister, ns := newRegistry(t, c, "pages")
				other, err := redisjobs.New(newClient(t, addr), ns)
				if err != nil {
					t.Fatal(err)
				}
				ctx := t.Context()
				ids := []string{"a", "b", "c", "d"}
				refs := make([]jobs.Ref, len(ids))
				for i, id := range ids {
					j, err := other.Track(ctx, jobs.Job{ID: id, Owner: "w"}, time.Hour)
					if err != nil {
						t.Fatal(err)
					}
					refs[i] = j.Ref()
				}
				list := func() ([]string, error) {
					var out []string
					var err error
					switch listing {
					case "InFlight", "Expired":
						var js []jobs.Job
						if listing == "InFlight" {
							js, err = lister.InFlight(ctx, 0)
						} else {
							js, err = lister.Expired(ctx, 0)
						}
						for _, j := range js {
							out = append(out, j.ID)
						}
					case "Dead":
						var ds []jobs.DeadJob
						ds, err = lister.Dead(ctx, 0)
						for _, d := range ds {
							out = append(out, d.ID)
						}
					}
					return out, err
				}
				leave := func() error {
					switch listing {
					case "InFlight":
						return other.Done(ctx, refs[leaver])
					case "Expired":
						_, err := other.Heartbeat(ctx, refs[leaver:leaver+1], time.Hour)
						return err
					default: // listed the most recent first, then by ID from the last
						return other.Purge(ctx, ids[len(ids)-1-leaver])
					}
				}
				index := "{" + ns + "}:deadlines"
				if listing == "Dead" {
					for _, ref := range refs {
						if err := other.Bury(ctx, ref, "test"); err != nil {
							t.Fatal(err)
						}
					}
					index = "{" + ns + "}:deadset"
				}
				// One score for the four: a deadline in 2001 (expired), or a
				// time of death.
				for _, id := range ids {
					if err := c.ZAdd(ctx, index, redis.Z{Score: 1e12, Member: id}).Err(); err != nil {
						t.Fatal(err)
					}
				}
				if got, err := list(); err != nil || len(got) != len(ids) { // and the scripts loaded
					t.Fatalf("listed %q, %v before any change", got, err)
				}
				hook.pages = 0
				hook.do = func() {
					if err := leave(); err != nil {
						t.Error(err)
					}
				}
				got, err := list()
				if err != nil {
					t.Fatal(err)
				}
				if hook.pages < 2 {
					t.Fatalf("%d pages", hook.pages)
				}
				gone := leaver
				if listing == "Dead" {
					gone = len(ids) - 1 - leaver
				}
				want := slices.Delete(slices.Clone(ids), gone, gone+1)
				for _, id := range want {
					if !slices.Contains(got, id) {
						t.Fatalf("listed %q: %s, unchanged throughout, is missing", got, id)
					}
				}
				if len(got) != len(slices.Compact(slices.Sorted(slices.Values(got)))) {
					t.Fatalf("listed %q: an ID twice", got)
				}
			})
		}
	}
}
