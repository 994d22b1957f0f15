package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"time"
)

// neighbourArg, as the only argument, makes the command the CPU-bound
// neighbour instead of the report (see neighbourMain).
const neighbourArg = "-neighbour-process"

// neighbourMain keeps one core busy until its standard input closes: the
// report holds the other end, so the neighbour ends with the report even
// when the report is killed.
func neighbourMain() {
	runtime.GOMAXPROCS(1)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	x := uint64(1)
	for {
		x = x*6364136223846793005 + 1442695040888963407
		if x == 0 { // never: keeps the loop from being optimised away
			fmt.Println(x)
		}
	}
}

// neighbourProc is a running CPU-bound neighbour process.
type neighbourProc struct {
	cmd     *exec.Cmd
	stdin   io.Closer
	started time.Time
}

// startNeighbour starts this executable as the neighbour. It ends when
// ctx ends, when stop is called, or when the report exits.
func startNeighbour(ctx context.Context) (*neighbourProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, neighbourArg)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the CPU-bound neighbour: %w", err)
	}
	return &neighbourProc{cmd: cmd, stdin: stdin, started: time.Now()}, nil
}

// stop kills the neighbour and returns the cores it used on average
// (its CPU time over its lifetime: about 1 when it had its core).
func (n *neighbourProc) stop() float64 {
	_ = n.stdin.Close()
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
	wall := time.Since(n.started)
	st := n.cmd.ProcessState
	if st == nil || wall <= 0 {
		return 0
	}
	return float64(st.UserTime()+st.SystemTime()) / float64(wall)
}
