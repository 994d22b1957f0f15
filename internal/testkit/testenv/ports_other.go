//go:build !linux

package testenv

import "net"

// listensOn cannot tell without Linux's /proc, and reports true.
func listensOn(pid, port int) bool { return true }

// holdsSocket cannot tell without Linux's /proc, and reports false.
func holdsSocket(pid int, inode string) bool { return false }

// socketInode cannot tell without Linux's /proc, and reports none.
func socketInode(local, remote *net.TCPAddr) string { return "" }
