package semaphore

import (
	"context"
	"sort"
	"strconv"
	"strings"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Observation is what anyone can see of a semaphore through a backend's
// lock.Inspector, without taking part in it.
type Observation struct {
	Name string
	// Sizes lists the sizes that participants declared (their size
	// markers, "sem/{name}/size/<s>"), ascending. A participant declares at
	// its first use and then at most once a minute, and a declaration
	// lasts a minute: none means no participant acquired recently; more
	// than one means participants disagree (ErrSizeMismatch).
	Sizes []int
	// Held lists the held slots by slot number; Held is true in each.
	Held []SlotState
	// Ignored counts the keys of this semaphore ("sem/{name}/size/…" or
	// "…/slot/…") whose number New could not have made: not a canonical
	// decimal, a size outside [1, MaxSize] or a slot outside [0, MaxSize).
	// Any client can write such keys; they are left out of Sizes and Held.
	Ignored int
}

// Size is the semaphore's size as far as it can be observed: the largest
// declared size, or one more than the highest slot held when that is
// larger; 0 when nothing is known.
func (o Observation) Size() int {
	n := 0
	if len(o.Sizes) > 0 {
		n = o.Sizes[len(o.Sizes)-1]
	}
	if len(o.Held) > 0 {
		n = max(n, o.Held[len(o.Held)-1].Slot+1)
	}
	return n
}

// Slots returns every slot of a semaphore of size slots, held or free, by
// slot number (as Occupancy does); held slots at or above size are listed
// too, after the others. A size outside [0, MaxSize] is taken as the
// nearest bound.
func (o Observation) Slots(size int) []SlotState {
	size = min(max(size, 0), MaxSize)
	out := make([]SlotState, size)
	for i := range out {
		out[i].Slot = i
	}
	for _, s := range o.Held {
		if s.Slot < size {
			out[s.Slot] = s
		} else {
			out = append(out, s)
		}
	}
	return out
}

// Observe reports the semaphore called name from the grants l lists, in
// one List call. Unlike Occupancy it writes nothing: Occupancy declares
// its own size first, which a tool that only watches must not do. It
// needs a backend with lock.Inspector. The name follows New's rule
// (backendkit.CheckName): another is an error matching lock.ErrInvalidArgument.
func Observe(ctx context.Context, l lock.Lock, name string) (Observation, error) {
	if err := backendkit.CheckName("semaphore name", name); err != nil {
		return Observation{}, backendkit.Invalid("semaphore", "%w", err)
	}
	all, err := observe(ctx, l, name+"}/")
	if err != nil {
		return Observation{}, err
	}
	for _, o := range all {
		if o.Name == name {
			return o, nil
		}
	}
	return Observation{Name: name}, nil
}

// ObserveAll reports every semaphore whose name starts with prefix and
// that has a grant (a held slot or a size marker), sorted by name, in one
// List call. It needs a backend with lock.Inspector.
func ObserveAll(ctx context.Context, l lock.Lock, prefix string) ([]Observation, error) {
	return observe(ctx, l, prefix)
}

// observe lists "sem/{"+prefix and groups the grants by semaphore.
func observe(ctx context.Context, l lock.Lock, prefix string) ([]Observation, error) {
	in, ok := l.(lock.Inspector)
	if !ok {
		return nil, backendkit.Invalid("semaphore", "the backend %T cannot list its grants", l)
	}
	if err := backendkit.CheckContext(ctx); err != nil {
		return nil, err
	}
	grants, err := in.List(ctx, "sem/{"+prefix)
	if err != nil {
		return nil, err
	}
	byName := map[string]*Observation{}
	var names []string
	for _, g := range grants {
		name, kind, n, ok := parseKey(g.Key)
		if name == "" {
			continue
		}
		o := byName[name]
		if o == nil {
			o = &Observation{Name: name}
			byName[name] = o
			names = append(names, name)
		}
		switch {
		case !ok:
			o.Ignored++
		case kind == "size":
			o.Sizes = append(o.Sizes, n)
		default:
			o.Held = append(o.Held, SlotState{Slot: n, Held: true, Grant: g})
		}
	}
	sort.Strings(names)
	out := make([]Observation, len(names))
	for i, name := range names {
		o := byName[name]
		sort.Ints(o.Sizes)
		sort.Slice(o.Held, func(a, b int) bool { return o.Held[a].Slot < o.Held[b].Slot })
		out[i] = *o
	}
	return out, nil
}

// parseKey splits "sem/{<name>}/<kind>/<n>" (kind "slot" or "size"). The
// keys come from a backend, where any client may have written them: only
// what New could have made is accepted (a decimal number without sign or
// leading zeros, a size in [1, MaxSize], a slot in [0, MaxSize)), so that
// no one can make an observer allocate for billions of slots. A key of a
// semaphore's shape whose number is refused comes back with its name and
// ok false (counted in Observation.Ignored); name is empty for any other.
func parseKey(key string) (name, kind string, n int, ok bool) {
	rest, found := strings.CutPrefix(key, "sem/{")
	if !found {
		return "", "", 0, false
	}
	name, rest, found = strings.Cut(rest, "}/")
	if !found {
		return "", "", 0, false
	}
	kind, num, found := strings.Cut(rest, "/")
	if !found || (kind != "slot" && kind != "size") {
		return "", "", 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || strconv.Itoa(n) != num ||
		(kind == "size" && (n < 1 || n > MaxSize)) || (kind == "slot" && (n < 0 || n >= MaxSize)) {
		return name, kind, 0, false
	}
	return name, kind, n, true
}
