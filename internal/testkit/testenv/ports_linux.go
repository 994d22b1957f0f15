package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// listensOn reports whether the process pid holds a socket listening on the
// loopback TCP port. It reads /proc, and reports true when it cannot tell
// (no /proc, or another user's process it may not inspect); a process that
// has exited holds nothing.
func listensOn(pid, port int) bool {
	inodes, ok := listeningInodes(port)
	if !ok {
		return true
	}
	fds := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(fds)
	if err != nil {
		return errors.Is(err, fs.ErrPermission)
	}
	for _, e := range entries {
		link, err := os.Readlink(fds + "/" + e.Name())
		if err != nil {
			continue
		}
		inode, found := strings.CutPrefix(link, "socket:[")
		if found && inodes[strings.TrimSuffix(inode, "]")] {
			return true
		}
	}
	return false
}

// listeningInodes returns the inodes of the IPv4 sockets listening on
// 127.0.0.1:port or on any address at port, from /proc/net/tcp.
func listeningInodes(port int) (map[string]bool, bool) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return nil, false
	}
	defer f.Close()
	const listen = "0A"
	suffix := ":" + strings.ToUpper(strconv.FormatInt(int64(port), 16))
	for len(suffix) < 5 {
		suffix = ":0" + suffix[1:]
	}
	inodes := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != listen {
			continue
		}
		if local := fields[1]; local == "0100007F"+suffix || local == "00000000"+suffix {
			inodes[fields[9]] = true
		}
	}
	return inodes, sc.Err() == nil
}
