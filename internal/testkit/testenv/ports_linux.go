package testenv

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
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
	holds, err := holdsAny(pid, inodes)
	if err != nil {
		return errors.Is(err, fs.ErrPermission)
	}
	return holds
}

// holdsAny reports whether the process pid has a descriptor on one of the
// sockets whose inodes are given.
func holdsAny(pid int, inodes map[string]bool) (bool, error) {
	fds := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(fds)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		link, err := os.Readlink(fds + "/" + e.Name())
		if err != nil {
			continue
		}
		inode, found := strings.CutPrefix(link, "socket:[")
		if found && inodes[strings.TrimSuffix(inode, "]")] {
			return true, nil
		}
	}
	return false, nil
}

// holdsSocket reports whether the process pid has a descriptor on the
// socket inode.
func holdsSocket(pid int, inode string) bool {
	holds, _ := holdsAny(pid, map[string]bool{inode: true})
	return holds
}

// socketInode returns the inode of the IPv4 TCP socket from local to
// remote, from /proc/net/tcp, or "" when there is none.
func socketInode(local, remote *net.TCPAddr) string {
	l, r := procAddr(local), procAddr(remote)
	if l == "" || r == "" {
		return ""
	}
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 10 && fields[1] == l && fields[2] == r {
			return fields[9]
		}
	}
	return ""
}

// procAddr is a as /proc/net/tcp writes it: the IPv4 address (in network
// order) read as a number in the host's order, and the port, in hex.
func procAddr(a *net.TCPAddr) string {
	ip := a.IP.To4()
	if ip == nil {
		return ""
	}
	return fmt.Sprintf("%08X:%04X", binary.NativeEndian.Uint32(ip), a.Port)
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
