// Package chaos holds the fault-injection tier of leasehold's tests: seeded
// nemesis runs per backend that cut, delay and reset the clients'
// connections (through internal/faultproxy), restart the server and stall
// holders past their ttl, while workers contend for a key and write to a
// fenced resource; afterwards a checker goes through the recorded history.
//
// It has no code outside its tests. `go test ./chaos/` runs a short seeded
// slice; LEASEHOLD_CHAOS=1 runs the long tier (a minute per backend);
// LEASEHOLD_CHAOS_SEED=N replays one seed. A failing run prints its seed and
// the path of the history it saved.
package chaos
