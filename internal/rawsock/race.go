//go:build race

package rawsock

import "syscall"

// Under the race detector the syscall package's calls are used: they tell
// the detector what the kernel read and wrote, and that what a socket
// reads may answer what another wrote, which it sees through them alone
// (a client on the other end of a test's connection uses them too).

func sysRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), p)
	return n, errnoOf(err)
}

func sysWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), p)
	return n, errnoOf(err)
}

func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return err.(syscall.Errno)
}
